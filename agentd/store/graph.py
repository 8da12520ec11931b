"""The task graph and the queue's order as the read models show them (seed 002's task_snapshot): each task's
follow-ups, its messages' delivery, and the waiting tasks in the order the claim takes them."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from agentd.records import BudgetHold, TaskRecord
from agentd.store.base import StoreBase, ts
from agentd.store.budget import held_by_budget, hold_params
from agentd.store.columns import CLAIMABLE, TASK_COLUMNS
from agentd.store.rows import task_from_row


class GraphVerbs(StoreBase):
    def follow_ups_of(self, task_ids: list[int]) -> dict[int, list[int]]:
        """Each of these tasks → the follow-ups its outcomes asked for (tasks_parent)."""
        found: dict[int, list[int]] = defaultdict(list)
        for row in self.tx.rows_in("SELECT parent_task_id, id FROM tasks WHERE parent_task_id IN ({marks})", task_ids):
            found[row[0]].append(row[1])
        return {parent: sorted(children) for parent, children in found.items()}

    def deliveries_of(self, task_ids: list[int]) -> dict[int, dict[str, int]]:
        """Each of these tasks → its external messages by delivery status (pending, delivered, failed), and
        those still waiting for an approval or a handler (`held`). A message refused before any delivery is not
        one; one whose delivery failed for good (its outbox row refused then too) is `failed`."""
        found: dict[int, dict[str, int]] = defaultdict(dict)
        sql = """SELECT o.task_id, CASE WHEN d.status IS NULL THEN 'held' ELSE d.status END, COUNT(*)
                 FROM outbox o LEFT JOIN deliveries d ON d.outbox_id = o.id
                 WHERE o.kind = 'external_message' AND (o.status != 'refused' OR d.status IS NOT NULL)
                   AND o.task_id IN ({marks})
                 GROUP BY 1, 2"""
        for row in self.tx.rows_in(sql, task_ids):
            found[row[0]][row[1]] = row[2]
        return dict(found)

    def claim_order(self, now: datetime, hold: BudgetHold | None, limit: int) -> tuple[list[TaskRecord], int]:
        """The waiting tasks the claim would take now, in the order it takes them (priority, then
        available_at, then id: store/claim.py), then every other waiting task by when it falls due; and how
        many of the first kind there are."""
        params = {"now": ts(now), "limit": limit} | hold_params(hold)
        first = self.tx.execute(
            f"""SELECT {TASK_COLUMNS} FROM tasks t LEFT JOIN workflows w ON w.id = t.workflow_id
                WHERE t.id IN (SELECT id FROM tasks WHERE {CLAIMABLE} AND NOT {held_by_budget(hold)})
                ORDER BY t.priority, t.available_at, t.id LIMIT :limit""",
            params,
        ).fetchall()
        taken = [task_from_row(row) for row in first]
        rest = self.tx.execute(
            f"""SELECT {TASK_COLUMNS} FROM tasks t LEFT JOIN workflows w ON w.id = t.workflow_id
                WHERE t.status IN ('pending', 'retryable_failure')
                  AND t.id NOT IN (SELECT id FROM tasks WHERE {CLAIMABLE} AND NOT {held_by_budget(hold)})
                ORDER BY t.available_at, t.priority, t.id LIMIT :limit""",
            params,
        ).fetchall()
        return (taken + [task_from_row(row) for row in rest])[:limit], len(taken)
