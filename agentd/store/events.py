"""The event log: reading it, appending a service-level event, proving its hash chain (docs/design.md, "Events"), and
pruning its oldest prefix behind a checkpoint the chain continues from."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from agentd import frozen_value
from agentd.hashing import GENESIS_HASH, chain_hash, event_body_text, sha256_hex
from agentd.records import TASK_STATUSES, TERMINAL_STATUSES, RuntimeEvent
from agentd.records.event_names import LIVE_EVENT_TYPES
from agentd.store.base import StoreBase, loads, ts
from agentd.store.columns import event_filter
from agentd.store.rows import EVENT_BODY_FIELDS, event_from_row

LIVE_STATUSES = tuple(status for status in TASK_STATUSES if status not in TERMINAL_STATUSES)


@frozen_value
class ChainBreak:
    sequence: int
    reason: str


@frozen_value
class EventCheckpoint:
    """A pruned prefix of the chain: its last sequence and hash, and how many events went with it."""

    through_sequence: int
    through_hash: str
    removed: int


@frozen_value
class EventPrefix:
    """What pruning up to a cutoff would remove: events through this sequence (0: none), how many."""

    through: int
    count: int


class EventVerbs(StoreBase):
    def read_events(
        self,
        *,
        after: int = 0,
        task_id: int | None = None,
        workflow_id: int | None = None,
        types: tuple[str, ...] = (),
        since: datetime | None = None,
        limit: int = 1000,
        last: bool = False,
        before: int | None = None,
        until: datetime | None = None,
        newest_first: bool = False,
    ) -> list[RuntimeEvent]:
        """Events in sequence order after `after` (and before `before`), optionally for one task or
        workflow, of some types, at or after `since` and before `until`; `last`: the newest `limit` of
        them (still oldest first); `newest_first`: the newest `limit`, newest first."""
        where, params = event_filter(
            after=after,
            before=before,
            task_id=task_id,
            workflow_id=workflow_id,
            types=tuple(types),
            since=None if since is None else ts(since),
            until=None if until is None else ts(until),
        )
        order = "DESC" if last or newest_first else "ASC"
        rows = self.tx.execute(
            f"SELECT * FROM events WHERE {where} ORDER BY sequence {order} LIMIT ?", (*params, limit)
        ).fetchall()
        events = [event_from_row(r) for r in rows]
        return events[::-1] if last and not newest_first else events

    def chain_head(self) -> tuple[int, str] | None:
        """The last event's (sequence, hash): what a service publishes for auditors to hold."""
        row = self.tx.execute("SELECT sequence, hash FROM events ORDER BY sequence DESC LIMIT 1").fetchone()
        return (row[0], row[1]) if row else None

    def chain_rows(self, after: int, through: int, limit: int = 5000) -> list[tuple[Any, ...]]:
        """The events after `after` up to `through`, each as a row of CHAIN_COLUMNS (all that proves it): what
        the archive uploads as a segment of the chain (agentd/archive/)."""
        return self.tx.tuples(
            f"SELECT {', '.join(CHAIN_COLUMNS)} FROM events"
            " WHERE sequence > ? AND sequence <= ? ORDER BY sequence LIMIT ?",
            (after, through, limit),
        )

    def event_hash(self, sequence: int) -> str | None:
        row = self.tx.execute("SELECT hash FROM events WHERE sequence = ?", (sequence,)).fetchone()
        return row[0] if row else None

    def sealed_manifests(self, attempt_id: str | None = None) -> dict[str, tuple[int, str]]:
        """attempt_id → (sequence, manifest sha256) as each attempt's task_attempt_finished event
        recorded it (events from before agentd recorded it have none); of one attempt, or all. A payload that
        is not JSON (an edit: the events table holds no CHECK since migration 0019) records none, and the
        chain names it."""
        rows = self.tx.execute(
            """SELECT attempt_id, sequence,
                      CASE WHEN json_valid(payload) THEN json_extract(payload, '$.manifest_sha256') END FROM events
               WHERE type = 'task_attempt_finished' AND attempt_id IS NOT NULL AND ?1 IN (attempt_id, '*')""",
            (attempt_id or "*",),
        ).fetchall()
        return {row[0]: (row[1], row[2]) for row in rows if isinstance(row[2], str)}

    def enqueued_event_id(self, task_id: int) -> str | None:
        """The ULID of the event that put the task in the queue (None once retention pruned it)."""
        row = self.tx.execute(
            "SELECT event_id FROM events WHERE type = 'task_enqueued' AND task_id = ? ORDER BY sequence LIMIT 1",
            (task_id,),
        ).fetchone()
        return row[0] if row else None

    def event_count(self) -> int:
        return int(self.tx.execute("SELECT COUNT(*) FROM events").fetchone()[0])

    def event_sequence_reached(self) -> int:
        """How far the sequence ever went (AUTOINCREMENT's high-water mark): above the last event's
        sequence only if events were removed from the end."""
        row = self.tx.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        return int(row[0]) if row else 0

    def last_event_sequence(self) -> int:
        return int(self.tx.execute("SELECT COALESCE(MAX(sequence), 0) FROM events").fetchone()[0])

    def record_event(self, event_type: str, now: datetime, payload: dict[str, Any] | None = None) -> None:
        """A service-level event with no other state change (dispatch_started, dispatch_idle, …)."""
        with self.transaction():
            self.tx.event(event_type, now, payload=payload)

    def record_activity(
        self, task_id: int, attempt_id: str, events: Sequence[tuple[str, dict[str, Any]]], now: datetime
    ) -> None:
        """What a running attempt did since the last batch (docs/live.md), in order, in one transaction.
        Not durable on its own: a power cut may lose the last batches, and the attempt's action trace,
        sealed with its outcome (a durable commit, which makes these durable too), still has every step."""
        if any(event_type not in LIVE_EVENT_TYPES for event_type, _ in events):
            raise ValueError(f"not an activity event type: {[t for t, _ in events if t not in LIVE_EVENT_TYPES]}")
        with self.transaction(durable=False):
            for event_type, payload in events:
                self.tx.event(event_type, now, task_id=task_id, attempt_id=attempt_id, payload=payload)

    def verify_event_chain(self, batch: int = 10_000) -> list[ChainBreak]:
        """Recompute every hash; each row must continue the previous one with no gaps. A pruned prefix
        (`agentd prune`) is accepted only where the latest checkpoint says it ends: the first event left
        continues the checkpoint's hash, and an events_pruned event in the chain confirms the checkpoint."""
        checkpoint = self.latest_event_checkpoint()
        walk = _ChainWalk(checkpoint)
        while rows := self.tx.tuples(_CHAIN_SELECT, (walk.after, batch)):  # every column of every event is read
            for row in rows:
                walk.check(row)
        if checkpoint is not None:
            walk.breaks += self._checkpoint_breaks(checkpoint, walk.confirmed)
        return walk.breaks

    def _checkpoint_breaks(self, checkpoint: EventCheckpoint, confirmed: bool) -> list[ChainBreak]:
        """The pruned prefix: confirmed inside the chain, and every event of it removed by a pruning."""
        through, found = checkpoint.through_sequence, []
        if not confirmed:
            found.append(
                ChainBreak(
                    through,
                    f"the checkpoint through sequence {through} is not confirmed by an events_pruned event: "
                    "events were removed outside `agentd prune`",
                )
            )
        counted = self.tx.execute("SELECT COALESCE(SUM(removed), 0) FROM event_checkpoints").fetchone()[0]
        if counted != through:
            found.append(
                ChainBreak(
                    through,
                    f"prunings removed {counted} of the {through} events through sequence {through}: "
                    "the others were removed outside `agentd prune`",
                )
            )
        return found

    def latest_event_checkpoint(self) -> EventCheckpoint | None:
        """Where the kept part of the chain starts, if a prefix was pruned."""
        row = self.tx.execute(
            "SELECT through_sequence, through_hash, removed FROM event_checkpoints ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return None if row is None else EventCheckpoint(row[0], row[1], row[2])

    def prunable_event_prefix(self, cutoff: datetime) -> EventPrefix:
        """The longest prefix of the chain that is all older than `cutoff` and ends before the first
        event of any task still live (so nothing of unfinished work is ever removed), and before the
        running dispatcher's boundary waiver (what `agentd status` shows ADVISORY by: the dispatcher that
        recorded it is the one its service row names, not stopped)."""
        live = ", ".join(f"'{status}'" for status in LIVE_STATUSES)
        young, oldest_live, waived, last = self.tx.execute(
            f"""SELECT (SELECT sequence FROM events WHERE timestamp >= ? ORDER BY sequence LIMIT 1),
                   (SELECT MIN((SELECT MIN(e.sequence) FROM events e WHERE e.task_id = t.id))
                      FROM tasks t WHERE t.status IN ({live})),
                   (SELECT w.sequence FROM (SELECT sequence, payload FROM events
                                             WHERE type = 'dispatch_boundary_waived'
                                             ORDER BY sequence DESC LIMIT 1) w
                      JOIN service_status s ON s.service = 'dispatch' AND s.status != 'stopped'
                       AND CASE WHEN json_valid(w.payload) THEN json_extract(w.payload, '$.pid') END = s.pid),
                   (SELECT MAX(sequence) FROM events)""",
            (ts(cutoff),),
        ).fetchone()
        if last is None:
            return EventPrefix(0, 0)
        through = min(x for x in (young, oldest_live, waived, last + 1) if x is not None) - 1
        count = self.tx.execute("SELECT COUNT(*) FROM events WHERE sequence <= ?", (through,)).fetchone()[0]
        return EventPrefix(through if count else 0, int(count))

    def prune_events(self, through: int, now: datetime, batch: int = 50_000) -> EventCheckpoint | None:
        """Remove the oldest events up to `through` (at most `batch` of them: one transaction holds the
        write lock briefly), leaving a checkpoint and an events_pruned event that continue the chain.
        None when nothing up to `through` is left."""
        with self.transaction():
            first = self.tx.execute("SELECT MIN(sequence) FROM events").fetchone()[0]
            if first is None or first > through:
                return None
            end = self.tx.execute(
                "SELECT sequence, hash FROM events WHERE sequence <= ? ORDER BY sequence DESC LIMIT 1",
                (min(through, first + batch - 1),),
            ).fetchone()
            removed = self.tx.execute("SELECT COUNT(*) FROM events WHERE sequence <= ?", (end[0],)).fetchone()[0]
            checkpoint = EventCheckpoint(end[0], end[1], int(removed))
            # The event first, so the table is never empty: the chain's next sequence and hash come from its tail.
            self.tx.event(
                "events_pruned",
                now,
                payload={"through_sequence": end[0], "through_hash": end[1], "removed": checkpoint.removed},
            )
            self.tx.execute("DELETE FROM events WHERE sequence <= ?", (end[0],))
            self.tx.execute(
                """INSERT INTO event_checkpoints (through_sequence, through_hash, removed, pruned_at)
                   VALUES (?, ?, ?, ?)""",
                (end[0], end[1], checkpoint.removed, ts(now)),
            )
        return checkpoint


CHAIN_COLUMNS = (*EVENT_BODY_FIELDS, "payload", "refs", "prev_hash", "hash")  # what proves an event: its row whole
_CHAIN_SELECT = f"SELECT {', '.join(CHAIN_COLUMNS)} FROM events WHERE sequence > ? ORDER BY sequence LIMIT ?"


def chain_breaks(rows: Sequence[Sequence[Any]], start: EventCheckpoint | None = None) -> list[ChainBreak]:
    """verify_event_chain's walk over rows held elsewhere (each a row of CHAIN_COLUMNS, in sequence order): a
    copy of the chain in an archive (agentd/archive/audit.py). `start`: where the rows continue from, when
    they do not begin at the first event."""
    walk = _ChainWalk(start)
    for row in rows:
        walk.check(tuple(row))
    return walk.breaks


_SEQUENCE, _TYPE = EVENT_BODY_FIELDS.index("sequence"), EVENT_BODY_FIELDS.index("type")


class _ChainWalk:
    """The verifier's state as it walks the chain in order."""

    def __init__(self, checkpoint: EventCheckpoint | None) -> None:
        self.checkpoint = checkpoint
        self.breaks: list[ChainBreak] = []
        self.prev_hash = checkpoint.through_hash if checkpoint else GENESIS_HASH
        self.expected = checkpoint.through_sequence + 1 if checkpoint else 1
        self.after = 0  # from the start: an event the checkpoint says was pruned must not be there
        self.confirmed = False
        self.first = True

    def check(self, row: tuple[Any, ...]) -> None:
        """One event (a row of CHAIN_COLUMNS) against the one before it."""
        *fields, payload, refs, prev_hash, event_hash = row
        sequence = fields[_SEQUENCE]
        if self.checkpoint and sequence <= self.checkpoint.through_sequence:
            reason = f"still present below the checkpoint through sequence {self.checkpoint.through_sequence}"
            self.breaks.append(ChainBreak(sequence, reason))
            self.after = sequence
            return
        if sequence != self.expected:
            self.breaks.append(ChainBreak(sequence, f"expected sequence {self.expected}: events are missing"))
        if prev_hash != self.prev_hash:
            previous = "the checkpoint of the pruned events" if self.first and self.checkpoint else "the previous event"
            self.breaks.append(ChainBreak(sequence, f"prev_hash does not match {previous}"))
        if not _hashed_as_stored(fields, payload, refs, prev_hash, event_hash):
            self._rehash(fields, payload, refs, prev_hash, event_hash)
        if self.checkpoint and fields[_TYPE] == "events_pruned":
            pruned = _loaded_object(payload)
            self.confirmed |= (pruned.get("through_sequence"), pruned.get("through_hash")) == (
                self.checkpoint.through_sequence,
                self.checkpoint.through_hash,
            )
        self.prev_hash, self.expected, self.after, self.first = event_hash, sequence + 1, sequence, False

    def _rehash(self, fields: list[Any], payload: Any, refs: Any, prev_hash: Any, event_hash: Any) -> None:
        """The event's hash over its body as parsed and written canonically: what an older agentd's payload
        text (not canonical) still matches, and what names an edit as one."""
        sequence = fields[_SEQUENCE]
        body = dict(zip(EVENT_BODY_FIELDS, fields, strict=True))
        try:
            body["payload"], body["refs"] = loads(payload), {} if refs == "{}" else loads(refs)
            matches = chain_hash(prev_hash, body) == event_hash
        except (ValueError, RecursionError) as exc:  # what agentd never writes: an edit, or an older agentd
            matches = False
            self.breaks.append(ChainBreak(sequence, f"its payload or refs is not JSON agentd can hold ({exc})"[:300]))
        if not matches:
            self.breaks.append(ChainBreak(sequence, "hash does not match the event's content"))


def _hashed_as_stored(fields: list[Any], payload: Any, refs: Any, prev_hash: Any, event_hash: Any) -> bool:
    """The hash over the body written from the row's own payload and refs text, unparsed (what agentd appends:
    their canonical text, agentd/hashing.py event_body_text). A match proves the row is what was hashed; no
    match proves nothing yet (an older agentd stored other text for the same value): `_rehash` then judges."""
    if not (type(payload) is str and type(refs) is str and type(prev_hash) is str):
        return False
    event_id, event_type, timestamp, sequence, schema_version, task_id, attempt_id, workflow_id, schedule, sensor = (
        fields
    )
    if not (type(event_id) is str and type(event_type) is str and type(timestamp) is str):
        return False
    body = event_body_text(
        event_id,
        event_type,
        timestamp,
        sequence,
        schema_version,
        task_id,
        attempt_id,
        workflow_id,
        schedule,
        sensor,
        payload,
        refs,
    )
    return bool(sha256_hex(prev_hash.encode() + body.encode()) == event_hash)


def _loaded_object(text: Any) -> dict[str, Any]:
    """An events_pruned payload as an object ({} when it is not one: its hash check said why)."""
    try:
        loaded = loads(text)
    except (ValueError, RecursionError, TypeError):
        return {}
    return loaded if isinstance(loaded, dict) else {}
