"""Workflows: instances, their state entries, step tasks and signals (seed 000 §10), and the
operator's steering acts on them (signal, unblock, cancel).

The workflow engine (agentd/work/workflows.py) decides; these verbs write its decisions, each after
re-checking that the workflow is still where it was when the decision was made."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentd import frozen_value
from agentd.errors import InputError, NotFound
from agentd.records import TERMINAL_STATUSES, OutboxEntry, TaskRecord
from agentd.store.base import StoreBase, Tx, dumps, loads, ts
from agentd.store.outbox import settle, still_pending
from agentd.store.rows import workflow_from_row
from agentd.store.tasks import cancel_waiting, insert_task, read_task_or_raise

if TYPE_CHECKING:  # pydantic's module
    from agentd.records import Change, SignalDecision, StepDecision, WorkflowRecord

SUMMARY_CHARS = 500  # of a step task's outcome summary when a steering act ends it


@frozen_value
class WorkflowCancel:
    """A canceled workflow, the queued step tasks that ended with it, and a running one left to finish
    (its signal is ignored: the workflow is no longer active)."""

    workflow: WorkflowRecord
    canceled_task_ids: list[int]
    running_task_ids: list[int]


def insert_workflow(
    tx: Tx,
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
    existing = tx.execute(
        "SELECT id FROM workflows WHERE workflow_type = ? AND instance_key = ?", (workflow_type, instance_key)
    ).fetchone()
    if existing is not None:
        return existing[0], False
    cursor = tx.execute(
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
    tx.event(
        "workflow_started",
        now,
        workflow_id=row[0],
        sensor_id=sensor_id,
        payload={"workflow_type": workflow_type, "instance_key": instance_key, "state": state, "origin": origin},
    )
    return row[0], True


def read_workflow(tx: Tx, workflow_id: int) -> WorkflowRecord:
    row = tx.execute("SELECT * FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
    if row is None:
        raise NotFound(f"workflow {workflow_id} does not exist; `agentd workflow list` shows them")
    return workflow_from_row(row)


def move_workflow(
    tx: Tx, workflow: WorkflowRecord, change: Change, signal: str | None, now: datetime, task_id: int | None
) -> None:
    """Write a transition (a new iteration of the next state) or a completion, with its event; the
    caller holds the transaction."""
    wid = workflow.workflow_id
    if change.kind == "transition" and change.next_state is not None:
        _enter_state(tx, wid, change.next_state, now)
        payload = {"from": workflow.current_state, "to": change.next_state, "signal": signal}
        tx.event(
            "workflow_transitioned",
            now,
            workflow_id=wid,
            task_id=task_id,
            payload={**payload, "iteration": workflow.iteration + 1},
        )
    elif change.kind == "complete":
        tx.execute(
            "UPDATE workflows SET status = 'completed', completed_at = ?, updated_at = ? WHERE id = ?",
            (ts(now), ts(now), wid),
        )
        tx.event(
            "workflow_completed",
            now,
            workflow_id=wid,
            task_id=task_id,
            payload={"state": workflow.current_state, "signal": signal},
        )


def _enter_state(tx: Tx, workflow_id: int, state: str, now: datetime) -> None:
    """The workflow enters `state` as a new iteration, active (an unblocked one too)."""
    row = tx.execute("SELECT state_entries FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
    entries = dict(loads(row[0]))
    entries[state] = entries.get(state, 0) + 1
    tx.execute(
        """UPDATE workflows SET status = 'active', blocked_reason = NULL, current_state = ?,
               iteration = iteration + 1, state_entries = ?, updated_at = ? WHERE id = ?""",
        (state, dumps(entries), ts(now), workflow_id),
    )


def apply_signal(
    tx: Tx, decision: SignalDecision, origin: str, now: datetime, sensor_id: str | None = None
) -> str | None:
    """Apply an outside signal if the workflow is still where it was judged, and record it
    (workflow_signaled: applied, or not and why); the caller holds the transaction. Returns why it
    was not applied (None: it was). The queued step task of the state it leaves ends
    operator_canceled; a running one refuses the signal (the step's own signal is on its way)."""
    from agentd.records import TaskOutcome  # pydantic's module: loaded where it is used

    current = read_workflow(tx, decision.judged.workflow_id)
    step = _open_step(tx, current)
    refusal = _signal_refusal(decision, current, step)
    payload: dict[str, Any] = {
        "signal": decision.signal,
        "by": decision.by,
        "reason": decision.reason,
        "origin": origin,
        "state": current.current_state,
        "iteration": current.iteration,
        "applied": refusal is None,
    }
    if refusal is None:
        payload |= {"move": decision.change.kind, "to": decision.change.next_state}
        payload |= {"canceled_task_id": step[0]} if step else {}
    else:
        payload["refusal"] = refusal
    tx.event("workflow_signaled", now, workflow_id=current.workflow_id, sensor_id=sensor_id, payload=payload)
    if refusal is not None:
        return refusal
    if step is not None:
        why = f"workflow {current.workflow_id} left {current.current_state} on signal {decision.signal!r}"
        why += f" from {decision.by}"
        cancel_waiting(tx, step[0], TaskOutcome.failure(why[:SUMMARY_CHARS], "operator_canceled"), now)
    move_workflow(tx, current, decision.change, decision.signal, now, None)
    return None


def _open_step(tx: Tx, workflow: WorkflowRecord) -> tuple[int, str] | None:
    """(id, status) of the current entry's step task, if it has not ended."""
    row = tx.execute(
        f"""SELECT id, status FROM tasks WHERE workflow_id = ? AND workflow_state = ? AND workflow_iteration = ?
               AND status NOT IN ({", ".join("?" * len(TERMINAL_STATUSES))})""",
        (workflow.workflow_id, workflow.current_state, workflow.iteration, *TERMINAL_STATUSES),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def _signal_refusal(decision: SignalDecision, current: WorkflowRecord, step: tuple[int, str] | None) -> str | None:
    judged = decision.judged
    if (current.status, current.current_state, current.iteration) != (
        judged.status,
        judged.current_state,
        judged.iteration,
    ):
        return (
            f"the workflow moved on while the signal was judged (it is {current.status} at "
            f"{current.current_state}#{current.iteration})"
        )
    if decision.change.kind not in ("transition", "complete"):
        return decision.change.reason or f"signal {decision.signal!r} does not apply"
    if step is not None and step[1] == "running":
        return (
            f"its {current.current_state} step, task {step[0]}, is running and will give its own signal "
            f"(`agentd task cancel {step[0]}` stops it)"
        )
    return None


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
        with self.transaction():
            workflow_id, created = insert_workflow(self.tx, workflow_type, instance_key, state, context, now, origin)
        return self.get_workflow_or_raise(workflow_id), created

    def find_workflow(self, workflow_type: str, instance_key: str) -> tuple[WorkflowRecord, dict[str, int]] | None:
        """The workflow for (type, instance key) and its state entries, if it exists."""
        row = self.tx.execute(
            "SELECT * FROM workflows WHERE workflow_type = ? AND instance_key = ?", (workflow_type, instance_key)
        ).fetchone()
        return None if row is None else (workflow_from_row(row), dict(loads(row["state_entries"])))

    def get_workflow_or_raise(self, workflow_id: int) -> WorkflowRecord:
        return read_workflow(self.tx, workflow_id)

    def list_workflows(self, *, statuses: tuple[str, ...] = (), limit: int = 50) -> list[WorkflowRecord]:
        where = f"WHERE status IN ({', '.join('?' * len(statuses))})" if statuses else ""
        rows = self.tx.execute(
            f"SELECT * FROM workflows {where} ORDER BY id DESC LIMIT ?", (*statuses, limit)
        ).fetchall()
        return [workflow_from_row(r) for r in rows]

    def workflow_steps(self, workflow_id: int) -> list[TaskRecord]:
        """The workflow's step tasks in the order their states were entered."""
        rows = self.tx.execute(
            "SELECT id FROM tasks WHERE workflow_id = ? ORDER BY workflow_iteration, id", (workflow_id,)
        ).fetchall()
        return [read_task_or_raise(self.tx, r[0]) for r in rows]

    def state_entries(self, workflow_id: int) -> dict[str, int]:
        row = self.tx.execute("SELECT state_entries FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
        return dict(loads(row[0])) if row else {}

    def live_workflow_states(self) -> list[tuple[int, str, str, str]]:
        """(id, type, instance key, current state) of every active workflow."""
        rows = self.tx.execute(
            "SELECT id, workflow_type, instance_key, current_state FROM workflows WHERE status = 'active'"
        ).fetchall()
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    # --- the operator's steering acts -----------------------------------------------------------

    def signal_workflow(self, decision: SignalDecision, now: datetime) -> WorkflowRecord:
        """Apply the operator's signal, judged on `decision.judged`, once; InputError (nothing
        written) if it cannot apply or the workflow moved on meanwhile."""
        with self.transaction():
            refusal = apply_signal(self.tx, decision, "operator:cli", now)
            if refusal is not None:
                raise InputError(f"workflow {decision.judged.workflow_id}: {refusal}; nothing was changed")
            return read_workflow(self.tx, decision.judged.workflow_id)

    def unblock_workflow(
        self, judged: WorkflowRecord, state: str, by: str, reason: str | None, now: datetime
    ) -> WorkflowRecord:
        """A blocked workflow becomes active, entering `state` as a new iteration (the engine creates
        its step task); InputError (nothing written) if it is no longer blocked where it was judged."""
        with self.transaction():
            current = read_workflow(self.tx, judged.workflow_id)
            if current.status != "blocked" or (current.current_state, current.iteration) != (
                judged.current_state,
                judged.iteration,
            ):
                raise InputError(
                    f"workflow {current.workflow_id} is {current.status} at {current.current_state}"
                    f"#{current.iteration}, not blocked where it was judged; nothing was changed"
                )
            _enter_state(self.tx, current.workflow_id, state, now)
            self.tx.event(
                "workflow_unblocked",
                now,
                workflow_id=current.workflow_id,
                payload={
                    "by": by,
                    "reason": reason,
                    "from": current.current_state,
                    "to": state,
                    "iteration": current.iteration + 1,
                    "blocked_reason": current.blocked_reason,
                },
            )
            return read_workflow(self.tx, current.workflow_id)

    def cancel_workflow(self, workflow_id: int, by: str, reason: str | None, now: datetime) -> WorkflowCancel:
        """An active or blocked workflow ends canceled; its queued step tasks end operator_canceled,
        a running one is left to finish (its signal is then ignored)."""
        from agentd.records import TaskOutcome  # pydantic's module: loaded where it is used

        with self.transaction():
            current = read_workflow(self.tx, workflow_id)
            if current.status not in ("active", "blocked"):
                raise InputError(
                    f"workflow {workflow_id} is already {current.status}; only an active or blocked one can be canceled"
                )
            open_steps = self.tx.execute(
                f"""SELECT id, status FROM tasks WHERE workflow_id = ?
                       AND status NOT IN ({", ".join("?" * len(TERMINAL_STATUSES))}) ORDER BY id""",
                (workflow_id, *TERMINAL_STATUSES),
            ).fetchall()
            running = [r[0] for r in open_steps if r[1] == "running"]
            queued = [r[0] for r in open_steps if r[1] != "running"]
            self.tx.execute(
                "UPDATE workflows SET status = 'canceled', updated_at = ? WHERE id = ?", (ts(now), workflow_id)
            )
            self.tx.event(
                "workflow_canceled",
                now,
                workflow_id=workflow_id,
                payload={
                    "by": by,
                    "reason": reason,
                    "from_status": current.status,
                    "state": current.current_state,
                    "iteration": current.iteration,
                    "canceled_task_ids": queued,
                    "running_task_ids": running,
                },
            )
            why = f"workflow {workflow_id} canceled by {by}" + (f": {reason}" if reason else "")
            for task_id in queued:
                cancel_waiting(self.tx, task_id, TaskOutcome.failure(why[:SUMMARY_CHARS], "operator_canceled"), now)
            return WorkflowCancel(read_workflow(self.tx, workflow_id), queued, running)

    # --- step tasks -----------------------------------------------------------------------------

    def workflows_awaiting_step(self) -> list[WorkflowRecord]:
        """Active workflows whose current (state, iteration) has no task yet."""
        rows = self.tx.execute(
            """SELECT w.* FROM workflows w WHERE w.status = 'active' AND NOT EXISTS (
                   SELECT 1 FROM tasks t WHERE t.workflow_id = w.id AND t.workflow_state = w.current_state
                     AND t.workflow_iteration = w.iteration)"""
        ).fetchall()
        return [workflow_from_row(r) for r in rows]

    def create_step_tasks(self, decisions: list[StepDecision], now: datetime) -> int:
        """Write the engine's decisions: each step's task, or its workflow blocked. A decision about a
        workflow that moved on, or whose step now exists, is dropped. Returns tasks created."""
        created = 0
        with self.transaction():
            for decision in decisions:
                if not self._awaits_step(decision):
                    continue
                if decision.task is None:
                    if decision.block_reason:  # "": a state with no task type waits for a signal
                        self._block_workflow(decision.workflow_id, decision.block_reason, now)
                    continue
                task_id = insert_task(self.tx, decision.task, now)
                self.tx.event(
                    "workflow_task_created",
                    now,
                    task_id=task_id,
                    workflow_id=decision.workflow_id,
                    payload={"state": decision.state, "iteration": decision.iteration},
                )
                created += 1
        return created

    def _awaits_step(self, decision: StepDecision) -> bool:
        row = self.tx.execute(
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
        if not still_pending(self.tx, entry.outbox_id):
            return None
        workflow = self.get_workflow_or_raise(int(entry.payload["workflow_id"]))
        return workflow, self.state_entries(workflow.workflow_id)

    def apply_workflow_change(
        self, entry: OutboxEntry, judged: WorkflowRecord, change: Change, now: datetime
    ) -> Change | None:
        """Apply the engine's move (judged on `judged`) and settle the entry, once. If the workflow
        moved on meanwhile, the move is recorded as ignored instead."""
        from agentd.records import Change  # pydantic's module: loaded where it is used

        with self.transaction():
            if not still_pending(self.tx, entry.outbox_id):
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
                self.tx,
                entry,
                "applied",
                {"change": change.kind, "reason": change.reason, "to": change.next_state},
                now,
            )
        return change

    def _apply_change(self, entry: OutboxEntry, workflow: WorkflowRecord, change: Change, now: datetime) -> None:
        if change.kind == "block":
            self._block_workflow(workflow.workflow_id, change.reason or "blocked", now, task_id=entry.task_id)
        else:
            move_workflow(self.tx, workflow, change, entry.payload.get("signal"), now, task_id=entry.task_id)

    def _block_workflow(self, workflow_id: int, reason: str, now: datetime, task_id: int | None = None) -> None:
        self.tx.execute(
            "UPDATE workflows SET status = 'blocked', blocked_reason = ?, updated_at = ? WHERE id = ?",
            (reason, ts(now), workflow_id),
        )
        self.tx.event("workflow_blocked", now, workflow_id=workflow_id, task_id=task_id, payload={"reason": reason})
