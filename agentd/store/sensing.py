"""Sensor intake: each observed event once (UNIQUE(sensor_id, dedupe_key)), in the same transaction
as the task or workflow it creates; each sensor's schedule; the runs in flight."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentd import frozen_value
from agentd.clock import stored_ts
from agentd.store.base import StoreBase, dumps, loads, parse_optional_ts, ts
from agentd.store.sparse import SparseInsert
from agentd.store.tasks import HeldTasks
from agentd.store.workflows import apply_signal, insert_workflow, read_workflow

if TYPE_CHECKING:  # pydantic's module
    from agentd.records import (
        AcceptedEvent,
        IntakeCounts,
        OpenSensorRun,
        RejectedLine,
        SensorState,
    )

MAX_REJECTION_EVENTS = 100  # per run; the rest are counted in sensor_run_finished
_SENSOR_EVENTS = SparseInsert(
    "sensor_events",
    (
        *("sensor_id", "dedupe_key", "event_id", "observed_at", "source_ref", "freshness_deadline", "payload"),
        *("result", "task_id", "workflow_id", "recorded_at"),
    ),
    ("freshness_deadline", "workflow_id"),
)
_MARK_REPEATED = "UPDATE sensor_events SET deduped_at = ? WHERE sensor_id = ? AND dedupe_key = ?"


@frozen_value
class _SpentKey:
    event_id: str  # the event that used the key
    repeat_noted: bool  # its sensor_event_deduped is written (sensor_events.deduped_at)


class SensingVerbs(StoreBase):
    def record_sensor_events(
        self, sensor_id: str, accepted: list[AcceptedEvent], rejected: list[RejectedLine], now: datetime
    ) -> IntakeCounts:
        """One batch of a run's output, in one transaction: duplicates change nothing. Its events and
        its sensor_events rows are written by one executemany each, as the transaction ends (nothing
        here reads them back meanwhile: the keys spent are known in memory)."""
        from agentd.records import IntakeCounts  # pydantic's module: loaded where it is used

        counts = IntakeCounts(rejected=len(rejected))
        rows: list[tuple[Any, ...]] = []
        repeats: list[tuple[Any, ...]] = []
        with self.transaction(), self._events_batched():
            held = HeldTasks(self.tx)  # the batch's tasks go in by one executemany too
            # One query for the batch: under the write lock no one else can spend a key meanwhile,
            # so a known key is a repeat without trying its INSERT (and a key's second line here too).
            spent = self._spent_keys(sensor_id, [item.event.dedupe_key for item in accepted])
            for item in accepted:
                key = item.event.dedupe_key
                if key in spent:
                    counts.deduped += 1  # sensor_run_finished says how many in each run
                    self._note_first_repeat(sensor_id, item, spent, now, repeats)
                    continue
                spent[key] = _SpentKey(item.event.event_id, repeat_noted=False)
                rows.append(self._record_one(sensor_id, item, now, counts, held))
            for rejection in rejected[:MAX_REJECTION_EVENTS]:
                self.tx.event(
                    "sensor_event_rejected",
                    now,
                    sensor_id=sensor_id,
                    payload={"line": rejection.line, "reason": rejection.reason[:500]},
                )
            # The tasks the rows name, then the rows (a key's first repeat may be in this batch too,
            # and marks its row).
            held.flush()
            _SENSOR_EVENTS.run(self.tx, rows)
            self.tx.executemany(_MARK_REPEATED, repeats)
        return counts

    def _spent_keys(self, sensor_id: str, keys: list[str]) -> dict[str, _SpentKey]:
        """The keys among these the sensor has used: the event that used each, and whether its first
        repeat was already noted."""
        sql = """SELECT dedupe_key, event_id, deduped_at IS NOT NULL FROM sensor_events
                 WHERE sensor_id = ? AND dedupe_key IN ({marks})"""
        return {r[0]: _SpentKey(r[1], bool(r[2])) for r in self.tx.rows_in(sql, keys, sensor_id)}

    def _note_first_repeat(
        self,
        sensor_id: str,
        item: AcceptedEvent,
        spent: dict[str, _SpentKey],
        now: datetime,
        repeats: list[tuple[Any, ...]],
    ) -> None:
        """sensor_event_deduped, once per (sensor, dedupe key): the first repeat writes it and marks
        the row (added to `repeats`), so a sensor printing the same items every poll adds nothing to
        the log after that."""
        key = item.event.dedupe_key
        first = spent[key]
        if first.repeat_noted:
            return
        repeats.append((ts(now), sensor_id, key))
        payload = {"dedupe_key": key, "event_id": item.event.event_id, "first_event_id": first.event_id}
        self.tx.event("sensor_event_deduped", now, sensor_id=sensor_id, payload=payload)
        spent[key] = _SpentKey(first.event_id, repeat_noted=True)

    def _record_one(
        self, sensor_id: str, item: AcceptedEvent, now: datetime, counts: IntakeCounts, held: HeldTasks
    ) -> tuple[Any, ...]:
        """A new event: its events in the chain, its task or workflow; its row (which names them)."""
        event = item.event
        ids: dict[str, Any] = {
            "sensor_id": sensor_id,
            "payload": {"dedupe_key": event.dedupe_key, "event_id": event.event_id},
        }
        self.tx.event("sensor_event_recorded", now, **ids)
        counts.recorded += 1
        result, task_id, workflow_id = "recorded", None, None
        if item.stale:
            self.tx.event("sensor_event_stale", now, **ids)
            result = "stale"
            counts.stale += 1
        elif item.task is not None:
            task_id = held.insert(item.task, now, {"sensor_id": sensor_id})
            self.tx.event("sensor_task_created", now, task_id=task_id, **ids)
            result = "created"
            counts.created += 1
            counts.task_ids.append(task_id)
        if not item.stale and item.workflow is not None:
            held.flush()  # a workflow may make tasks of its own, and reads them
            workflow_id = self._start_workflow(sensor_id, item, ids, now, counts)
            result = "created"
        return (
            sensor_id,
            event.dedupe_key,
            event.event_id,
            ts(event.observed_at),
            event.source_ref,
            ts(event.freshness_deadline),
            dumps(event.payload),
            result,
            task_id,
            workflow_id,
            ts(now),
        )

    def _start_workflow(
        self, sensor_id: str, item: AcceptedEvent, ids: dict[str, Any], now: datetime, counts: IntakeCounts
    ) -> int:
        """The event's workflow: created, found (deduped), or woken by its signal; its id."""
        start = item.workflow
        assert start is not None
        workflow_id, created = insert_workflow(
            self.tx,
            start.workflow_type,
            start.instance_key,
            start.state,
            start.context,
            now,
            f"sensor:{sensor_id}",
            sensor_id,
        )
        if created or start.signal is None:
            kind = "sensor_workflow_created" if created else "sensor_workflow_deduped"
            # a signal wakes an existing workflow; a new one starts in its state
            noted = {"signal": start.signal, "signal_applied": False} if start.signal else {}
            self.tx.event(kind, now, workflow_id=workflow_id, **(ids | {"payload": ids["payload"] | noted}))
            counts.workflows_created += int(created)
            counts.workflows_deduped += int(not created)
        else:
            self._wake_workflow(sensor_id, item, workflow_id, start.signal, now, counts)
        return workflow_id

    def _wake_workflow(
        self, sensor_id: str, item: AcceptedEvent, workflow_id: int, signal: str, now: datetime, counts: IntakeCounts
    ) -> None:
        """The event's signal for the workflow that exists, judged before this transaction: applied
        if the workflow is still where it was judged, else recorded as not applied, and why."""
        from agentd.records import Change, SignalDecision  # pydantic's module: loaded where it is used

        decision = item.wake
        if decision is None or decision.judged.workflow_id != workflow_id:  # it appeared after the judging
            reason = "the workflow was created while this event was judged"
            ignored = Change("ignore", reason=reason)
            judged = read_workflow(self.tx, workflow_id)
            decision = SignalDecision(judged, signal, ignored, f"sensor:{sensor_id}", item.described)
        refusal = apply_signal(self.tx, decision, f"sensor:{sensor_id}", now, sensor_id)
        counts.workflows_signaled += int(refusal is None)
        counts.signals_ignored += int(refusal is not None)

    def begin_sensor_run(self, sensor_id: str, run_id: str, owner: dict[str, Any], now: datetime) -> None:
        """A run is in flight, and whose: a restarted service sweeps what a dead owner left running."""
        with self.transaction():
            self.tx.execute(
                """INSERT INTO sensor_state (sensor_id, run_id, run_owner, run_started_at, updated_at)
                   VALUES (?, ?, ?, ?, ?)
                   ON CONFLICT (sensor_id) DO UPDATE SET run_id = excluded.run_id, run_owner = excluded.run_owner,
                       run_started_at = excluded.run_started_at, updated_at = excluded.updated_at""",
                (sensor_id, run_id, dumps(owner), ts(now), ts(now)),
            )

    def open_sensor_runs(self) -> list[OpenSensorRun]:
        """Every sensor run recorded in flight, with its owner."""
        from agentd.records import OpenSensorRun  # pydantic's module: loaded where it is used

        rows = self.tx.execute(
            "SELECT sensor_id, run_id, run_owner, run_started_at FROM sensor_state WHERE run_id IS NOT NULL"
        ).fetchall()
        return [OpenSensorRun(r[0], r[1], loads(r[2]) or {}, stored_ts(r[3])) for r in rows]

    def reclaim_sensor_run(self, sensor_id: str, run_id: str, killed: int, now: datetime) -> None:
        """Close a run whose service died: what it printed but did not record, it prints again."""
        with self.transaction():
            cursor = self.tx.execute(
                """UPDATE sensor_state SET run_id = NULL, run_owner = NULL, run_started_at = NULL, updated_at = ?
                   WHERE sensor_id = ? AND run_id = ?""",
                (ts(now), sensor_id, run_id),
            )
            if cursor.rowcount:
                self.tx.event(
                    "sensor_run_reclaimed", now, sensor_id=sensor_id, payload={"run_id": run_id, "killed": killed}
                )

    def finish_sensor_run(
        self,
        sensor_id: str,
        started_at: datetime,
        next_run_at: datetime,
        result: str,
        error: str | None,
        summary: dict[str, Any],
        now: datetime,
        *,
        quiet: bool = False,
    ) -> None:
        """Remember when the sensor ran and when it is next due (a restart neither re-runs early nor forgets).
        A `quiet` run (nothing new, nothing wrong) updates only this state: the audit log is not its diary."""
        with self.transaction():
            self.tx.execute(
                """INSERT INTO sensor_state (sensor_id, last_run_at, next_run_at, last_result, last_error, runs,
                       updated_at) VALUES (?, ?, ?, ?, ?, 1, ?)
                   ON CONFLICT (sensor_id) DO UPDATE SET last_run_at = excluded.last_run_at,
                       next_run_at = excluded.next_run_at, last_result = excluded.last_result,
                       last_error = excluded.last_error, runs = runs + 1, updated_at = excluded.updated_at,
                       run_id = NULL, run_owner = NULL, run_started_at = NULL""",
                (sensor_id, ts(started_at), ts(next_run_at), result, error, ts(now)),
            )
            if quiet:
                return
            self.tx.event(
                "sensor_run_finished",
                now,
                sensor_id=sensor_id,
                payload={"result": result, **({"error": error[:300]} if error else {}), **summary},
            )

    def seen_dedupe_keys(self, sensor_id: str, keys: list[str]) -> set[str]:
        """Which of these keys the sensor has already used (`sensor run --dry-run` shows them as seen,
        not as new work)."""
        sql = "SELECT dedupe_key FROM sensor_events WHERE sensor_id = ? AND dedupe_key IN ({marks})"
        return {row[0] for row in self.tx.rows_in(sql, keys, sensor_id)}

    def sensor_states(self) -> dict[str, SensorState]:
        from agentd.records import SensorState  # pydantic's module: loaded where it is used

        rows = self.tx.execute("SELECT * FROM sensor_state").fetchall()
        return {
            r["sensor_id"]: SensorState(
                r["sensor_id"],
                parse_optional_ts(r["last_run_at"]),
                parse_optional_ts(r["next_run_at"]),
                r["last_result"],
                r["last_error"],
                r["runs"],
            )
            for r in rows
        }
