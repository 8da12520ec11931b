"""[budget]: past a daily cap only urgent tasks run; the rest wait, reason `budget`, for the next UTC
day. Through the real dispatcher and store, with an in-process adapter that reports what a harness
would have cost (the real claude CLI against the fake model: tests/test_adapter_contract.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rig import Rig
from support import agent_config, budgeted, examples

from agentd.attempt.prepare import plan_attempt
from agentd.config.budget import AdapterSpend, Spend, budget_hold, day_start
from agentd.config.settings import BudgetSection
from agentd.errors import ConfigError
from agentd.outlook.metrics import DispatchMetrics
from agentd.outlook.status import budget_outlook, snapshot
from agentd.work.validation import load_config


def costing(usd: float) -> dict[str, Any]:
    """A scripted task whose attempt completes and reports `usd` spent."""
    outcome = {"status": "completed", "machine_status": "ok", "operator_summary": "spent"}
    return {"outcome": outcome, "usage": {"cost_usd": usd, "input_tokens": 1000}}


def status_of(rig: Rig, task_id: int) -> str:
    return rig.store.get_task_or_raise(task_id).status


def gauges(rig: Rig) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    metrics = DispatchMetrics(rig.config.agent.agent_id, rig.config.db_path, rig.clock, rig.config)
    try:
        text = generate_latest(metrics.registry).decode()
    finally:
        metrics.close()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.asyncio
async def test_past_the_daily_cap_only_urgent_tasks_run_until_the_next_utc_day(
    rig_factory: Callable[..., Rig],
) -> None:
    rig = rig_factory(budgeted(daily_usd=1))
    first = rig.add("scripted", payload=costing(0.60))
    assert await rig.drain() == 1
    low = rig.add("scripted", payload=costing(0.60), priority=5)
    urgent = rig.add("scripted", payload=costing(0.60), priority=1)
    assert await rig.drain() == 1  # $0.60 spent, the next attempt may cost as much: past $1
    assert [status_of(rig, t.task_id) for t in (first, low, urgent)] == ["completed", "pending", "completed"]
    assert await rig.drain() == 0  # a restart changes nothing: the spend is read from the attempts

    shown = snapshot(rig.config, rig.store, rig.clock.now())
    assert shown["waiting"]["budget"] == 1
    budget = shown["budget"]
    assert budget["spent_usd"] == pytest.approx(1.20) and budget["daily_usd"] == 1
    assert budget["holding"]["waiting"] == 1 and "$1.20 of $1 spent today" in budget["holding"]["reason"]
    assert budget["holding"]["until"].startswith("2026-11-23T00:00:00")
    found = gauges(rig)
    assert found[("agentd_tasks_waiting", (("reason", "budget"),))] == 1
    assert found[("agentd_budget_holding", ())] == 1
    assert found[("agentd_budget_spent_usd", (("adapter", "scripted"), ("estimated", "0")))] == pytest.approx(1.2)
    held = [e for e in rig.events() if e.type == "budget_held"]
    assert [e.payload["waiting"] for e in held] == [1, 1]  # once in each dispatcher run that met the hold

    rig.clock.advance((day_start(rig.clock.now()).replace(day=23) - rig.clock.now()).total_seconds())
    assert await rig.drain() == 1  # a new UTC day, a new budget
    assert status_of(rig, low.task_id) == "completed"
    found = gauges(rig)  # today's spend is the one attempt since midnight; past the cap again
    assert found[("agentd_budget_spent_usd", (("adapter", "scripted"), ("estimated", "0")))] == pytest.approx(0.6)
    assert (found[("agentd_budget_holding", ())], found[("agentd_tasks_waiting", (("reason", "budget"),))]) == (1, 0)


@pytest.mark.asyncio
async def test_an_adapter_past_its_own_cap_holds_only_its_tasks(rig_factory: Callable[..., Rig]) -> None:
    rig = rig_factory(budgeted(adapter_daily_usd={"scripted": 0.5}))
    rig.add("scripted", payload=costing(0.60))
    assert await rig.drain() == 1
    by_type = rig.add("scripted", payload=costing(0.01), priority=3)
    by_request = rig.add("example", requested_adapter_id="scripted", priority=3)
    elsewhere = rig.add("example", priority=9)
    assert await rig.drain() == 1
    assert [status_of(rig, t.task_id) for t in (by_type, by_request, elsewhere)] == ["pending", "pending", "completed"]
    outlook = budget_outlook(rig.store, rig.config, rig.clock.now())
    assert outlook is not None and outlook.hold is not None and outlook.waiting == 2
    assert outlook.hold.adapters == {"scripted"} and not outlook.hold.everything


@pytest.mark.asyncio
async def test_per_attempt_usd_reserves_room_for_the_next_attempt_and_caps_claude(
    rig_factory: Callable[..., Rig],
) -> None:
    def mutate(raw: dict[str, Any]) -> None:
        raw["budget"] = {"daily_usd": 1, "per_attempt_usd": 0.25, "urgent_priority": 2}
        raw["adapters"].append(
            {"adapter_id": "c", "kind": "claude-code", "command": "claude", "max_budget_usd": 2, "timeout_ms": 60_000}
        )

    rig = rig_factory(mutate)
    assert rig.config.adapters["c"].max_budget_usd == 0.25  # type: ignore[union-attr]
    rig.add("scripted", payload=costing(0.80))
    assert await rig.drain() == 1
    second = rig.add("scripted", payload=costing(0.10), priority=3)
    urgent = rig.add("scripted", payload=costing(0.10), priority=2)
    assert await rig.drain() == 1  # $0.80 + $0.25 would pass $1; priority 2 is urgent here
    assert (status_of(rig, second.task_id), status_of(rig, urgent.task_id)) == ("pending", "completed")


@pytest.mark.asyncio
async def test_status_says_which_totals_are_estimates(rig_factory: Callable[..., Rig], rig_cli: Any) -> None:
    rig = rig_factory(budgeted(daily_usd=5, adapter_daily_usd={"script": 1}))
    rig.clock.advance((datetime.now(UTC) - rig.clock.now()).total_seconds())  # the CLI reads the wall clock
    task = rig.add("scripted", payload=costing(0.5))
    assert await rig.drain() == 1
    rig.store._conn.execute("UPDATE task_attempts SET cost_estimated = 1 WHERE task_id = ?", (task.task_id,))
    shown = rig_cli(rig, "status")
    assert shown.code == 0
    assert "budget   ~$0.50 of $5 today, script $0.00 of $1, scripted ~$0.50" in shown.out
    assert "~ = estimated by agentd" in shown.out and "0 for the budget" in shown.out


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ({"adapter_daily_usd": {"nope": 1}}, "budget.adapter_daily_usd.nope: expected a known adapter"),
        ({"daily_usd": -1}, "budget.daily_usd"),
        ({"daily_usd": "lots"}, "budget.daily_usd"),
        ({"urgent_priority": 0}, "budget.urgent_priority"),
        ({"monthly_usd": 3}, "budget.monthly_usd"),
    ],
)
def test_a_bad_budget_is_refused_naming_the_key(tmp_path: Any, budget: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(agent_config(tmp_path, budgeted(**budget)))
    assert message in str(raised.value)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tasks=st.lists(
        st.tuples(
            st.sampled_from(["example", "scripted", "flaky", "plan"]),
            st.sampled_from([None, "script", "scripted", "fails"]),
            st.integers(1, 10),
        ),
        min_size=1,
        max_size=12,
    ),
    held=st.sets(st.sampled_from(["script", "scripted", "fails", "stepper"]), min_size=1),
    urgent=st.integers(1, 10),
)
def test_the_claim_holds_exactly_the_tasks_whose_planned_adapter_is_held(
    rig: Rig, tasks: list[tuple[str, str | None, int]], held: set[str], urgent: int
) -> None:
    """The SQL that leaves held tasks out agrees with plan_attempt, for any mix of task types,
    requested adapters and priorities; and the claim takes the first task it does not hold."""
    budget = BudgetSection(adapter_daily_usd=dict.fromkeys(held, 0.5), urgent_priority=urgent)
    config = replace(rig.config, budget=budget)
    rig.store._conn.execute("UPDATE tasks SET status = 'operator_canceled'")  # the last example's
    added = [
        rig.add(task_type, requested_adapter_id=adapter, priority=priority) for task_type, adapter, priority in tasks
    ]
    hold = budget_hold(config, Spend(rig.clock.now(), {a: AdapterSpend(0.5, 0.5) for a in held}), rig.clock.now())
    assert hold is not None
    waiting = [t for t in added if t.priority > urgent and plan_attempt(config, t).adapter_id in held]
    assert rig.store.budget_waiting(rig.clock.now(), hold) == len(waiting)
    free = sorted((t.priority, t.task_id) for t in added if t not in waiting)
    claim = rig.store.claim_next_task(
        rig.clock.now(), "test", lambda t: plan_attempt(config, t), rig.config.paths.state_dir / "attempts", hold
    )
    assert (claim.task.task_id if claim else None) == (free[0][1] if free else None)
