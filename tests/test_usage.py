"""What an attempt cost, as reported: a script says it in its outcome (`usage`), and every number is
judged at the edge (finite, at least 0, within int64) — a bad one is unknown usage with a reason, never
a lost outcome, a poisoned budget or a reader that fails."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rig import Rig
from test_pure import NOW, POLICY, attempt, facts, run

from agentd.adapters.base import MAX_COST_USD, MAX_TOKENS, USAGE_KEYS, judge_usage
from agentd.judge import judge
from agentd.status import snapshot


def outcome(usage: Any) -> dict[str, Any]:
    return {"status": "completed", "machine_status": "ok", "operator_summary": "did it", "usage": usage}


def budgeted(raw: dict[str, Any]) -> None:
    raw["budget"] = {"daily_usd": 1}


async def drain(rig: Rig) -> None:
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.run_until_idle()
    await dispatcher.stop()


@pytest.mark.asyncio
async def test_a_script_reports_its_cost_in_its_outcome_and_the_budget_counts_it(
    rig_factory: Callable[..., Rig],
) -> None:
    rig = rig_factory(budgeted)
    first = rig.add("scripted", payload={"outcome": outcome({"cost_usd": 0.6, "input_tokens": 1200})})
    await drain(rig)
    assert rig.store.get_task_or_raise(first.task_id).status == "completed"
    [row] = rig.store.attempts_of(first.task_id)
    assert row.usage is not None and row.usage["cost_usd"] == 0.6 and row.usage["input_tokens"] == 1200
    later = rig.add("scripted", payload={"outcome": outcome({"cost_usd": 0.6})}, priority=5)
    await drain(rig)  # $0.60 spent and the next may cost as much: past the $1 cap
    assert rig.store.get_task_or_raise(later.task_id).status == "pending"
    assert snapshot(rig.config, rig.store, rig.clock.now())["waiting"]["budget"] == 1


POISON = [
    {"cost_usd": 1e999},  # json reads 1e999 as inf
    {"cost_usd": -1000},
    {"cost_usd": "1e999"},
    {"input_tokens": 10**30},
    {"output_tokens": "lots"},
    {"input_tokens": [1, 2]},
    {"cost_usd": 1.5, "input_tokens": -1},
    {"input_tokens": 1.5},
    {"tokens_in": 3},
    "lots",
    [1, 2],
]


@pytest.mark.asyncio
@pytest.mark.parametrize("usage", POISON, ids=[json.dumps(u)[:40] for u in POISON])
async def test_a_poisoned_usage_report_is_unknown_usage_and_the_work_still_counts(
    rig_factory: Callable[..., Rig], usage: Any
) -> None:
    rig = rig_factory(budgeted)
    raw = json.dumps(outcome(usage)).replace("Infinity", "1e999")
    task = rig.add("scripted", payload={"raw_result": raw})
    await drain(rig)
    done = rig.store.get_task_or_raise(task.task_id)
    assert done.status == "completed", done.last_error
    [row] = rig.store.attempts_of(task.task_id)
    assert row.diagnostics is not None and row.diagnostics["usage_problems"]
    cost = (row.usage or {}).get("cost_usd")
    assert cost is None or (math.isfinite(cost) and 0 <= cost <= MAX_COST_USD)
    shown = snapshot(rig.config, rig.store, rig.clock.now())  # every reader still reads it
    assert math.isfinite(shown["budget"]["spent_usd"]) and shown["budget"]["spent_usd"] >= 0


def test_only_a_script_is_taken_at_its_word_a_harness_reports_through_the_harness() -> None:
    text = json.dumps(outcome({"cost_usd": 0.0, "input_tokens": 1}))
    harness = attempt().model_copy(update={"adapter_id": "claude", "adapter_kind": "claude-code"})
    claimed = judge(facts(attempt=harness, run=run(), result_text=text), now=NOW, policy=POLICY, rng=random.Random(1))
    assert claimed.status == "completed" and claimed.usage["input_tokens"] is None
    script = judge(facts(run=run(), result_text=text), now=NOW, policy=POLICY, rng=random.Random(1))
    assert script.usage["input_tokens"] == 1


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@given(st.dictionaries(st.sampled_from([*USAGE_KEYS, "other"]), JSONISH) | JSONISH)
def test_judged_usage_is_always_storable(reported: Any) -> None:
    usage, problems = judge_usage(reported, "usage")
    for key in USAGE_KEYS:
        value = getattr(usage, key)
        if value is None:
            continue
        assert math.isfinite(value) and value >= 0
        assert value <= (MAX_COST_USD if key == "cost_usd" else MAX_TOKENS)
        assert not isinstance(value, bool)
    reported_keys = reported.keys() if isinstance(reported, dict) else ()
    dropped = [k for k in reported_keys if k in USAGE_KEYS and reported[k] is not None and getattr(usage, k) is None]
    assert all(any(f"usage.{k}" in p for p in problems) for k in dropped)  # nothing is dropped unsaid
