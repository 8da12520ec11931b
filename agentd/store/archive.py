"""The evidence archive's SQL (docs/backup-and-archive.md, "Archive"): the queue of sealed attempt folders not yet
in the bucket (filled by migration 0025's trigger inside each outcome commit), and how far the chain's segments
and the witnessed head have gone. What to upload and when is agentd/archive/'s; this only remembers it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agentd import frozen_value
from agentd.clock import stored_ts
from agentd.store.base import StoreBase, ts

# Every sealed attempt whose folder is still on disk: what enabling the archive queues (the trigger queues the rest).
BACKFILL = """
    INSERT OR IGNORE INTO archive_queue (attempt_id, task_id, sequence, manifest_sha256, enqueued_at)
    SELECT e.attempt_id, e.task_id, e.sequence,
           CASE WHEN json_valid(e.payload) THEN json_extract(e.payload, '$.manifest_sha256') END, e.timestamp
    FROM events e JOIN task_attempts a ON a.attempt_id = e.attempt_id
    WHERE e.type = 'task_attempt_finished' AND a.evidence_pruned_at IS NULL"""


@frozen_value
class QueuedFolder:
    """A sealed attempt folder waiting for the bucket: its task, its task_attempt_finished event, the manifest
    sha256 that event recorded (None: the seal failed) and how often an upload of it failed."""

    attempt_id: str
    task_id: int
    sequence: int
    manifest_sha256: str | None
    tries: int


@frozen_value
class ArchiveProgress:
    """How far the archive has gone: the last event uploaded in a chain segment, the last head witnessed."""

    enabled: bool
    events_through: int
    head: tuple[int, str] | None
    head_at: datetime | None


@frozen_value
class ArchiveQueue:
    """What `agentd status` and the metrics show: folders waiting, and since when the oldest waits."""

    enabled: bool
    length: int
    oldest: datetime | None


class ArchiveVerbs(StoreBase):
    def set_archiving(self, enabled: bool) -> int:
        """Archive from now on (or not): turning it on queues every sealed folder still on disk (an upload of one
        already there writes the same object again); turning it off forgets the queue. How many were queued."""
        with self.transaction():
            was = self.tx.execute("SELECT enabled FROM archive_state WHERE id = 1").fetchone()[0]
            if bool(was) == enabled:
                return 0
            self.tx.execute("UPDATE archive_state SET enabled = ? WHERE id = 1", (int(enabled),))
            if not enabled:
                self.tx.execute("DELETE FROM archive_queue")
                return 0
            return int(self.tx.execute(BACKFILL).rowcount)

    def archive_due(self, now: datetime, limit: int = 64) -> list[QueuedFolder]:
        """Queued folders whose next try is due, in the order they were sealed."""
        rows = self.tx.tuples(
            """SELECT attempt_id, task_id, sequence, manifest_sha256, tries FROM archive_queue
               WHERE next_try_at IS NULL OR next_try_at <= ? ORDER BY sequence LIMIT ?""",
            (ts(now), limit),
        )
        return [QueuedFolder(*row) for row in rows]

    def folders_archived(self, attempt_ids: Sequence[str]) -> None:
        """These folders are in the bucket: off the queue."""
        if attempt_ids:
            with self.transaction(durable=False):  # lost in a power cut: uploaded again, the same object
                self.tx.executemany("DELETE FROM archive_queue WHERE attempt_id = ?", [(a,) for a in attempt_ids])

    def archive_failed(self, attempt_id: str, error: str, next_try_at: datetime) -> None:
        """An upload of this folder failed: counted, why kept, tried again not before `next_try_at`."""
        with self.transaction(durable=False):
            self.tx.execute(
                "UPDATE archive_queue SET tries = tries + 1, last_error = ?, next_try_at = ? WHERE attempt_id = ?",
                (error[:2000], ts(next_try_at), attempt_id),
            )

    def archive_queue(self) -> ArchiveQueue:
        row = self.tx.execute(
            """SELECT (SELECT enabled FROM archive_state WHERE id = 1), COUNT(*), MIN(enqueued_at)
               FROM archive_queue"""
        ).fetchone()
        return ArchiveQueue(bool(row[0]), int(row[1]), stored_ts(row[2]) if row[2] else None)

    def archive_progress(self) -> ArchiveProgress:
        row = self.tx.execute(
            "SELECT enabled, events_through, head_sequence, head_hash, head_at FROM archive_state WHERE id = 1"
        ).fetchone()
        head = (row[2], row[3]) if row[2] is not None else None
        return ArchiveProgress(bool(row[0]), int(row[1]), head, stored_ts(row[4]) if row[4] else None)

    def chain_archived(self, through: int) -> None:
        """The chain's events up to `through` are in the bucket, in segments."""
        with self.transaction(durable=False):  # lost: the next segment overlaps, which the audit accepts
            self.tx.execute("UPDATE archive_state SET events_through = MAX(events_through, ?) WHERE id = 1", (through,))

    def head_witnessed(self, head: tuple[int, str], now: datetime) -> None:
        with self.transaction(durable=False):
            self.tx.execute(
                "UPDATE archive_state SET head_sequence = ?, head_hash = ?, head_at = ? WHERE id = 1",
                (head[0], head[1], ts(now)),
            )
