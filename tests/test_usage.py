"""What an attempt cost, as reported: a script says it in its outcome (`usage`), and every number is
judged at the edge (finite, at least 0, within int64) — a bad one is unknown usage with a reason, never
a lost outcome, a poisoned budget or a reader that fails."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rig import Rig
from support import harness_fixture
from test_pure import NOW, POLICY, attempt, facts, run

from agentd.attempt.judge import judge
from agentd.outlook.status import snapshot
from agentd.records import TaskAttempt
from agentd.services.dispatch import Dispatcher
from agentd.usage import MAX_COST_USD, MAX_TOKENS, USAGE_KEYS, judge_usage


def outcome(usage: Any) -> dict[str, Any]:
    return {"status": "completed", "machine_status": "ok", "operator_summary": "did it", "usage": usage}


def budgeted(raw: dict[str, Any]) -> None:
    raw["budget"] = {"daily_usd": 1}


@pytest.mark.asyncio
async def test_a_script_reports_its_cost_in_its_outcome_and_the_budget_counts_it(
    rig_factory: Callable[..., Rig],
) -> None:
    rig = rig_factory(budgeted)
    first = rig.add("scripted", payload={"outcome": outcome({"cost_usd": 0.6, "input_tokens": 1200})})
    await rig.drain()
    assert rig.store.get_task_or_raise(first.task_id).status == "completed"
    [row] = rig.store.attempts_of(first.task_id)
    assert row.usage is not None and row.usage["cost_usd"] == 0.6 and row.usage["input_tokens"] == 1200
    later = rig.add("scripted", payload={"outcome": outcome({"cost_usd": 0.6})}, priority=5)
    await rig.drain()  # $0.60 spent and the next may cost as much: past the $1 cap
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
    await rig.drain()
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
    harness = dataclasses.replace(attempt(), adapter_id="claude", adapter_kind="claude-code")
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


# --- every adapter's usage through the one judge (issue 23, findings 1 and 2) ----------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("reported", [{"cost_usd": -1000}, {"cost_usd": "1e999"}, {"cost_usd": [1, 2]}])
async def test_a_bad_harness_cost_never_lowers_the_budget(rig_factory: Callable[..., Rig], reported: Any) -> None:
    """What a harness reports (the in-process adapter reports its payload's `usage` as one would) goes
    through the judge: a negative cost is unknown, so it cannot make room under the cap."""
    rig = rig_factory(lambda raw: raw.update(budget={"daily_usd": 5}))
    done = {"status": "completed", "machine_status": "ok", "operator_summary": "spent"}
    poisoned = rig.add("scripted", payload={"outcome": done, "usage": reported})
    dear = [rig.add("scripted", payload={"outcome": done, "usage": {"cost_usd": 2.0}}) for _ in range(5)]
    await rig.drain()
    assert rig.store.get_task_or_raise(poisoned.task_id).status == "completed"
    [row] = rig.store.attempts_of(poisoned.task_id)
    assert row.usage is None or "cost_usd" not in row.usage, row.usage
    assert row.diagnostics is not None and "script usage.cost_usd" in row.diagnostics["usage_problems"][0]
    statuses = [rig.store.get_task_or_raise(t.task_id).status for t in dear]
    assert statuses.count("completed") == 2, statuses  # $4 spent, and $2 more would pass $5


FAKE_CLAUDE = """#!{python}
import sys
if "--version" in sys.argv:
    print("2.1.197 (Claude Code)")
    raise SystemExit(0)
sys.stdin.read()
sys.stdout.write(open({stream!r}).read())
"""


def fake_claude(tmp_path: Path, lines: list[str]) -> Path:
    """A `claude` in `tmp_path` whose stream is `lines`, one a line (FAKE_CLAUDE)."""
    stream = tmp_path / "stream.jsonl"
    stream.write_text("\n".join(lines) + "\n")
    cli = tmp_path / "claude"
    cli.write_text(FAKE_CLAUDE.format(python=sys.executable, stream=str(stream)))
    cli.chmod(0o755)
    return cli


async def completed_on_claude(rig: Rig) -> TaskAttempt:
    """A scripted task run on the rig's adapter `claude` by a dispatcher with real processes: it completes;
    its one attempt."""
    task = rig.add("scripted", requested_adapter_id="claude")
    await rig.drain(processes=True)
    assert rig.store.get_task_or_raise(task.task_id).status == "completed"
    [row] = rig.store.attempts_of(task.task_id)
    return row


@pytest.mark.asyncio
@pytest.mark.process
async def test_a_claude_run_with_poisoned_usage_completes_with_its_usage_unknown(
    rig_factory: Callable[..., Rig], tmp_path: Path
) -> None:
    """The issue's run, through a real process: a claude stream whose result says `"total_cost_usd":
    "1e999"` and `"input_tokens": Infinity`, after a string message and a line nested 200k deep."""
    fixture = harness_fixture("claude_stream_json_tool_use.jsonl").read_text().splitlines()
    final = json.loads(fixture[-1])
    final["result"] = "Done.\n```json\n" + json.dumps(outcome(None)) + "\n```"
    final["total_cost_usd"], final["usage"]["input_tokens"] = "1e999", "\x00inf"
    result = json.dumps(final).replace('"\\u0000inf"', "Infinity")
    assert "Infinity" in result and '"1e999"' in result
    noise = ['{"type":"assistant","message":"a string"}', "[" * 200_000 + "]" * 200_000]
    cli = fake_claude(tmp_path, [*fixture[:-1], *noise, result])

    def mutate(raw: dict[str, Any]) -> None:
        raw["budget"] = {"daily_usd": 5}
        raw["gateway"] = {"enabled": False}  # the stream's usage is the attempt's only without the gateway
        raw["adapters"].append(
            {"adapter_id": "claude", "kind": "claude-code", "command": str(cli), "timeout_ms": 30_000}
        )

    rig = rig_factory(mutate)
    row = await completed_on_claude(rig)
    assert row.diagnostics is not None
    problems = row.diagnostics["usage_problems"]
    assert any("total_cost_usd" in p for p in problems) and any("input_tokens" in p for p in problems), problems
    assert row.usage is not None and "cost_usd" not in row.usage and row.usage["output_tokens"] == 14, row.usage
    assert math.isfinite(snapshot(rig.config, rig.store, rig.clock.now())["budget"]["spent_usd"])


class Raising:
    """An adapter whose run raises inside a task group, as anyio wraps what a task raised."""

    kind = "script"

    async def execute(self, ctx: Any, on_started: Any) -> Any:
        await on_started(None)

        async def fail() -> None:
            raise ValueError("the harness said something no parser expected")

        async with anyio.create_task_group() as group:
            group.start_soon(fail)


@pytest.mark.asyncio
async def test_an_internal_error_names_the_exceptions_inside_a_group(rig: Rig) -> None:
    task = rig.add("example")
    dispatcher = Dispatcher(rig.config, rig.db, clock=rig.clock, rng=random.Random(1), adapters=lambda _: Raising())
    await dispatcher.start()
    await dispatcher.run_until_idle()
    await dispatcher.stop()
    [row] = rig.store.attempts_of(task.task_id)
    assert row.termination_reason == "internal_error"
    reason = rig.store.get_task_or_raise(task.task_id).last_error or ""
    assert "ValueError: the harness said something no parser expected" in reason, reason
