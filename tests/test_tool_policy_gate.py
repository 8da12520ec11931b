"""The dispatcher's gate answering a real attempt's tool calls over its policy socket (docs/policy.md): the
script adapter asks with `agentd ask`, as a claude or codex hook would (those are in
tests/test_policy_harness.py)."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import HIDDEN_HEAD, HIDDEN_TAIL, PADDINGS, in_view, run_main, wait_until
from test_dispatch_process import Agent, ok

from agentd.adapters.activity import EventText
from agentd.attempt.calls import HELD_INPUT_MAX_CHARS, MAX_HELD, SUMMARY_CHARS, held_input, summary, why_not_held
from agentd.hashing import canonical_json, sha256_hex


def with_policy(rules: list[dict[str, Any]], **section: Any) -> Any:
    def mutate(raw: dict[str, Any]) -> None:
        raw["policy"] = {"rules": rules, **section}

    return mutate


DENY_PUSH = {"decision": "deny", "tool": "Bash", "command": "git push*", "reason": "pushing is the operator's"}
ASK_CURL = {"decision": "ask", "tool": "Bash", "command": "curl *", "reason": "the network needs a person"}


@pytest.fixture
def governed(tmp_path: Path) -> Iterator[Agent]:
    made = Agent(tmp_path, {}, with_policy([DENY_PUSH, ASK_CURL], ask_timeout_s=30))
    yield made
    made.close()


def asks(*calls: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"tool": "Bash", "input": {"command": command}, "marker": marker} for command, marker in calls]


def asked(agent: Agent) -> list[dict[str, Any]]:
    lines = (agent.config.paths.workspace / "asked.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_a_denied_call_is_refused_with_the_reason_and_the_attempt_goes_on(governed: Agent, capsys: Any) -> None:
    task_id = governed.add(asks=asks(("git push -f origin main", "pushed"), ("ls -la", "listed")), outcome=ok())
    governed.start("--until-idle").wait(timeout=60)
    workspace = governed.config.paths.workspace
    assert not (workspace / "pushed").exists() and (workspace / "listed").exists()
    first, second = asked(governed)
    assert first["rc"] == 1 and "pushing is the operator's" in first["said"]
    assert second["rc"] == 0
    assert governed.store.get_task_or_raise(task_id).status == "completed"
    denied, allowed = governed.event("tool_call_denied", task_id), governed.event("tool_call_allowed", task_id)
    assert denied is not None and denied.payload["summary"] == "Bash: git push -f origin main"
    assert denied.payload["rule"] == "deny: rule 1 ([policy])" and denied.payload["decided_by"] == "policy"
    assert allowed is not None and allowed.payload["rule"].startswith("allow: no rule matches")
    evidence = next(governed.config.paths.state_dir.glob("attempts/*/*/"))
    manifest = json.loads((evidence / "manifest.json").read_text())
    assert manifest["tool_policy"]["enforced"].startswith("when the script asks")
    steps = [json.loads(line) for line in (evidence / "action_trace.jsonl").read_text().splitlines()]
    decisions = [(s["tool"], s["is_error"], s["summary"]) for s in steps if s["kind"] == "decision"]
    assert decisions == [
        ("Bash", True, "deny by policy: Bash: git push -f origin main (deny: rule 1 ([policy]))"),
        ("Bash", False, "allow by policy: Bash: ls -la (allow: no rule matches; [policy] default = 'allow')"),
    ]
    verified = run_main(capsys, governed.config_path, "evidence", "verify")
    assert verified.code == 0, verified.out + verified.err


def held_call(agent: Agent) -> Any:
    return wait_until(lambda: next(iter(agent.store.pending_calls()), None), 30, "a held call")


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_an_ask_call_waits_for_a_person_and_runs_once_approved(governed: Agent, capsys: Any) -> None:
    task_id = governed.add(asks=asks(("curl https://example.com", "fetched")), outcome=ok())
    dispatcher = governed.start("--until-idle")
    held = held_call(governed)
    assert held.summary == "Bash: curl https://example.com" and held.task_id == task_id
    status = run_main(capsys, governed.config_path, "status")
    assert f"WAITING  tool call {held.call_id} of task {task_id}" in status.out
    assert "  waiting for a decision on Bash: curl https://example.com" in status.out
    [shown] = run_main(capsys, governed.config_path, "status", "--json").json()["held_calls"]
    assert shown["call_id"] == held.call_id and shown["age_s"] >= 0
    listed = run_main(capsys, governed.config_path, "approvals")
    assert held.call_id in listed.out and "curl https://example.com" in listed.out
    assert not (governed.config.paths.workspace / "fetched").exists()
    approved = run_main(capsys, governed.config_path, "approve", "--call", held.call_id, "--note", "fine")
    assert approved.code == 0 and "goes ahead" in approved.out
    dispatcher.wait(timeout=60)
    assert (governed.config.paths.workspace / "fetched").exists()
    requested = governed.event("permission_requested", task_id)
    assert requested is not None and requested.payload["call_id"] == held.call_id
    allowed = governed.event("tool_call_allowed", task_id)
    assert allowed is not None and allowed.payload["decided_by"] not in ("policy", "timeout")
    again = run_main(capsys, governed.config_path, "deny", "--call", held.call_id, "--reason", "late")
    assert again.code == 2 and "already allowed" in again.err


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_a_denied_ask_call_does_not_run_and_the_reason_reaches_the_attempt(governed: Agent, capsys: Any) -> None:
    task_id = governed.add(asks=asks(("curl https://example.com", "fetched")), outcome=ok())
    dispatcher = governed.start("--until-idle")
    held = held_call(governed)
    denied = run_main(capsys, governed.config_path, "deny", "--call", held.call_id, "--reason", "not today")
    assert denied.code == 0
    dispatcher.wait(timeout=60)
    assert not (governed.config.paths.workspace / "fetched").exists()
    assert "not today" in asked(governed)[0]["said"]
    event = governed.event("tool_call_denied", task_id)
    assert event is not None and event.payload["reason"] == "not today"


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_an_unanswered_ask_is_denied_at_the_ask_timeout_and_the_wait_does_not_count_against_the_attempt(
    tmp_path: Path,
) -> None:
    def mutate(raw: dict[str, Any]) -> None:
        with_policy([ASK_CURL], ask_timeout_s=3)(raw)
        for adapter in raw["adapters"]:
            adapter["timeout_ms"] = 2_000  # less than the wait: only a paused clock lets the attempt finish

    agent = Agent(tmp_path, {}, mutate)
    try:
        task_id = agent.add(asks=asks(("curl https://example.com", "fetched")), outcome=ok())
        agent.start("--until-idle").wait(timeout=60)
        assert not (agent.config.paths.workspace / "fetched").exists()
        event = agent.event("tool_call_denied", task_id)
        assert event is not None and event.payload["decided_by"] == "timeout" and event.payload["waited_s"] >= 3
        [attempt] = agent.store.attempts_of(task_id)
        assert attempt.termination_reason == "exited" and agent.store.get_task_or_raise(task_id).status == "completed"
        assert agent.store.pending_calls() == []
    finally:
        agent.close()


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_a_call_held_when_its_dispatcher_is_killed_is_denied_by_the_boot_sweep(governed: Agent, capsys: Any) -> None:
    """kill -9 while a call waits: the next dispatcher's boot sweep ends the attempt, and the call with it,
    so no one is asked to decide a call whose attempt is gone."""
    task_id = governed.add(asks=asks(("curl https://example.com", "fetched")), outcome=ok())
    first = governed.start()
    held = held_call(governed)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    governed.start("--until-idle").wait(timeout=60)
    assert governed.store.pending_calls() == []
    denied = governed.event("tool_call_denied", task_id)
    assert denied is not None and denied.payload["call_id"] == held.call_id
    assert denied.payload["decided_by"] == "attempt ended"
    assert "tool call" not in run_main(capsys, governed.config_path, "approvals").out


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_every_surface_shows_a_held_calls_tail_however_it_is_padded(governed: Agent, capsys: Any) -> None:
    """Issue 50, finding 2: `curl …` + padding + `; touch hidden_marker` was shown as just the curl, and
    approving it ran the tail. Held now, its tail is in view in `approvals` (table and --json), `status`
    (text and --json) and `permission_requested`; the whole input is kept with its sha256, which the
    decision's event carries."""
    commands = {name: HIDDEN_HEAD + pad + HIDDEN_TAIL for name, pad in PADDINGS.items()}
    task_id = governed.add(asks=asks(*[(command, f"ran-{name}") for name, command in commands.items()]), outcome=ok())
    dispatcher = governed.start("--until-idle")
    shown = []
    for name, command in commands.items():
        pad, held = PADDINGS[name], held_call(governed)
        whole = canonical_json({"command": command}).decode()
        assert (held.input_json, held.input_chars, held.input_sha256) == (whole, len(whole), sha256_hex(whole.encode()))
        assert in_view(held.summary, pad), (name, held.summary)
        listed = run_main(capsys, governed.config_path, "approvals").out
        assert in_view(listed, pad), (name, listed)
        assert held.input_sha256 in listed
        [as_json] = [c for c in run_main(capsys, governed.config_path, "approvals", "--json").json() if "call_id" in c]
        status = run_main(capsys, governed.config_path, "status")
        [in_status] = run_main(capsys, governed.config_path, "status", "--json").json()["held_calls"]
        requested = governed.store.read_events(task_id=task_id, types=("permission_requested",))[-1].payload
        for view in (as_json, in_status, requested):
            assert (view["summary"], view["input_json"], view["input_sha256"]) == (
                held.summary, whole, held.input_sha256)  # fmt: skip
        assert in_view(status.out, pad) and held.input_sha256[:12] in status.out, (name, status.out)
        shown.append(held.input_sha256)
        assert run_main(capsys, governed.config_path, "approve", "--call", held.call_id).code == 0
    dispatcher.wait(timeout=60)
    allowed = governed.store.read_events(task_id=task_id, types=("tool_call_allowed",))
    assert [event.payload["input_sha256"] for event in allowed] == shown  # each decision names what it saw
    assert all((governed.config.paths.workspace / f"ran-{name}").exists() for name in commands)


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_a_call_too_long_to_show_whole_is_denied_not_held(governed: Agent) -> None:
    """An input longer than HELD_INPUT_MAX_CHARS as canonical JSON cannot be shown whole on every surface:
    the policy denies it, saying why, and no person is asked about a part of it."""
    command = "curl https://example.com/" + "a" * HELD_INPUT_MAX_CHARS + HIDDEN_TAIL
    task_id = governed.add(asks=asks((command, "fetched")), outcome=ok())
    governed.start("--until-idle").wait(timeout=60)
    assert not (governed.config.paths.workspace / "fetched").exists()
    [answer] = asked(governed)
    assert answer["rc"] == 1 and f"more than the {HELD_INPUT_MAX_CHARS:,} a person can be shown whole" in answer["said"]
    denied = governed.event("tool_call_denied", task_id)
    whole = canonical_json({"command": command}).decode()
    assert denied is not None and denied.payload["decided_by"] == "policy"
    assert denied.payload["input_sha256"] == sha256_hex(whole.encode())
    assert denied.payload["input_chars"] == len(whole) and "more than the 4,096" in denied.payload["reason"]
    assert governed.event("permission_requested", task_id) is None and governed.store.pending_calls() == []


