"""Steering one task (docs/operate.md, "Steer one task"; seed 002's control plane): pause and resume it,
edit a queued one, close one with a declared outcome, link it after another. Each is one transaction with
its event, naming who; what the claim makes of them is store/columns.py's UNSTEERED."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentd import frozen_value
from agentd.clock import format_ts, stored_ts
from agentd.errors import InputError
from agentd.records import TaskRecord
from agentd.store.base import StoreBase, Tx, dumps, ts
from agentd.store.facts import TaskLink, TaskPause, activity_times, links_of, pauses_of
from agentd.store.tasks import read_task_or_raise

if TYPE_CHECKING:  # pydantic's: judged where they come in
    from agentd.records import TaskOutcome

WAITING = ("pending", "retryable_failure")
MAX_LINKS = 100  # the tasks one task may wait for


@frozen_value
class TaskEdit:
    """What `agentd task edit` changes, each already judged as `task add` judges it (agentd/control)."""

    priority: int | None = None
    available_at: datetime | None = None
    payload: dict[str, Any] | None = None


def pause_of(tx: Tx, task_id: int) -> TaskPause | None:
    row = tx.execute("SELECT paused_at, paused_by, reason FROM task_pauses WHERE task_id = ?", (task_id,)).fetchone()
    return None if row is None else TaskPause(task_id, stored_ts(row[0]), row[1], row[2])


def _waiting_or_refuse(tx: Tx, task_id: int, what: str) -> TaskRecord:
    """The task, if it waits for a claim (pending, or retryable_failure); InputError saying why not."""
    task = read_task_or_raise(tx, task_id)
    if task.status not in WAITING:
        claimed = " (claimed: it is running)" if task.status == "running" else ""
        raise InputError(f"task {task_id} is {task.status}{claimed}; only a waiting task can be {what}")
    return task


def _not_in_a_workflow(tx: Tx, task: TaskRecord, what: str) -> None:
    """A workflow's step, or a fleet's task, ends as its workflow or its fleet says (their own verbs)."""
    if task.workflow_ref is not None:
        raise InputError(
            f"task {task.task_id} is the {task.workflow_ref.state_id} step of workflow "
            f"{task.workflow_ref.workflow_id}: "
            f"it cannot be {what} on its own; use `agentd workflow signal` or `agentd workflow cancel`"
        )
    if tx.execute("SELECT 1 FROM fleet_leases WHERE task_id = ? AND state = 'held'", (task.task_id,)).fetchone():
        raise InputError(
            f"task {task.task_id} is a fleet task: it cannot be {what} here; `agentd task cancel` hands it back"
        )


class SteerVerbs(StoreBase):
    def pause_task(self, task_id: int, by: str, reason: str | None, now: datetime) -> tuple[TaskRecord, bool]:
        """(the task, whether this call paused it). A waiting task is passed by at every claim; a running
        one finishes its attempt and is not claimed again (a retry) until resumed."""
        with self.transaction():
            task = read_task_or_raise(self.tx, task_id)
            if task.status not in (*WAITING, "running"):
                raise InputError(f"task {task_id} is {task.status}; only a waiting or running task can be paused")
            if pause_of(self.tx, task_id) is not None:
                return task, False
            self.tx.execute(
                "INSERT INTO task_pauses (task_id, paused_at, paused_by, reason) VALUES (?, ?, ?, ?)",
                (task_id, ts(now), by, reason),
            )
            self.tx.event("task_paused", now, task_id=task_id, payload={"by": by, "reason": reason})
            return read_task_or_raise(self.tx, task_id), True

    def resume_task(self, task_id: int, by: str, now: datetime) -> tuple[TaskRecord, TaskPause]:
        """The task and the pause that ended; InputError if it was not paused."""
        with self.transaction():
            task = read_task_or_raise(self.tx, task_id)
            pause = pause_of(self.tx, task_id)
            if pause is None:
                raise InputError(f"task {task_id} is not paused (it is {task.status})")
            self.tx.execute("DELETE FROM task_pauses WHERE task_id = ?", (task_id,))
            paused_s = round((now - pause.paused_at).total_seconds(), 3)
            self.tx.event("task_resumed", now, task_id=task_id, payload={"by": by, "paused_s": paused_s})
            return task, pause

    def task_pause(self, task_id: int) -> TaskPause | None:
        return pause_of(self.tx, task_id)

    def edit_task(self, task_id: int, edit: TaskEdit, by: str, now: datetime) -> TaskRecord:
        """Change a waiting task's priority, availability or payload (each judged by the caller). Its
        payload only while no attempt has run: an attempt's evidence was judged against the payload it had."""
        with self.transaction():
            task = _waiting_or_refuse(self.tx, task_id, "edited")
            if edit.payload is not None and task.attempt_count:
                raise InputError(
                    f"task {task_id} has run {task.attempt_count} attempt(s) on its payload; a new payload is a new "
                    "task (`agentd task cancel`, then `agentd task add`)"
                )
            changes = _changes(task, edit)
            if not changes:
                raise InputError(f"task {task_id}: nothing to change (give --priority, --delay, --at or --payload)")
            self.tx.execute(
                """UPDATE tasks SET priority = COALESCE(?, priority), available_at = COALESCE(?, available_at),
                       payload = COALESCE(?, payload), updated_at = ? WHERE id = ?""",
                (
                    edit.priority,
                    ts(edit.available_at) if edit.available_at else None,
                    dumps(edit.payload) if edit.payload is not None else None,
                    ts(now),
                    task_id,
                ),
            )
            self.tx.event("task_edited", now, task_id=task_id, payload={"by": by, "changes": changes})
            return read_task_or_raise(self.tx, task_id)

    def close_task(self, task_id: int, outcome: TaskOutcome, by: str, reason: str, now: datetime) -> TaskRecord:
        """A waiting task ends with the outcome its operator declares (completed or permanent_failure),
        the reason in its outcome and its task_finished event."""
        with self.transaction():
            task = _waiting_or_refuse(self.tx, task_id, f"closed as {outcome.status}")
            _not_in_a_workflow(self.tx, task, f"closed as {outcome.status}")
            if task.awaiting_approval:
                raise InputError(f"task {task_id} waits for approval: `agentd approve` or `agentd deny` it first")
            self.tx.execute(
                """UPDATE tasks SET status = ?, outcome = ?, finished_at = ?, updated_at = ?, last_error = ?
                   WHERE id = ?""",
                (
                    outcome.status,
                    dumps(outcome.model_dump(mode="json", exclude_none=True)),
                    ts(now),
                    ts(now),
                    None if outcome.status == "completed" else reason,
                    task_id,
                ),
            )
            self.tx.execute("DELETE FROM task_pauses WHERE task_id = ?", (task_id,))
            payload = {"status": outcome.status, "summary": outcome.operator_summary, "by": by, "declared": True}
            self.tx.event("task_finished", now, task_id=task_id, payload=payload)
            return read_task_or_raise(self.tx, task_id)

    def link_tasks(self, after_id: int, before_id: int, by: str, now: datetime) -> TaskLink:
        """`after_id` waits until `before_id` has completed. Refused: a task after itself, a link that
        closes a cycle, a task that no longer waits, more than MAX_LINKS."""
        with self.transaction():
            _waiting_or_refuse(self.tx, after_id, "linked after another")
            before = read_task_or_raise(self.tx, before_id)
            if after_id == before_id:
                raise InputError(f"task {after_id} cannot wait for itself")
            if self._waits_for(before_id, after_id):
                raise InputError(
                    f"task {before_id} already waits (through its links) for task {after_id}: "
                    f"linking {after_id} after {before_id} would make a cycle nothing could ever claim"
                )
            if self._link(after_id, before_id) is None:
                if self._link_count(after_id) >= MAX_LINKS:
                    raise InputError(f"task {after_id} already waits for {MAX_LINKS} tasks, the most one may")
                self.tx.execute(
                    "INSERT INTO task_links (after_id, before_id, created_at, created_by) VALUES (?, ?, ?, ?)",
                    (after_id, before_id, ts(now), by),
                )
                payload = {"after": after_id, "before": before_id, "before_status": before.status, "by": by}
                self.tx.event("task_linked", now, task_id=after_id, payload=payload)
            link = self._link(after_id, before_id)
            assert link is not None
            return link

    def unlink_tasks(self, after_id: int, before_id: int, by: str, now: datetime) -> None:
        with self.transaction():
            read_task_or_raise(self.tx, after_id)
            if self._link(after_id, before_id) is None:
                raise InputError(f"task {after_id} is not linked after task {before_id}")
            self.tx.execute("DELETE FROM task_links WHERE after_id = ? AND before_id = ?", (after_id, before_id))
            payload = {"after": after_id, "before": before_id, "by": by}
            self.tx.event("task_unlinked", now, task_id=after_id, payload=payload)

    def _waits_for(self, task_id: int, other: int) -> bool:
        """Whether `task_id` waits, through any chain of links, for `other`."""
        row = self.tx.execute(
            """WITH RECURSIVE up(id) AS (
                   SELECT ? UNION SELECT l.before_id FROM task_links l JOIN up ON l.after_id = up.id)
               SELECT 1 FROM up WHERE id = ? LIMIT 1""",
            (task_id, other),
        ).fetchone()
        return row is not None

    def _link(self, after_id: int, before_id: int) -> TaskLink | None:
        found = [
            link for link in self.links_of([after_id]) if link.after_id == after_id and link.before_id == before_id
        ]
        return found[0] if found else None

    def _link_count(self, after_id: int) -> int:
        return int(self.tx.execute("SELECT COUNT(*) FROM task_links WHERE after_id = ?", (after_id,)).fetchone()[0])

    def links_of(self, task_ids: list[int]) -> list[TaskLink]:
        """Every link in which one of these tasks waits or is waited for, in (after, before) order."""
        return links_of(self.tx, task_ids)

    def activity_times(self, task_ids: list[int]) -> dict[str, datetime]:
        """Each open attempt of these tasks → when its harness last reported (docs/live.md), if it has."""
        return activity_times(self.tx, task_ids)

    def pauses_of(self, task_ids: list[int]) -> dict[int, TaskPause]:
        return pauses_of(self.tx, task_ids)


def _changes(task: TaskRecord, edit: TaskEdit) -> dict[str, Any]:
    """What an edit changes, as {field: {from, to}} for its event; fields it leaves as they are, left out."""
    changes: dict[str, Any] = {}
    if edit.priority is not None and edit.priority != task.priority:
        changes["priority"] = {"from": task.priority, "to": edit.priority}
    if edit.available_at is not None and edit.available_at != task.available_at:
        changes["available_at"] = {"from": format_ts(task.available_at), "to": format_ts(edit.available_at)}
    if edit.payload is not None and edit.payload != task.payload:
        changes["payload"] = {"from": task.payload, "to": edit.payload}
    return changes
