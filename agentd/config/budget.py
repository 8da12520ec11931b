"""Spending limits ([budget]): what the agent may spend per UTC day, in all and per adapter.

The day's spend is what the adapters reported for the attempts that ended since 00:00 UTC: claude's
own `total_cost_usd`, codex priced by agentd from the adapter's `prices` (an estimate), hermes' and
ollama's when they report any (they usually report none, and then spend nothing here). Before each
claim the dispatcher asks whether one more attempt still fits a cap: the day's spend plus what the
next attempt may cost — `per_attempt_usd` when set (the most one attempt may spend), otherwise the
dearest attempt of the day so far. When it does not fit, only tasks whose priority is at or above
`urgent_priority` (1 is the most urgent) are claimed; the rest wait, reason `budget`, until the next
UTC day.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentd.config import Config
from agentd.records import AdapterConfig, TokenPrice
from agentd.records.work import AdapterSpend as AdapterSpend
from agentd.records.work import BudgetHold as BudgetHold
from agentd.records.work import Spend as Spend


def day_start(now: datetime) -> datetime:
    """00:00 UTC of `now`'s day: where a day's budget starts."""
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def next_day(now: datetime) -> datetime:
    return day_start(now) + timedelta(days=1)


def budget_hold(config: Config, spend: Spend, now: datetime) -> BudgetHold | None:
    """What must wait now, or None when the next attempt fits every cap."""
    budget = config.budget
    next_attempt = budget.per_attempt_usd
    until = next_day(now)
    if budget.daily_usd is not None and spend.total_usd + (next_attempt or spend.dearest_usd) > budget.daily_usd:
        reason = f"the daily budget: {usd(spend.total_usd, spend.estimated)} of ${budget.daily_usd:g} spent today"
        return BudgetHold(budget.urgent_priority, until, reason, everything=True)
    held = {}
    for adapter_id, cap in budget.adapter_daily_usd.items():
        used = spend.by_adapter.get(adapter_id, AdapterSpend())
        if used.total_usd + (next_attempt or used.dearest_usd) > cap:
            held[adapter_id] = f"{adapter_id}: {usd(used.total_usd, used.estimated)} of ${cap:g}"
    if not held:
        return None
    adapters = frozenset(held)
    return BudgetHold(
        budget.urgent_priority,
        until,
        "the daily budget of " + ", ".join(held.values()) + " spent today",
        adapters=adapters,
        task_types=frozenset(t for t, spec in config.task_types.items() if spec.default_adapter_id in adapters),
        open_task_types=frozenset(t for t, spec in config.task_types.items() if spec.default_adapter_id is None),
        profiles=frozenset(p for p, profile in config.profiles.items() if profile.default_adapter_id in adapters),
    )


def usd(amount: float, estimated: bool) -> str:
    """$0.62, or ~$0.62 when some of it is agentd's estimate."""
    return f"{'~' if estimated else ''}${amount:.2f}"


def describe(hold: BudgetHold, waiting: int) -> str:
    """The dispatcher's status line while tasks wait for the budget."""
    return (
        f"budget: {waiting} task(s) wait for the next UTC day ({hold.reason}; "
        f"priority {hold.urgent_priority} and more urgent still run)"
    )


# What reports usage while an attempt runs, so a budget can stop it then (docs/policy.md, "Budgets while an
# attempt runs"): claude's stream-json and codex's session file.
LIVE_USAGE = {"claude-code": "its stream-json", "codex": "its session file"}


def price_of(adapter: AdapterConfig, model: str | None) -> TokenPrice | None:
    prices = getattr(adapter, "prices", None) or {}
    return prices.get(model) if model else None


def unpriced_lines(config: Config) -> list[str]:
    """What `agentd status` says of each adapter a running budget cannot stop (none without a cap)."""
    if config.budget.per_attempt_usd is None and not config.budget.capped:
        return []
    found = []
    for adapter_id, adapter in sorted(config.adapters.items()):
        if adapter.kind not in LIVE_USAGE:
            found.append(f"adapter {adapter_id}: no live usage ({adapter.kind} reports none while it runs)")
        elif not getattr(adapter, "prices", None):
            found.append(f"adapter {adapter_id}: no live usage (no prices: only the caps between attempts hold)")
    return found