def test_the_longest_input_held_is_the_longest_every_surface_shows_whole() -> None:
    """HELD_INPUT_MAX_CHARS of canonical JSON is held; one character more, or an input JSON cannot be
    written from (nested too deep), is denied saying why; so is a ninth call at once."""
    frame = len(canonical_json({"command": ""}))
    padded = {"command": HIDDEN_HEAD + " " * (HELD_INPUT_MAX_CHARS - frame - 60) + HIDDEN_TAIL}
    longest = held_input({"command": "a" * (HELD_INPUT_MAX_CHARS - frame)}, EventText())
    assert longest["input_chars"] == HELD_INPUT_MAX_CHARS and why_not_held(longest, 0) is None
    assert why_not_held(held_input(padded, EventText()), 0) is None  # held, and its padding hides nothing:
    assert summary("Bash", padded, EventText()).endswith(HIDDEN_TAIL)  # the window a summary reads is all of it
    over = held_input({"command": "a" * (HELD_INPUT_MAX_CHARS - frame + 1)}, EventText())
    assert f"{HELD_INPUT_MAX_CHARS + 1:,} characters as JSON, more than the" in str(why_not_held(over, 0))
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    assert "nested too deep" in str(why_not_held(held_input({"command": "x", "deep": deep}, EventText()), 0))
    assert str(why_not_held(longest, MAX_HELD)).startswith(f"denied: {MAX_HELD} calls")


def test_a_cut_summary_says_how_much_it_left_out_and_which_input_it_is_of() -> None:
    tool_input = {"command": "curl https://example.com/" + "a" * 1000 + HIDDEN_TAIL}
    said, whole = summary("Bash", tool_input, EventText()), held_input(tool_input, EventText())
    assert len(said) <= len("Bash: ") + SUMMARY_CHARS and "touch" not in said
    assert said.endswith(f" chars; input sha256 {whole['input_sha256'][:12]}…)") and "a… (+" in said
