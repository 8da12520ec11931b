"""Workflow and schedule verbs: state entries, step tasks, signals, due schedules."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentd.clock import parse_ts
from agentd.errors import InputError, NotFound
from agentd.intake import NewTask
from agentd.records import RecurringScheduleRecord, TaskIntent, TaskRecord, WorkflowRecord
from agentd.store.base import dumps, loads, parse_optional_ts, ts
from agentd.store.outbox import OutboxItem, OutboxVerbs
from agentd.workflows import Change, next_run_after

OPEN_STATUSES = ("pending", "retryable_failure", "running")


@dataclass(frozen=True)
class ScheduleSpecRow:
    schedule_id: str
    name: str
    enabled: bool
    interval_seconds: int
    task: dict[str, Any]


def workflow_from_row(row: sqlite3.Row) -> WorkflowRecord:
    return WorkflowRecord(
        workflow_id=row["id"],
        workflow_type=row["workflow_type"],
        instance_key=row["instance_key"],
        current_state=row["current_state"],
        context=loads(row["context"]),
        status=row["status"],
        created_at=parse_ts(row["created_at"]),
        updated_at=parse_ts(row["updated_at"]),
        completed_at=parse_optional_ts(row["completed_at"]),
        iteration=row["iteration"],
        blocked_reason=row["blocked_reason"],
    )


def schedule_from_row(row: sqlite3.Row) -> RecurringScheduleRecord:
    return RecurringScheduleRecord(
        schedule_id=row["schedule_id"],
        name=row["name"],
        enabled=bool(row["enabled"]),
        interval_seconds=row["interval_seconds"],
        next_run_at=parse_ts(row["next_run_at"]),
        last_run_at=parse_optional_ts(row["last_run_at"]),
        task=TaskIntent.model_validate(loads(row["task"])),
        created_at=parse_ts(row["created_at"]),
        updated_at=parse_ts(row["updated_at"]),
    )


class WorkflowVerbs(OutboxVerbs):
    # --- workflows ------------------------------------------------------------------------------

    def create_workflow(
        self,
        workflow_type: str,
        instance_key: str,
        state: str,
        context: dict[str, Any] | None,
        now: datetime,
        origin: str,
    ) -> tuple[WorkflowRecord, bool]:
        """A new active workflow in `state`, or the existing one for (type, instance_key)."""
        with self._transaction():
            workflow_id, created = self._create_workflow(workflow_type, instance_key, state, context, now, origin)
        return self.get_workflow_or_raise(workflow_id), created

    def _create_workflow(
        self,
        workflow_type: str,
        instance_key: str,
        state: str,
        context: dict[str, Any] | None,
        now: datetime,
        origin: str,
        sensor_id: str | None = None,
    ) -> tuple[int, bool]:
        cursor = self._conn.execute(
            """INSERT INTO workflows (workflow_type, instance_key, current_state, context, state_entries,
                   created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (workflow_type, instance_key) DO NOTHING RETURNING id""",
            (
                workflow_type,
                instance_key,
                state,
                dumps(context) if context is not None else None,
                dumps({state: 1}),
                ts(now),
                ts(now),
            ),
        )
        row = cursor.fetchone()
        if row is None:
            existing = self._conn.execute(
                "SELECT id FROM workflows WHERE workflow_type = ? AND instance_key = ?", (workflow_type, instance_key)
            ).fetchone()
            return existing[0], False
        self._append_event(
            "workflow_started",
            now,
            workflow_id=row[0],
            sensor_id=sensor_id,
            payload={"workflow_type": workflow_type, "instance_key": instance_key, "state": state, "origin": origin},
        )
        return row[0], True

    def get_workflow(self, workflow_id: int) -> WorkflowRecord | None:
        row = self._conn.execute("SELECT * FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
        return None if row is None else workflow_from_row(row)

    def get_workflow_or_raise(self, workflow_id: int) -> WorkflowRecord:
        workflow = self.get_workflow(workflow_id)
        if workflow is None:
            raise NotFound(f"workflow {workflow_id} does not exist; `agentd workflow list` shows them")
        return workflow

    def list_workflows(self, *, statuses: tuple[str, ...] = (), limit: int = 50) -> list[WorkflowRecord]:
        where = f"WHERE status IN ({', '.join('?' * len(statuses))})" if statuses else ""
        rows = self._conn.execute(
            f"SELECT * FROM workflows {where} ORDER BY id DESC LIMIT ?", (*statuses, limit)
        ).fetchall()
        return [workflow_from_row(r) for r in rows]

    def workflow_steps(self, workflow_id: int) -> list[TaskRecord]:
        """The workflow's step tasks in the order their states were entered."""
        rows = self._conn.execute(
            "SELECT id FROM tasks WHERE workflow_id = ? ORDER BY workflow_iteration, id", (workflow_id,)
        ).fetchall()
        return [self.get_task_or_raise(r[0]) for r in rows]

    def state_entries(self, workflow_id: int) -> dict[str, int]:
        row = self._conn.execute("SELECT state_entries FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
        return dict(loads(row[0])) if row else {}

    def live_workflow_states(self) -> list[tuple[int, str, str, str]]:
        """(id, type, instance key, current state) of every active workflow."""
        rows = self._conn.execute(
            "SELECT id, workflow_type, instance_key, current_state FROM workflows WHERE status = 'active'"
        ).fetchall()
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def create_step_tasks(self, now: datetime, make_task: Callable[[WorkflowRecord], NewTask | str]) -> int:
        """For each active workflow whose current (state, iteration) has no task yet, create it —
        or block the workflow if its task cannot be made. Returns how many tasks were created."""
        created = 0
        with self._transaction():
            rows = self._conn.execute(
                """SELECT w.* FROM workflows w WHERE w.status = 'active' AND NOT EXISTS (
                       SELECT 1 FROM tasks t WHERE t.workflow_id = w.id AND t.workflow_state = w.current_state
                         AND t.workflow_iteration = w.iteration)"""
            ).fetchall()
            for workflow in map(workflow_from_row, rows):
                made = make_task(workflow)
                if isinstance(made, str):
                    if made:  # an empty reason: the state has no task; the workflow waits there
                        self._block_workflow(workflow.workflow_id, made, now)
                    continue
                task_id = self._insert_task(made, now)
                self._append_event(
                    "workflow_task_created",
                    now,
                    task_id=task_id,
                    workflow_id=workflow.workflow_id,
                    payload={"state": workflow.current_state, "iteration": workflow.iteration},
                )
                created += 1
        return created

    def apply_step_result(
        self, item: OutboxItem, judge: Callable[[WorkflowRecord, dict[str, int]], Change], now: datetime
    ) -> Change | None:
        """Apply a finished step's signal to its workflow and settle the outbox row, once."""
        with self._transaction():
            if not self._still_pending(item.outbox_id):
                return None
            workflow = self.get_workflow_or_raise(int(item.payload["workflow_id"]))
            entries = self.state_entries(workflow.workflow_id)
            change = judge(workflow, entries)
            wid = workflow.workflow_id
            if change.kind == "transition" and change.next_state is not None:
                entries[change.next_state] = entries.get(change.next_state, 0) + 1
                self._conn.execute(
                    """UPDATE workflows SET current_state = ?, iteration = iteration + 1, state_entries = ?,
                           updated_at = ? WHERE id = ?""",
                    (change.next_state, dumps(entries), ts(now), wid),
                )
                self._append_event(
                    "workflow_transitioned",
                    now,
                    workflow_id=wid,
                    task_id=item.task_id,
                    payload={
                        "from": workflow.current_state,
                        "to": change.next_state,
                        "signal": item.payload.get("signal"),
                        "iteration": workflow.iteration + 1,
                    },
                )
            elif change.kind == "complete":
                self._conn.execute(
                    "UPDATE workflows SET status = 'completed', completed_at = ?, updated_at = ? WHERE id = ?",
                    (ts(now), ts(now), wid),
                )
                self._append_event(
                    "workflow_completed",
                    now,
                    workflow_id=wid,
                    task_id=item.task_id,
                    payload={"state": workflow.current_state, "signal": item.payload.get("signal")},
                )
            elif change.kind == "block":
                self._block_workflow(wid, change.reason or "blocked", now, task_id=item.task_id)
            self._settle(
                item, "applied", {"change": change.kind, "reason": change.reason, "to": change.next_state}, now
            )
        return change

    def _block_workflow(self, workflow_id: int, reason: str, now: datetime, task_id: int | None = None) -> None:
        self._conn.execute(
            "UPDATE workflows SET status = 'blocked', blocked_reason = ?, updated_at = ? WHERE id = ?",
            (reason, ts(now), workflow_id),
        )
        self._append_event(
            "workflow_blocked", now, workflow_id=workflow_id, task_id=task_id, payload={"reason": reason}
        )

    # --- schedules ------------------------------------------------------------------------------

    def upsert_config_schedules(self, specs: list[ScheduleSpecRow], now: datetime) -> None:
        """Make the config's schedules the database's (keeping their timing); drop removed ones."""
        with self._transaction():
            existing = {
                r["schedule_id"]: r
                for r in self._conn.execute("SELECT * FROM schedules WHERE origin = 'config'").fetchall()
            }
            for spec in specs:
                row = existing.pop(spec.schedule_id, None)
                if row is not None and (
                    row["name"],
                    bool(row["enabled"]),
                    row["interval_seconds"],
                    loads(row["task"]),
                ) == (spec.name, spec.enabled, spec.interval_seconds, spec.task):
                    continue
                self._put_schedule(spec, "config", now, new=row is None)
            for schedule_id in existing:
                self._remove_schedule(schedule_id, now)

    def add_schedule(self, spec: ScheduleSpecRow, now: datetime) -> RecurringScheduleRecord:
        with self._transaction():
            if self._conn.execute("SELECT 1 FROM schedules WHERE schedule_id = ?", (spec.schedule_id,)).fetchone():
                raise InputError(f"schedule {spec.schedule_id!r} exists; `agentd schedule rm` it first")
            self._put_schedule(spec, "operator", now, new=True)
        return self.list_schedules(spec.schedule_id)[0]

    def remove_schedule(self, schedule_id: str, now: datetime) -> None:
        with self._transaction():
            row = self._conn.execute("SELECT origin FROM schedules WHERE schedule_id = ?", (schedule_id,)).fetchone()
            if row is None:
                raise NotFound(f"no schedule {schedule_id!r}; `agentd schedule list` shows them")
            if row[0] == "config":
                raise InputError(f"schedule {schedule_id!r} comes from the identity TOML; remove it there")
            self._remove_schedule(schedule_id, now)

    def _put_schedule(self, spec: ScheduleSpecRow, origin: str, now: datetime, *, new: bool) -> None:
        self._conn.execute(
            """INSERT INTO schedules (schedule_id, name, enabled, interval_seconds, next_run_at, task, origin,
                   created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (schedule_id) DO UPDATE SET name = excluded.name, enabled = excluded.enabled,
                   interval_seconds = excluded.interval_seconds, task = excluded.task,
                   updated_at = excluded.updated_at""",
            (
                spec.schedule_id,
                spec.name,
                int(spec.enabled),
                spec.interval_seconds,
                ts(now),
                dumps(spec.task),
                origin,
                ts(now),
                ts(now),
            ),
        )
        self._append_event(
            "schedule_upserted",
            now,
            schedule_id=spec.schedule_id,
            payload={"interval_seconds": spec.interval_seconds, "enabled": spec.enabled, "origin": origin, "new": new},
        )

    def _remove_schedule(self, schedule_id: str, now: datetime) -> None:
        self._conn.execute("DELETE FROM schedules WHERE schedule_id = ?", (schedule_id,))
        self._append_event("schedule_removed", now, schedule_id=schedule_id)

    def list_schedules(self, schedule_id: str | None = None) -> list[RecurringScheduleRecord]:
        where, params = ("WHERE schedule_id = ?", (schedule_id,)) if schedule_id else ("", ())
        rows = self._conn.execute(f"SELECT * FROM schedules {where} ORDER BY schedule_id", params).fetchall()
        return [schedule_from_row(r) for r in rows]

    def enqueue_due_schedules(
        self, now: datetime, make_task: Callable[[RecurringScheduleRecord], NewTask | str]
    ) -> list[str]:
        """One task per due schedule at most, none while its previous task is still open; every
        due schedule's next run moves to one interval after now (coalesced catch-up). Returns the
        ids of the schedules that created a task."""
        created: list[str] = []
        with self._transaction():
            due = self._conn.execute(
                "SELECT * FROM schedules WHERE enabled = 1 AND next_run_at <= ? ORDER BY next_run_at", (ts(now),)
            ).fetchall()
            for schedule in map(schedule_from_row, due):
                open_task = self._conn.execute(
                    f"""SELECT id FROM tasks WHERE schedule_id = ?
                        AND status IN ({", ".join("?" * len(OPEN_STATUSES))}) LIMIT 1""",
                    (schedule.schedule_id, *OPEN_STATUSES),
                ).fetchone()
                last_run = schedule.last_run_at
                if open_task is None:
                    made = make_task(schedule)
                    if isinstance(made, str):
                        self._append_event(
                            "schedule_task_refused", now, schedule_id=schedule.schedule_id, payload={"reason": made}
                        )
                    else:
                        task_id = self._insert_task(made, now)
                        self._append_event(
                            "schedule_task_created",
                            now,
                            task_id=task_id,
                            schedule_id=schedule.schedule_id,
                            payload={"due_at": ts(schedule.next_run_at)},
                        )
                        last_run = now
                        created.append(schedule.schedule_id)
                self._conn.execute(
                    "UPDATE schedules SET next_run_at = ?, last_run_at = ?, updated_at = ? WHERE schedule_id = ?",
                    (ts(next_run_after(now, schedule.interval_seconds)), ts(last_run), ts(now), schedule.schedule_id),
                )
        return created

    def idle_outlook(self, now: datetime) -> tuple[int, datetime | None]:
        """What an idle dispatcher needs in one read: tasks claimable now, and when the next task or
        schedule falls due."""
        due = [d for d in (self.next_due_at(now), self.next_schedule_due()) if d is not None]
        return self.waiting_count(now), min(due, default=None)

    def next_schedule_due(self) -> datetime | None:
        row = self._conn.execute("SELECT MIN(next_run_at) FROM schedules WHERE enabled = 1").fetchone()
        return parse_optional_ts(row[0])
