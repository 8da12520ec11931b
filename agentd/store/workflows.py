"""Workflows: instances, their state entries, step tasks and signals (seed 000 §10).

The workflow engine (agentd/workflows.py) decides; these verbs write its decisions, each after
re-checking that the workflow is still where it was when the decision was made."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentd.errors import NotFound
from agentd.records import Change, OutboxEntry, StepDecision, TaskRecord, WorkflowRecord
from agentd.store.base import StoreBase, dumps, loads, ts
from agentd.store.outbox import settle, still_pending
from agentd.store.rows import workflow_from_row
from agentd.store.tasks import insert_task, read_task_or_raise


def insert_workflow(
    store: StoreBase,
    workflow_type: str,
    instance_key: str,
    state: str,
    context: dict[str, Any] | None,
    now: datetime,
    origin: str,
    sensor_id: str | None = None,
) -> tuple[int, bool]:
    """A new active workflow in `state` (workflow_started), or the existing one for (type, key);
    the caller holds the transaction. Returns (id, created). An existing one is looked up first: a
    refused duplicate must not use up an id (an upsert that does nothing still advances AUTOINCREMENT)."""
    existing = store._conn.execute(
        "SELECT id FROM workflows WHERE workflow_type = ? AND instance_key = ?", (workflow_type, instance_key)
    ).fetchone()
    if existing is not None:
        return existing[0], False
    cursor = store._conn.execute(
        """INSERT INTO workflows (workflow_type, instance_key, current_state, context, state_entries,
               created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id""",
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
    store._append_event(
        "workflow_started",
        now,
        workflow_id=row[0],
        sensor_id=sensor_id,
        payload={"workflow_type": workflow_type, "instance_key": instance_key, "state": state, "origin": origin},
    )
    return row[0], True


class WorkflowVerbs(StoreBase):
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
            workflow_id, created = insert_workflow(self, workflow_type, instance_key, state, context, now, origin)
        return self.get_workflow_or_raise(workflow_id), created

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
        return [read_task_or_raise(self, r[0]) for r in rows]

    def state_entries(self, workflow_id: int) -> dict[str, int]:
        row = self._conn.execute("SELECT state_entries FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
        return dict(loads(row[0])) if row else {}

    def live_workflow_states(self) -> list[tuple[int, str, str, str]]:
        """(id, type, instance key, current state) of every active workflow."""
        rows = self._conn.execute(
            "SELECT id, workflow_type, instance_key, current_state FROM workflows WHERE status = 'active'"
        ).fetchall()
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    # --- step tasks -----------------------------------------------------------------------------

    def workflows_awaiting_step(self) -> list[WorkflowRecord]:
        """Active workflows whose current (state, iteration) has no task yet."""
        rows = self._conn.execute(
            """SELECT w.* FROM workflows w WHERE w.status = 'active' AND NOT EXISTS (
                   SELECT 1 FROM tasks t WHERE t.workflow_id = w.id AND t.workflow_state = w.current_state
                     AND t.workflow_iteration = w.iteration)"""
        ).fetchall()
        return [workflow_from_row(r) for r in rows]

    def create_step_tasks(self, decisions: list[StepDecision], now: datetime) -> int:
        """Write the engine's decisions: each step's task, or its workflow blocked. A decision about a
        workflow that moved on, or whose step now exists, is dropped. Returns tasks created."""
        created = 0
        with self._transaction():
            for decision in decisions:
                if not self._awaits_step(decision):
                    continue
                if decision.task is None:
                    if decision.block_reason:  # "": a state with no task type waits for a signal
                        self._block_workflow(decision.workflow_id, decision.block_reason, now)
                    continue
                task_id = insert_task(self, decision.task, now)
                self._append_event(
                    "workflow_task_created",
                    now,
                    task_id=task_id,
                    workflow_id=decision.workflow_id,
                    payload={"state": decision.state, "iteration": decision.iteration},
                )
                created += 1
        return created

    def _awaits_step(self, decision: StepDecision) -> bool:
        row = self._conn.execute(
            """SELECT 1 FROM workflows w WHERE w.id = ? AND w.status = 'active' AND w.current_state = ?
                   AND w.iteration = ? AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.workflow_id = w.id
                   AND t.workflow_state = w.current_state AND t.workflow_iteration = w.iteration)""",
            (decision.workflow_id, decision.state, decision.iteration),
        ).fetchone()
        return row is not None

    # --- signals --------------------------------------------------------------------------------

    def workflow_for_signal(self, entry: OutboxEntry) -> tuple[WorkflowRecord, dict[str, int]] | None:
        """The workflow a pending workflow_signal entry is for, and its state entries (None if the
        entry was already applied)."""
        if not still_pending(self, entry.outbox_id):
            return None
        workflow = self.get_workflow_or_raise(int(entry.payload["workflow_id"]))
        return workflow, self.state_entries(workflow.workflow_id)

    def apply_workflow_change(
        self, entry: OutboxEntry, judged: WorkflowRecord, change: Change, now: datetime
    ) -> Change | None:
        """Apply the engine's move (judged on `judged`) and settle the entry, once. If the workflow
        moved on meanwhile, the move is recorded as ignored instead."""
        with self._transaction():
            if not still_pending(self, entry.outbox_id):
                return None
            current = self.get_workflow_or_raise(judged.workflow_id)
            if (current.status, current.current_state, current.iteration) != (
                judged.status,
                judged.current_state,
                judged.iteration,
            ):
                change = Change("ignore", reason="the workflow moved on while this signal was judged")
            self._apply_change(entry, current, change, now)
            settle(
                self, entry, "applied", {"change": change.kind, "reason": change.reason, "to": change.next_state}, now
            )
        return change

    def _apply_change(self, entry: OutboxEntry, workflow: WorkflowRecord, change: Change, now: datetime) -> None:
        wid, signal = workflow.workflow_id, entry.payload.get("signal")
        if change.kind == "transition" and change.next_state is not None:
            entries = self.state_entries(wid)
            entries[change.next_state] = entries.get(change.next_state, 0) + 1
            self._conn.execute(
                """UPDATE workflows SET current_state = ?, iteration = iteration + 1, state_entries = ?,
                       updated_at = ? WHERE id = ?""",
                (change.next_state, dumps(entries), ts(now), wid),
            )
            payload = {"from": workflow.current_state, "to": change.next_state, "signal": signal}
            self._append_event(
                "workflow_transitioned",
                now,
                workflow_id=wid,
                task_id=entry.task_id,
                payload={**payload, "iteration": workflow.iteration + 1},
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
                task_id=entry.task_id,
                payload={"state": workflow.current_state, "signal": signal},
            )
        elif change.kind == "block":
            self._block_workflow(wid, change.reason or "blocked", now, task_id=entry.task_id)

    def _block_workflow(self, workflow_id: int, reason: str, now: datetime, task_id: int | None = None) -> None:
        self._conn.execute(
            "UPDATE workflows SET status = 'blocked', blocked_reason = ?, updated_at = ? WHERE id = ?",
            (reason, ts(now), workflow_id),
        )
        self._append_event(
            "workflow_blocked", now, workflow_id=workflow_id, task_id=task_id, payload={"reason": reason}
        )
