"""What the claim may take, and the budget's reads (agentd/config/budget.py): the claimable predicate and
the claim's per-priority branches, the day's spend per adapter, and which due tasks a hold keeps
back. The claim (store/attempts.py) and `agentd status` (store/tasks.py) share them."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from agentd.records import AdapterSpend, BudgetHold, Spend
from agentd.store.base import StoreBase, ts
from agentd.store.columns import CLAIMABLE
from agentd.store.resets import RESTING
from agentd.usage import MAX_COST_USD

# A stored cost the budget and `agentd cost` count: a finite number from 0 to MAX_COST_USD (agentd/usage.py).
# What a row written before usage was judged (or edited since) holds outside that — Infinity, a negative
# cost, text — is unknown: it is never spend, so it can neither poison nor lower a budget.
BELIEVED_COST = (
    f"CASE WHEN typeof(cost_usd) IN ('integer', 'real') AND cost_usd BETWEEN 0 AND {MAX_COST_USD!r} THEN cost_usd END"
)


def believed_tokens(column: str) -> str:
    """A stored token count as `agentd cost` sums it: a whole number of at least 0, else unknown."""
    return f"CASE WHEN typeof({column}) = 'integer' AND {column} >= 0 THEN {column} END"


# Tasks that would run on an adapter past its daily budget (agentd/records/work.py BudgetHold): the one
# they asked for, else their type's default, else their profile's.
ON_HELD_ADAPTER = """(COALESCE(requested_adapter_id IN (SELECT value FROM json_each(:held_adapters)), 0)
    OR (requested_adapter_id IS NULL AND task_type IN (SELECT value FROM json_each(:held_types)))
    OR (requested_adapter_id IS NULL AND task_type IN (SELECT value FROM json_each(:open_types))
        AND requested_profile_id IN (SELECT value FROM json_each(:held_profiles))))"""


# The first claimable task of one priority: the oldest. One index seek per priority (1..10, a CHECK
# constraint) rather than one ordered walk, so tasks waiting in the future never slow the claim down
# and no ANALYZE statistics can change the plan.
_BRANCH = f"""SELECT * FROM (
    SELECT id, priority, available_at FROM tasks
    WHERE {CLAIMABLE} AND priority = {{priority}}{{held}}
    ORDER BY available_at, id LIMIT 1)"""

# A fleet task starts only while its lease is confirmed (store/fleet_leases.py, docs/fleet.md): one lookup
# by its task id, for the first candidates only. The claim's own condition; status counts such a task as
# claimable, since it starts as soon as the fleet confirms it.
CONFIRMED = """NOT EXISTS (SELECT 1 FROM fleet_leases f WHERE f.task_id = tasks.id AND f.state = 'held'
    AND (f.confirmed_until IS NULL OR f.confirmed_until < :now))"""


def claimable_branches(hold: BudgetHold | None, *, claiming: bool = False) -> list[str]:
    """The oldest claimable task of each priority (with hold_params): the claim takes the first of
    them by priority (store/claim.py, `claiming`: a fleet task only while confirmed), status the oldest.
    With a budget hold, priorities less urgent than its urgent_priority are left out (everything) or
    leave out the tasks of held adapters. A task whose credential rests until its provider's reset is left
    out at every priority (store/resets.py)."""
    branches = []
    for priority in range(1, 11):
        held = f" AND NOT {RESTING}" + (f" AND {CONFIRMED}" if claiming else "")
        if hold is not None and priority > hold.urgent_priority:
            if hold.everything:
                continue
            held += f" AND NOT {ON_HELD_ADAPTER}"
        branches.append(_BRANCH.format(priority=priority, held=held))
    return branches


def held_by_budget(hold: BudgetHold | None) -> str:
    """Which of the CLAIMABLE tasks `hold` keeps back (with hold_params): exactly those
    claimable_branches leave out; status counts them `budget`."""
    if hold is None:
        return "0"
    if hold.everything:
        return "priority > :urgent"
    return f"(priority > :urgent AND {ON_HELD_ADAPTER})"


def hold_params(hold: BudgetHold | None) -> dict[str, Any]:
    if hold is None:
        return {}
    if hold.everything:
        return {"urgent": hold.urgent_priority}
    return {
        "urgent": hold.urgent_priority,
        "held_adapters": json.dumps(sorted(hold.adapters)),
        "held_types": json.dumps(sorted(hold.task_types)),
        "open_types": json.dumps(sorted(hold.open_task_types)),
        "held_profiles": json.dumps(sorted(hold.profiles)),
    }


class BudgetVerbs(StoreBase):
    def spend_since(self, since: datetime) -> Spend:
        """What the attempts that ended since `since` cost, per adapter (agentd/config/budget.py)."""
        rows = self.tx.execute(
            f"""SELECT adapter_id, TOTAL(cost), MAX(cost), MAX(cost_estimated = 1) FROM (
                   SELECT adapter_id, {BELIEVED_COST} AS cost, cost_estimated FROM task_attempts
                   WHERE ended_at IS NOT NULL AND ended_at >= ?)
               WHERE cost IS NOT NULL GROUP BY adapter_id""",
            (ts(since),),
        ).fetchall()
        return Spend(since, {r[0]: AdapterSpend(r[1], r[2], bool(r[3])) for r in rows})

    def budget_held_ids(self, now: datetime, hold: BudgetHold) -> list[int]:
        """The tasks due now that the budget holds back (the Agent Runtime export calls them blocked)."""
        rows = self.tx.execute(
            f"SELECT id FROM tasks WHERE {CLAIMABLE} AND {held_by_budget(hold)} ORDER BY id",
            {"now": ts(now)} | hold_params(hold),
        ).fetchall()
        return [row[0] for row in rows]

    def budget_waiting(self, now: datetime, hold: BudgetHold) -> int:
        """Tasks due now that the budget holds back (reason `budget` in status and metrics)."""
        row = self.tx.execute(
            f"SELECT COUNT(*) FROM tasks WHERE {CLAIMABLE} AND {held_by_budget(hold)}",
            {"now": ts(now)} | hold_params(hold),
        ).fetchone()
        return int(row[0])
