"""The claim (docs/design.md, "Dispatch"): the next claimable task taken and its attempt opened, in one
statement inside BEGIN IMMEDIATE, so two dispatchers can never both win a row."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from agentd.errors import InputError, UnreadableRow
from agentd.hashing import new_ulid
from agentd.records import AttemptPlan, BudgetHold, Claim, TaskAttempt, TaskRecord
from agentd.store.base import StoreBase, Tx, dumps, ts
from agentd.store.budget import claimable_branches, hold_params
from agentd.store.rows import attempt_from_row
from agentd.store.tasks import read_task_or_raise

logger = logging.getLogger(__name__)

OUTCOME_SUMMARY_MAX = 4000


def next_claimable_sql(hold: BudgetHold | None = None) -> str:
    """The next claimable task's id: priority 1 first, then available_at, then id (one index seek per
    priority: store/budget.py claimable_branches). With a budget hold, the tasks it holds are left out."""
    branches = claimable_branches(hold, claiming=True)
    if not branches:
        return "SELECT NULL WHERE 0"
    return "SELECT id FROM (" + " UNION ALL ".join(branches) + ") ORDER BY priority, available_at, id LIMIT 1"


def claim_sql(hold: BudgetHold | None = None) -> str:
    # One statement, inside BEGIN IMMEDIATE: two dispatchers could never both win the same row.
    return f"""UPDATE tasks
    SET status = 'running', attempt_count = attempt_count + 1,
        started_at = :now, updated_at = :now, finished_at = NULL
    WHERE id = ({next_claimable_sql(hold)})
    RETURNING id"""


CLAIM_SQL = claim_sql()

Planner = Callable[[TaskRecord], AttemptPlan]  # pure: the config's choice of adapter and model


class ClaimVerbs(StoreBase):
    def claim_next_task(
        self, now: datetime, runner_id: str, plan: Planner, evidence_root: Path, hold: BudgetHold | None = None
    ) -> Claim | None:
        """Claim the next task and open its attempt (task_claimed), or None if nothing is due (or what
        is due waits for the budget: `hold`, or for its fleet lease to be confirmed), or the dispatcher
        is paused.

        `plan` is pure (config lookups only). A task the config can no longer run ends
        permanent_failure with the reason; a row that no longer reads back as a task (edited by
        hand, written by an older agentd) is failed the same way and the claim moves on: no single
        row can block the queue."""
        sql = CLAIM_SQL if hold is None else claim_sql(hold)
        params: dict[str, Any] = {"now": ts(now), **hold_params(hold)}
        with self.transaction() as tx:
            if tx.execute("SELECT 1 FROM dispatch_control WHERE id = 1").fetchone():
                return None  # paused (`agentd dispatch pause`): checked in the claim's own transaction
            while (row := tx.execute(sql, params).fetchone()) is not None:
                try:
                    task = read_task_or_raise(tx, row["id"])
                except Exception as exc:  # an UnreadableRow (an edit outside agentd) says it all in one line
                    plain = isinstance(exc, UnreadableRow)
                    said = str(exc) if plain else f"{type(exc).__name__}: {exc}"
                    logger.error("task %s cannot be read back; failing it: %s", row["id"], said, exc_info=not plain)
                    _fail_claimed(tx, row["id"], f"internal_error: {said}"[:500], now)
                    continue
                try:
                    chosen = plan(task)
                except InputError as exc:
                    _fail_claimed(tx, task.task_id, str(exc), now)
                    return Claim(read_task_or_raise(tx, task.task_id), None, str(exc))
                return Claim(task, _open_attempt(tx, task, chosen, runner_id, evidence_root, now))
        return None

    def explain_claim(self, now: datetime, *, analyze: bool = False) -> list[str]:
        """The query plan of the claim (tests and `make bench` check it uses tasks_claim)."""
        if analyze:
            self.tx.execute("ANALYZE")
        rows = self.tx.execute(f"EXPLAIN QUERY PLAN {CLAIM_SQL}", {"now": ts(now)}).fetchall()
        return [row[3] for row in rows]


def _open_attempt(
    tx: Tx, task: TaskRecord, chosen: AttemptPlan, runner_id: str, evidence_root: Path, now: datetime
) -> TaskAttempt:
    attempt_id = new_ulid(tx.clock)
    row = tx.execute(
        """INSERT INTO task_attempts (attempt_id, task_id, attempt_number, adapter_id, adapter_kind,
               model, runner_id, started_at, evidence_dir)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *""",
        (
            attempt_id,
            task.task_id,
            task.attempt_count,
            chosen.adapter_id,
            chosen.adapter_kind,
            chosen.model,
            runner_id,
            ts(now),
            str(evidence_root / str(task.task_id) / attempt_id),
        ),
    ).fetchone()
    tx.event(
        "task_claimed",
        now,
        task_id=task.task_id,
        attempt_id=attempt_id,
        workflow_id=task.workflow_ref.workflow_id if task.workflow_ref else None,
        payload={
            "attempt_number": task.attempt_count,
            "adapter": chosen.adapter_id,
            "model": chosen.model,
            "priority": task.priority,
        },
    )
    return attempt_from_row(row)


def _fail_claimed(tx: Tx, task_id: int, reason: str, now: datetime) -> None:
    """The claimed task ends permanent_failure with `reason`, its outcome saying so (not an earlier
    attempt's); the claim spent no attempt."""
    from agentd.records import TaskOutcome  # pydantic's, loaded only on this rare path

    outcome = TaskOutcome.failure(reason[:OUTCOME_SUMMARY_MAX], "permanent_failure")
    tx.execute(
        """UPDATE tasks SET status = 'permanent_failure', last_error = ?, outcome = ?, finished_at = ?,
               updated_at = ?, attempt_count = attempt_count - 1 WHERE id = ?""",
        (reason, dumps(outcome.model_dump(mode="json", exclude_none=True)), ts(now), ts(now), task_id),
    )
    tx.event("task_finished", now, task_id=task_id, payload={"status": "permanent_failure", "reason": reason})
