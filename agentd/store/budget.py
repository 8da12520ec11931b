"""The budget's reads (agentd/budget.py): the day's spend per adapter, and which due tasks a hold
keeps back. The claim (store/attempts.py) leaves the same tasks out with the same predicate."""

from __future__ import annotations

import json
from datetime import datetime

from agentd.budget import AdapterSpend, BudgetHold, Spend
from agentd.store.base import StoreBase, ts

# A task the dispatcher may claim now (its priority and the budget aside).
CLAIMABLE = "status IN ('pending', 'retryable_failure') AND awaiting_approval = 0 AND available_at <= :now"

# Tasks that would run on an adapter past its daily budget (agentd/budget.py BudgetHold): the one
# they asked for, else their type's default, else their profile's.
ON_HELD_ADAPTER = """(COALESCE(requested_adapter_id IN (SELECT value FROM json_each(:held_adapters)), 0)
    OR (requested_adapter_id IS NULL AND task_type IN (SELECT value FROM json_each(:held_types)))
    OR (requested_adapter_id IS NULL AND task_type IN (SELECT value FROM json_each(:open_types))
        AND requested_profile_id IN (SELECT value FROM json_each(:held_profiles))))"""


def hold_params(hold: BudgetHold | None) -> dict[str, str]:
    if hold is None or hold.everything:
        return {}
    return {
        "held_adapters": json.dumps(sorted(hold.adapters)),
        "held_types": json.dumps(sorted(hold.task_types)),
        "open_types": json.dumps(sorted(hold.open_task_types)),
        "held_profiles": json.dumps(sorted(hold.profiles)),
    }


class BudgetVerbs(StoreBase):
    def spend_since(self, since: datetime) -> Spend:
        """What the attempts that ended since `since` cost, per adapter (agentd/budget.py)."""
        rows = self._conn.execute(
            """SELECT adapter_id, SUM(cost_usd), MAX(cost_usd), MAX(cost_estimated) FROM task_attempts
               WHERE ended_at IS NOT NULL AND ended_at >= ? AND cost_usd IS NOT NULL GROUP BY adapter_id""",
            (ts(since),),
        ).fetchall()
        return Spend(since, {r[0]: AdapterSpend(r[1], r[2], bool(r[3])) for r in rows})

    def budget_waiting(self, now: datetime, hold: BudgetHold) -> int:
        """Tasks due now that the budget holds back (reason `budget` in status and metrics)."""
        held = "" if hold.everything else f" AND {ON_HELD_ADAPTER}"
        row = self._conn.execute(
            f"SELECT COUNT(*) FROM tasks WHERE {CLAIMABLE} AND priority > :urgent{held}",
            {"now": ts(now), "urgent": hold.urgent_priority} | hold_params(hold),
        ).fetchone()
        return int(row[0])
