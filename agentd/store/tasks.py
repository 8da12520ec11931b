"""Tasks: enqueue, read, the operator's cancel and retry, and the queue's shape over time.

`read_task` and `insert_task` are shared by every concept that reads or makes tasks (attempts,
the outbox, workflows, schedules, sensing): they take the store and run inside its transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentd.clock import to_utc
from agentd.errors import InputError, NotFound
from agentd.records import (
    TERMINAL_STATUSES,
    BudgetHold,
    CancelResult,
    EvidenceRequirementsRecord,
    NewTask,
    QueueSummary,
    TaskRecord,
    WorkflowRefRecord,
)
from agentd.store.approvals import never_approved, request_approval
from agentd.store.base import StoreBase, Tx, dumps, parse_optional_ts, ts
from agentd.store.budget import claimable_branches, held_by_budget, hold_params
from agentd.store.columns import CLAIMABLE, TASK_COLUMNS, TASK_FROM
from agentd.store.plain import end_waiting, held_for_approval, steered_waiting
from agentd.store.resets import RESTING
from agentd.store.rows import task_from_row
from agentd.store.sparse import SparseInsert

WAITING = ("pending", "retryable_failure")


def read_task(tx: Tx, task_id: int) -> TaskRecord | None:
    row = tx.execute(f"SELECT {TASK_COLUMNS} FROM {TASK_FROM} WHERE t.id = ?", (task_id,)).fetchone()
    return None if row is None else task_from_row(row)


def read_task_or_raise(tx: Tx, task_id: int) -> TaskRecord:
    task = read_task(tx, task_id)
    if task is None:
        raise NotFound(f"task {task_id} does not exist; `agentd task list` shows the queue")
    return task


def insert_task(tx: Tx, new: NewTask, now: datetime, event_payload: dict[str, Any] | None = None) -> int:
    """The INSERT and its task_enqueued event; the caller holds the transaction."""
    cursor = _TASKS.one(tx, _task_row(new, now))
    task_id = int(cursor.lastrowid or 0)
    _enqueued(tx, task_id, new, now, event_payload)
    return task_id


def written_task(tx: Tx, task_id: int, new: NewTask, now: datetime) -> TaskRecord:
    """The record of the task `insert_task` just wrote, built from the values it wrote: what `read_task`
    reads back, field for field (tests/test_enqueue_record.py holds the two equal for any admitted intent),
    without the SELECT, its join and its JSON parsing, a fifth of an enqueue's CPU
    (docs/decisions.md, "Enqueue from the values in hand"). The one value not in hand is a workflow's
    instance key: read by its id."""
    given, workflow = new.workflow_ref, None
    if given is not None:  # the row names the workflow by id; its instance key is the workflow's own
        key = tx.execute("SELECT instance_key FROM workflows WHERE id = ?", (given.workflow_id,)).fetchone()[0]
        workflow = WorkflowRefRecord(workflow_id=given.workflow_id, state_id=given.state_id, instance_key=key)
    return TaskRecord(
        task_id=task_id,
        task_type=new.task_type,
        source=new.source,
        subject=new.subject,
        description=new.description,
        priority=new.priority,
        payload=new.payload,
        requested_profile_id=new.requested_profile_id,
        requested_adapter_id=new.requested_adapter_id,
        requested_model=new.requested_model,
        status="pending",
        max_attempts=new.max_attempts,
        attempt_count=0,
        available_at=to_utc(new.available_at),
        created_at=to_utc(now),
        updated_at=to_utc(now),
        started_at=None,
        finished_at=None,
        outcome=None,
        last_error=None,
        skill_ids=list(new.skill_ids),
        # stored without its unset fields, and read back as none when nothing is left (task_from_row)
        evidence_requirements=_requirements_record(new.evidence_requirements),
        workflow_ref=workflow,
        workflow_iteration=new.workflow_iteration,
        schedule_id=new.schedule_id,
        free_attempt_count=0,
        rate_limit_count=0,
        crash_count=0,
        cancel_requested_at=None,
        awaiting_approval=new.approval_reason is not None,  # request_approval marks the row
        parent_task_id=new.parent_task_id,
        delegation_depth=new.delegation_depth,
        root_task_id=new.root_task_id,
        delegation_caps=new.delegation_caps,
    )


def _requirements_record(given: Any) -> EvidenceRequirementsRecord | None:
    """An intent's evidence requirements as its task stores them: its set fields, none when none is set."""
    fields = {} if given is None else given.model_dump(exclude_none=True)
    return EvidenceRequirementsRecord(**fields) if fields else None


