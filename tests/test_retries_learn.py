"""Retries that learn (issue 52, seed audit D15/T26): the next attempt's bundle carries the earlier attempts' failed
tool calls and the gates they failed, bounded, newest kept; and every bundle says what the attempt may still spend."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rig import Rig
from test_dispatch_process import Agent, ok
from test_pure import bundle_input

from agentd.attempt.bundle import (
    CALL_CHARS,
    ERROR_CHARS,
    FAILED_CALLS_MAX,
    BudgetBrief,
    FailedCall,
    PriorAttempt,
    compile_bundle,
)
from agentd.attempt.prepare import budget_brief
from agentd.config.budget import AdapterSpend, Spend
from agentd.config.settings import BudgetSection

DENY_PUSH = {"decision": "deny", "tool": "Bash", "command": "git push*", "reason": "pushing is the operator's"}


@pytest.fixture
def governed(tmp_path: Path) -> Iterator[Agent]:
    def mutate(raw: dict[str, Any]) -> None:
        raw["policy"] = {"rules": [DENY_PUSH]}
        raw["budget"] = {"daily_usd": 20.0, "per_attempt_usd": 2.0, "adapter_daily_usd": {"scripted": 5.0}}

    made = Agent(tmp_path, {}, mutate)
    yield made
    made.close()


def prompts(agent: Agent, task_id: int) -> list[str]:
    """Each attempt's bundle as it was told it (prompt.md in its evidence), in attempt order."""
    attempts = sorted(agent.store.attempts_of(task_id), key=lambda a: a.attempt_number)
    root = agent.config.paths.state_dir / "attempts" / str(task_id)
    return [(root / a.attempt_id / "prompt.md").read_text() for a in attempts]


@pytest.mark.process
@pytest.mark.timeout(120)
def test_the_second_attempt_is_told_the_first_one_s_failed_call_and_failed_gate(governed: Agent) -> None:
    push = {"tool": "Bash", "input": {"command": "git push -f origin main"}, "marker": "pushed"}
    claimed = ok(artifact_paths=["reports/never-written.md"])  # a completion the artifact gate refuses
    task_id = governed.add(asks=[push], outcome=claimed)
    assert governed.start("--until-idle").wait(timeout=90) == 0
    first, second, *_ = prompts(governed, task_id)
    assert "Earlier attempts" not in first and "Tool calls that failed" not in first
    assert "- attempt 1 (exited)" in second
    assert "failed the gate: artifact 'reports/never-written.md' does not exist in the workspace" in second
    failed = "- attempt 1: Bash git push -f origin main -> denied by agentd (policy): pushing is the operator's"
    assert failed in second
    for told in (first, second):  # the budget: its time, its own cap, the day's and its adapter's
        assert "# Your budget" in told and "this attempt: at most $2.00" in told
        assert "$20.00 left of the agent's daily budget" in told and "$5.00 left of adapter scripted's" in told
    assert "2 more attempt(s) after this one" in first and "1 more attempt(s) after this one" in second


def test_failed_calls_are_read_newest_first_from_the_harness_the_policy_and_the_harness_s_permissions(
    rig: Rig,
) -> None:
    task = rig.add("example")
    evidence = rig.config.paths.state_dir / "attempts"
    claim = rig.store.claim_next_task(rig.clock.now(), "test", rig.dispatcher()._plan, evidence)
    assert claim is not None and claim.attempt is not None
    attempt = claim.attempt.attempt_id
    rig.store.record_activity(
        task.task_id,
        attempt,
        [
            ("tool_started", {"call_id": "c1", "tool": "Bash", "summary": "make test"}),
            ("tool_finished", {"call_id": "c1", "tool": "Bash", "ok": False, "summary": "exit 2: 3 failed"}),
            ("tool_started", {"call_id": "c2", "tool": "Read", "summary": "notes.md"}),
            ("tool_finished", {"call_id": "c2", "tool": "Read", "ok": True, "summary": "fine"}),
        ],
        rig.clock.now(),
    )
    denied = {
        "tool": "Bash",
        "summary": "Bash: git push",
        "rule": "deny: rule 1",
        "decided_by": "policy",
        "reason": "no",
    }
    rig.store.record_call(task.task_id, attempt, False, denied, rig.clock.now())
    assert rig.store.failed_calls(task.task_id, 10) == [
        (1, "Bash", "git push", "denied by agentd (policy): no"),
        (1, "Bash", "make test", "failed: exit 2: 3 failed"),  # the succeeded Read is not a failure
    ]
    assert rig.store.failed_calls(task.task_id, 1) == [(1, "Bash", "git push", "denied by agentd (policy): no")]


