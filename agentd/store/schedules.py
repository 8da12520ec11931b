"""Recurring schedules (seed 000 §11, §11b): definitions with their timing, and each due run.

Which task a due schedule makes (and whether it may) is decided before the transaction;
`record_schedule_runs` writes it after re-checking the schedule is still due and has no task open."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from agentd.errors import InputError, NotFound
from agentd.store.base import StoreBase, dumps, loads, parse_optional_ts, ts
from agentd.store.rows import schedule_from_row
from agentd.store.tasks import insert_task

if TYPE_CHECKING:  # pydantic's module
    from agentd.records import DueSchedule, RecurringScheduleRecord, ScheduleRun, ScheduleSpec

OPEN_STATUSES = ("pending", "retryable_failure", "running")
_OPEN_TASK = f"""SELECT id FROM tasks WHERE schedule_id = ?
    AND status IN ({", ".join(repr(s) for s in OPEN_STATUSES)}) ORDER BY id LIMIT 1"""


class ScheduleVerbs(StoreBase):
    def upsert_config_schedules(self, specs: list[ScheduleSpec], now: datetime) -> None:
        """Make the config's schedules the database's (keeping their timing); drop removed ones."""
        with self.transaction():
            existing = {
                r["schedule_id"]: r
                for r in self.tx.execute("SELECT * FROM schedules WHERE origin = 'config'").fetchall()
            }
            for spec in specs:
                row = existing.pop(spec.schedule_id, None)
                stored = (
                    (row["name"], bool(row["enabled"]), row["interval_seconds"], loads(row["task"])) if row else None
                )
                if stored == (spec.name or spec.schedule_id, spec.enabled, spec.interval_seconds, spec.task):
                    continue
                self._put_schedule(spec, "config", now, new=row is None)
            for schedule_id in existing:
                self._remove_schedule(schedule_id, now)

    def add_schedule(self, spec: ScheduleSpec, now: datetime, *, by: str = "agentd") -> RecurringScheduleRecord:
        with self.transaction():
            if self.tx.execute("SELECT 1 FROM schedules WHERE schedule_id = ?", (spec.schedule_id,)).fetchone():
                raise InputError(f"schedule {spec.schedule_id!r} exists; `agentd schedule rm` it first")
            self._put_schedule(spec, "operator", now, new=True, by=by)
        return self.list_schedules(spec.schedule_id)[0]

    def remove_schedule(self, schedule_id: str, now: datetime, *, by: str = "agentd") -> None:
        with self.transaction():
            row = self.tx.execute("SELECT origin FROM schedules WHERE schedule_id = ?", (schedule_id,)).fetchone()
            if row is None:
                raise NotFound(f"no schedule {schedule_id!r}; `agentd schedule list` shows them")
            if row[0] == "config":
                raise InputError(f"schedule {schedule_id!r} comes from the identity TOML; remove it there")
            self._remove_schedule(schedule_id, now, by=by)

    def _put_schedule(self, spec: ScheduleSpec, origin: str, now: datetime, *, new: bool, by: str = "agentd") -> None:
        self.tx.execute(
            """INSERT INTO schedules (schedule_id, name, enabled, interval_seconds, next_run_at, task, origin,
                   created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (schedule_id) DO UPDATE SET name = excluded.name, enabled = excluded.enabled,
                   interval_seconds = excluded.interval_seconds, task = excluded.task,
                   updated_at = excluded.updated_at""",
            (
                spec.schedule_id,
                spec.name or spec.schedule_id,
                int(spec.enabled),
                spec.interval_seconds,
                ts(now),
                dumps(spec.task),
                origin,
                ts(now),
                ts(now),
            ),
        )
        self.tx.event(
            "schedule_upserted",
            now,
            schedule_id=spec.schedule_id,
            payload={
                "interval_seconds": spec.interval_seconds,
                "enabled": spec.enabled,
                "origin": origin,
                "new": new,
                "by": by,
            },
        )

    def _remove_schedule(self, schedule_id: str, now: datetime, *, by: str = "agentd") -> None:
        self.tx.execute("DELETE FROM schedules WHERE schedule_id = ?", (schedule_id,))
        self.tx.event("schedule_removed", now, schedule_id=schedule_id, payload={"by": by})

    def list_schedules(self, schedule_id: str | None = None) -> list[RecurringScheduleRecord]:
        where, params = ("WHERE schedule_id = ?", (schedule_id,)) if schedule_id else ("", ())
        rows = self.tx.execute(f"SELECT * FROM schedules {where} ORDER BY schedule_id", params).fetchall()
        return [schedule_from_row(r) for r in rows]

    def due_schedules(self, now: datetime) -> list[DueSchedule]:
        """Enabled schedules due at `now`, each with whether its previous task is still open."""
        from agentd.records import DueSchedule  # pydantic's module: loaded where it is used

        rows = self.tx.execute(
            "SELECT * FROM schedules WHERE enabled = 1 AND next_run_at <= ? ORDER BY next_run_at", (ts(now),)
        ).fetchall()
        return [
            DueSchedule(schedule_from_row(r), self.tx.execute(_OPEN_TASK, (r["schedule_id"],)).fetchone() is not None)
            for r in rows
        ]

    def record_schedule_runs(self, runs: list[ScheduleRun], now: datetime) -> list[str]:
        """Write each due schedule's run: its task (schedule_task_created), the slot skipped because its
        last task is still open, or why not (schedule_task_refused); and its next run. Returns the
        schedules that created a task."""
        created: list[str] = []
        with self.transaction():
            for run in runs:
                row = self.tx.execute(
                    "SELECT last_run_at FROM schedules WHERE schedule_id = ? AND enabled = 1 AND next_run_at <= ?",
                    (run.schedule_id, ts(now)),
                ).fetchone()
                if row is None:
                    continue  # removed, disabled or already run meanwhile
                last_run = parse_optional_ts(row[0])
                open_task = self.tx.execute(_OPEN_TASK, (run.schedule_id,)).fetchone()
                if run.task is not None and open_task is None:
                    self._create_scheduled_task(run, now)
                    last_run = now
                    created.append(run.schedule_id)
                elif open_task is not None:
                    self._skip_slot(run, open_task[0], now)
                elif run.refusal is not None:
                    self.tx.event(
                        "schedule_task_refused", now, schedule_id=run.schedule_id, payload={"reason": run.refusal}
                    )
                self.tx.execute(
                    "UPDATE schedules SET next_run_at = ?, last_run_at = ?, updated_at = ? WHERE schedule_id = ?",
                    (ts(run.next_run_at), ts(last_run), ts(now), run.schedule_id),
                )
        return created

    def _create_scheduled_task(self, run: ScheduleRun, now: datetime) -> None:
        assert run.task is not None
        task_id = insert_task(self.tx, run.task, now)
        self.tx.event(
            "schedule_task_created",
            now,
            task_id=task_id,
            schedule_id=run.schedule_id,
            payload={"due_at": ts(run.due_at)},
        )

    def _skip_slot(self, run: ScheduleRun, open_task_id: int, now: datetime) -> None:
        """A slot passes without a task because the schedule's last one is still open (one pending task
        per schedule). The first slot skipped for an open task writes schedule_slot_skipped; the rest
        are only counted (`agentd schedule list`): a task waiting a day under a 60 s schedule is one
        event, not 1,440."""
        row = self.tx.execute(
            "SELECT skipped_for_task_id FROM schedules WHERE schedule_id = ?", (run.schedule_id,)
        ).fetchone()
        first = row[0] != open_task_id
        self.tx.execute(
            """UPDATE schedules SET skipped_for_task_id = ?,
                   skipped_slots = CASE WHEN ? THEN 1 ELSE skipped_slots + 1 END,
                   skipped_slots_total = skipped_slots_total + 1 WHERE schedule_id = ?""",
            (open_task_id, first, run.schedule_id),
        )
        if first:
            payload = {"open_task_id": open_task_id, "due_at": ts(run.due_at)}
            self.tx.event("schedule_slot_skipped", now, schedule_id=run.schedule_id, payload=payload)

    def next_schedule_due(self) -> datetime | None:
        row = self.tx.execute("SELECT MIN(next_run_at) FROM schedules WHERE enabled = 1").fetchone()
        return parse_optional_ts(row[0])