_TASK_COLUMNS = (
    *("task_type", "source", "subject", "description", "priority", "payload", "requested_profile_id"),
    *("requested_adapter_id", "requested_model", "skill_ids", "evidence_requirements", "workflow_id"),
    *("workflow_state", "workflow_iteration", "schedule_id", "max_attempts", "available_at", "created_at"),
    *("updated_at", "parent_task_id", "delegation_depth", "root_task_id", "delegation_caps"),
)
# The columns a task may leave NULL (none has a DEFAULT): a row names only those it gives.
_NULLABLE = (
    *("subject", "description", "requested_adapter_id", "requested_model", "evidence_requirements"),
    *("workflow_id", "workflow_state", "workflow_iteration", "schedule_id", "parent_task_id"),
    *("root_task_id", "delegation_caps"),
)

if TYPE_CHECKING:  # pydantic's: judged where they come in
    from agentd.records import TaskOutcome
_TASKS = SparseInsert("tasks", _TASK_COLUMNS, _NULLABLE)
_TASKS_WITH_ID = SparseInsert("tasks", ("id", *_TASK_COLUMNS), _NULLABLE)
# The id AUTOINCREMENT gives the next row: one above the largest the table ever held.
_NEXT_TASK_ID = """SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'tasks'), 0),
                         COALESCE((SELECT MAX(id) FROM tasks), 0)) + 1"""


def _task_row(new: NewTask, now: datetime) -> tuple[Any, ...]:
    """A task's columns in _TASK_COLUMNS order."""
    workflow = new.workflow_ref
    return (
        new.task_type,
        new.source,
        new.subject,
        new.description,
        new.priority,
        dumps(new.payload),
        new.requested_profile_id,
        new.requested_adapter_id,
        new.requested_model,
        dumps(list(new.skill_ids)),
        dumps(new.evidence_requirements.model_dump(exclude_none=True)) if new.evidence_requirements else None,
        workflow.workflow_id if workflow else None,
        workflow.state_id if workflow else None,
        new.workflow_iteration,
        new.schedule_id,
        new.max_attempts,
        ts(new.available_at),
        ts(now),
        ts(now),
        new.parent_task_id,
        new.delegation_depth,
        new.root_task_id,
        dumps(new.delegation_caps) if new.delegation_caps is not None else None,
    )


def _enqueued(tx: Tx, task_id: int, new: NewTask, now: datetime, event_payload: dict[str, Any] | None) -> None:
    """A new task's task_enqueued event, and its approval request if it waits for one."""
    workflow = new.workflow_ref
    tx.event(
        "task_enqueued",
        now,
        task_id=task_id,
        workflow_id=workflow.workflow_id if workflow else None,
        schedule_id=new.schedule_id,
        payload={
            "task_type": new.task_type,
            "source": new.source,
            "priority": new.priority,
            "available_at": ts(new.available_at),
            **({"parent_task_id": new.parent_task_id} if new.parent_task_id is not None else {}),
            **({"awaiting_approval": True} if new.approval_reason is not None else {}),
            **(event_payload or {}),
        },
    )
    if new.approval_reason is not None:
        request_approval(tx, task_id, new.approval_reason, now)


class HeldTasks:
    """New tasks whose rows go in later, by one executemany (`flush`): under the write lock the ids
    AUTOINCREMENT would give them one by one are known up front, so their events can name them now.
    Hazard: nothing else may insert a task or read these rows before `flush()`, which the caller runs
    before any such step and before its transaction ends. A task held for approval is inserted at
    once (its approval request updates its row)."""

    def __init__(self, tx: Tx) -> None:
        self._tx = tx
        self._rows: list[tuple[Any, ...]] = []
        self._next_id = 0

    def insert(self, new: NewTask, now: datetime, event_payload: dict[str, Any] | None = None) -> int:
        """The task's id and its task_enqueued event now; its row at the next flush."""
        if new.approval_reason is not None:
            self.flush()
            return insert_task(self._tx, new, now, event_payload)
        if not self._rows:  # after a flush, or another insert: ask the table again
            self._next_id = int(self._tx.execute(_NEXT_TASK_ID).fetchone()[0])
        task_id, self._next_id = self._next_id, self._next_id + 1
        self._rows.append((task_id, *_task_row(new, now)))
        _enqueued(self._tx, task_id, new, now, event_payload)
        return task_id

    def flush(self) -> None:
        if self._rows:
            _TASKS_WITH_ID.run(self._tx, self._rows)
            self._rows = []