def test_the_bundle_keeps_the_newest_failed_calls_each_cut_and_says_so() -> None:
    calls = tuple(FailedCall(3, "Bash", f"call {n} " + "x" * 500, "y" * 900) for n in range(25))
    prior = (PriorAttempt(1, "exited", "s", tuple(f"gate {n}" for n in range(8))),)
    text = compile_bundle(bundle_input(prior_attempts=prior, failed_calls=calls)).text
    assert f"(the newest {FAILED_CALLS_MAX}, newest first)" in text
    assert "call 0 " in text and f"call {FAILED_CALLS_MAX - 1} " in text and f"call {FAILED_CALLS_MAX} " not in text
    assert "gate 4" in text and "gate 5" not in text and "and 3 more gate failure(s)" in text
    lines = [line for line in text.splitlines() if line.startswith("- attempt 3:")]
    assert len(lines) == FAILED_CALLS_MAX
    assert all(len(line) <= len("- attempt 3: Bash  -> ") + CALL_CHARS + ERROR_CHARS for line in lines)


@given(
    st.lists(st.tuples(st.integers(1, 9), st.text(max_size=300), st.text(max_size=2000), st.text(max_size=2000))),
    st.lists(st.text(max_size=2000), max_size=12),
)
def test_what_earlier_attempts_add_is_bounded_whatever_they_left(
    calls: list[tuple[int, str, str, str]], gates: list[str]
) -> None:
    """The section grows with neither the calls' texts nor their number (one line each, newlines shown)."""
    failed = tuple(FailedCall(n, tool, summary, error) for n, tool, summary, error in calls)
    inp = bundle_input(prior_attempts=(PriorAttempt(1, "exited", "s", tuple(gates)),), failed_calls=failed)
    text = compile_bundle(inp).text
    section = text.split("# Earlier attempts", 1)[1].split("\n# ", 1)[0]
    assert len(section) < 12_000
    assert len([line for line in section.splitlines() if line.startswith("- attempt ")]) <= 1 + FAILED_CALLS_MAX


def test_the_budget_says_what_is_left_and_never_less_than_nothing(rig: Rig) -> None:
    brief = BudgetBrief(30.0, 0, None, -3.0, "claude", 1.25, estimated=True)
    text = compile_bundle(bundle_input(budget=brief)).text
    assert "stopped after 30s; this is the last" in text
    assert "~$0.00 left of the agent's daily budget" in text and "~$1.25 left of adapter claude's" in text
    assert "- money: no cap is set" in compile_bundle(bundle_input(budget=BudgetBrief(60.0, 2))).text
    task = rig.add("example")
    evidence = rig.config.paths.state_dir / "attempts"
    claim = rig.store.claim_next_task(rig.clock.now(), "test", rig.dispatcher()._plan, evidence)
    assert claim is not None and claim.attempt is not None
    config = replace(rig.config, budget=BudgetSection(daily_usd=10.0, adapter_daily_usd={"script": 1.0}))
    spend = Spend(rig.clock.now(), {"script": AdapterSpend(0.75, 0.5), "other": AdapterSpend(2.0, 2.0)})
    derived = budget_brief(config, task, claim.attempt, spend)
    assert (derived.day_left_usd, derived.adapter_day_left_usd, derived.attempt_usd) == (7.25, 0.25, None)
    assert derived.attempts_after == task.max_attempts - 1