def cancel_waiting(tx: Tx, task_id: int, outcome: TaskOutcome, now: datetime, by: str = "agentd") -> None:
    """A task that is not running ends operator_canceled; the caller holds the transaction."""
    end_waiting(tx, task_id, outcome.model_dump(mode="json", exclude_none=True), now, by)


def request_cancel(tx: Tx, task_id: int, now: datetime, by: str) -> None:
    """Flag a running task for the dispatcher, which stops its adapter; the caller holds the transaction."""
    tx.execute(
        "UPDATE tasks SET cancel_requested_at = COALESCE(cancel_requested_at, ?), updated_at = ? WHERE id = ?",
        (ts(now), ts(now), task_id),
    )
    tx.event("task_cancel_requested", now, task_id=task_id, payload={"by": by})


def _count(tx: Tx, where: str, params: dict[str, Any]) -> int:
    return int(tx.execute(f"SELECT COUNT(*) FROM tasks WHERE {where}", params).fetchone()[0])


class TaskVerbs(StoreBase):
    def enqueue_task(self, new: NewTask, now: datetime, *, event_payload: dict[str, Any] | None = None) -> TaskRecord:
        """Insert a validated task and its task_enqueued event in one transaction."""
        with self.transaction():
            task_id = insert_task(self.tx, new, now, event_payload)
            return written_task(self.tx, task_id, new, now)

    def enqueue_tasks(self, news: list[NewTask], now: datetime, *, event_payload: dict[str, Any]) -> list[int]:
        """Insert validated tasks, each with its task_enqueued event as `enqueue_task` writes it, all in
        one transaction (the caller bounds how many: `agentd task add --batch` gives 500); their ids."""
        with self.transaction(), self._events_batched():  # nothing here reads the events back
            held = HeldTasks(self.tx)
            ids = [held.insert(new, now, event_payload) for new in news]
            held.flush()
            return ids

    def get_task(self, task_id: int) -> TaskRecord | None:
        return read_task(self.tx, task_id)

    def get_task_or_raise(self, task_id: int) -> TaskRecord:
        return read_task_or_raise(self.tx, task_id)

    def all_task_ids(self) -> list[int]:
        return [row[0] for row in self.tx.execute("SELECT id FROM tasks ORDER BY id")]

    def list_tasks(self, *, statuses: tuple[str, ...] = (), limit: int = 50) -> list[TaskRecord]:
        """Newest first; filtered by status when given."""
        where, params = "", [*statuses]
        if statuses:
            where = f"WHERE t.status IN ({', '.join('?' * len(statuses))})"
        rows = self.tx.execute(
            f"SELECT {TASK_COLUMNS} FROM {TASK_FROM} {where} ORDER BY t.id DESC LIMIT ?", (*params, limit)
        ).fetchall()
        return [task_from_row(r) for r in rows]

    # --- operator controls ----------------------------------------------------------------------

    def cancel_task(self, task_id: int, outcome: TaskOutcome, now: datetime, *, by: str = "agentd") -> CancelResult:
        """A waiting task ends operator_canceled now (with `outcome`); a running one is flagged for
        the dispatcher, which stops its adapter."""
        with self.transaction():
            task = read_task_or_raise(self.tx, task_id)
            if task.status in TERMINAL_STATUSES:
                raise InputError(f"task {task_id} is already {task.status}; there is nothing to cancel")
            if task.status == "running":
                request_cancel(self.tx, task_id, now, by)
                return CancelResult(read_task_or_raise(self.tx, task_id), "requested")
            cancel_waiting(self.tx, task_id, outcome, now, by)
            return CancelResult(read_task_or_raise(self.tx, task_id), "canceled")

    def retry_task(self, task_id: int, more_attempts: int, now: datetime, *, by: str = "agentd") -> TaskRecord:
        """Re-queue a failed, blocked or canceled task with `more_attempts`; its history stays. A task that
        was denied, or canceled while it waited for approval, waits for approval again: a retry is
        never a way around an operator's no."""
        with self.transaction():
            task = read_task_or_raise(self.tx, task_id)
            if task.status not in ("permanent_failure", "blocked", "operator_canceled"):
                raise InputError(
                    f"task {task_id} is {task.status}; only permanent_failure, blocked or operator_canceled "
                    "tasks can be retried (a completed task is never re-run)"
                )
            self.tx.execute(
                """UPDATE tasks SET status = 'pending', available_at = ?, updated_at = ?, finished_at = NULL,
                       outcome = NULL, max_attempts = attempt_count - free_attempt_count + ?
                   WHERE id = ?""",
                (ts(now), ts(now), more_attempts, task_id),
            )
            self.tx.event(
                "task_requeued",
                now,
                task_id=task_id,
                payload={"from_status": task.status, "more_attempts": more_attempts, "by": by},
            )
            if never_approved(self.tx, task_id):
                request_approval(self.tx, task_id, "retried after it was denied (or canceled unapproved)", now)
        return read_task_or_raise(self.tx, task_id)

    # --- the queue over time ------------------------------------------------------------------

    def queue_summary(self, now: datetime, hold: BudgetHold | None = None) -> QueueSummary:
        """Counts by status, and why each waiting task waits, one reason each: held for an operator's
        approval; else not due yet (waiting for a retry, or delayed); else paused by an operator; else after
        a task not yet completed (`agentd task link`); else held by the budget (`hold`);
        else claimable now. The budget's hold and the oldest claimable task are the claim's own
        predicates (store/budget.py); the rest is counted from indexes, never a walk over the rows."""
        counts = dict(self.tx.execute("SELECT status, COUNT(*) FROM tasks GROUP BY status").fetchall())
        params = {"now": ts(now)} | hold_params(hold)
        later = {  # one covering index range per status (tasks_status)
            status: self.tx.execute(
                "SELECT COUNT(*) FROM tasks WHERE status = ? AND available_at > ?", (status, params["now"])
            ).fetchone()[0]
            for status in WAITING
        }
        held = held_for_approval(self.tx, params["now"])
        paused, after = steered_waiting(self.tx, params["now"])
        due = sum(counts.get(s, 0) - later[s] - held.get((s, False), 0) for s in WAITING) - paused - after
        resting = _count(self.tx, f"{CLAIMABLE} AND {RESTING}", params)  # for a provider's reset (store/resets.py)
        budget = _count(self.tx, f"{CLAIMABLE} AND NOT {RESTING} AND {held_by_budget(hold)}", params) if hold else 0
        branches = claimable_branches(hold)
        oldest = (
            self.tx.execute(f"SELECT MIN(available_at) FROM ({' UNION ALL '.join(branches)})", params).fetchone()[0]
            if branches
            else None
        )
        version = self.tx.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
        return QueueSummary(
            counts,
            parse_optional_ts(oldest),
            self.next_due_at(now),
            version,
            claimable=due - budget - resting,
            retry_waiting=later["retryable_failure"] - held.get(("retryable_failure", True), 0),
            delayed=later["pending"] - held.get(("pending", True), 0),
            approval=sum(held.values()),
            paused=paused,
            after=after,
            budget=budget,
            resting=resting,
        )

    def next_due_at(self, now: datetime) -> datetime | None:
        """When the earliest waiting task not held for approval becomes claimable (None if none waits)."""
        waiting = [
            self.tx.execute(  # one index seek per status (tasks_status)
                """SELECT available_at FROM tasks WHERE status = ? AND available_at > ? AND awaiting_approval = 0
                   ORDER BY available_at LIMIT 1""",
                (status, ts(now)),
            ).fetchone()
            for status in WAITING
        ]
        return parse_optional_ts(min((row[0] for row in waiting if row), default=None))

    def waiting_count(self, now: datetime) -> int:
        """Tasks claimable now (the budget aside: the dispatcher says so on its own)."""
        return _count(self.tx, CLAIMABLE, {"now": ts(now)})

    def recent_outcomes(self, limit: int, exclude_task: int) -> list[tuple[int, str, str, str]]:
        """(task id, type, status, summary) of the agent's most recently finished tasks: the memory a
        bundle may carry."""
        rows = self.tx.execute(
            """SELECT id, task_type, status, json_extract(outcome, '$.operator_summary') FROM tasks
               WHERE finished_at IS NOT NULL AND id != ? ORDER BY finished_at DESC LIMIT ?""",
            (exclude_task, limit),
        ).fetchall()
        return [(r[0], r[1], r[2], r[3] or "") for r in rows]
