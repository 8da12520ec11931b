"""Governance inside the attempt with the real, pinned claude and codex CLIs against the fake model server
(docs/policy.md; `make test-harness`): a denied call never runs and the model hears why, an `ask` call
waits for `agentd approve --call` or `deny --call` or its timeout, a budget stops a running attempt, and
every trap the harnesses' hooks were measured to have is tried."""

# ruff: noqa: F811  (harness_factory is the adapter contract's fixture, imported to be used by name)

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fakemodel import Reply, ToolCall
from support import wait_until
from test_adapter_contract import SHELL_TOOL, Harness, harness_factory, outcome_message, shell, without_gateway  # noqa: F401

from agentd.cli import main

pytestmark = [pytest.mark.harness, pytest.mark.process]
KINDS = ["claude-code", "codex"]
REASON = "R-denied-by-the-operator's-policy"
DENY_MARKER = {"decision": "deny", "tool": "Bash", "command": "*touch denied_marker*", "reason": REASON}
ASK_CURL = {"decision": "ask", "tool": "Bash", "command": "*touch asked_marker*", "reason": "needs a person"}


def policy(*rules: dict[str, Any], **section: Any) -> Any:
    def mutate(raw: dict[str, Any]) -> None:
        raw["policy"] = {"rules": list(rules), **section}

    return mutate


def both(*changes: Any) -> Any:
    def mutate(raw: dict[str, Any]) -> None:
        for change in changes:
            change(raw)

    return mutate


def events(harness: Harness, kind: str) -> list[Any]:
    return [e for e in harness.store.read_events() if e.type == kind]


def model_saw(harness: Harness, text: str) -> bool:
    return any(text in json.dumps(call.body) for call in harness.model_calls()[1:])


def harness_run(harness: Harness) -> tuple[Any, Any]:
    task, attempt, _ = harness.run()
    return task, attempt


@pytest.mark.parametrize("kind", KINDS)
def test_a_denied_call_never_runs_the_model_hears_why_and_the_attempt_goes_on(kind: str, harness_factory: Any) -> None:
    turns = [shell(kind, "touch denied_marker; echo RAN"), shell(kind, "touch ok_marker"), Reply(outcome_message())]
    harness = harness_factory(kind, turns, more=policy(DENY_MARKER))
    task, attempt = harness_run(harness)
    assert not (harness.workspace / "denied_marker").exists(), "the denied command ran"
    assert (harness.workspace / "ok_marker").exists(), "the attempt did not go on past the denial"
    assert model_saw(harness, REASON), "the model was not told why"
    assert task.status == "completed", (task.last_error, attempt.diagnostics)
    [denied] = events(harness, "tool_call_denied")  # codex leaves no item in its stream for a blocked call
    assert denied.payload["rule"] == "deny: rule 1 ([policy])" and "touch denied_marker" in denied.payload["summary"]
    assert denied.attempt_id == attempt.attempt_id
    manifest = json.loads((Path(attempt.evidence_dir or "") / "manifest.json").read_text())
    assert manifest["tool_policy"]["enforced"].startswith("at each call")


def start(harness: Harness) -> subprocess.Popen[bytes]:
    assert main(["--config", str(harness.config_path), "task", "add", "--type", "work", "--payload", "{}"]) == 0
    return subprocess.Popen(
        [sys.executable, "-m", "agentd", "--config", str(harness.config_path), "dispatch", "--until-idle"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def held(harness: Harness) -> Any:
    return wait_until(lambda: next(iter(harness.store.pending_calls()), None), 60, "a held call")


def ended(harness: Harness, dispatcher: subprocess.Popen[bytes]) -> tuple[Any, Any]:
    assert dispatcher.wait(timeout=120) == 0
    [task] = harness.store.list_tasks(limit=1)
    [attempt] = harness.store.attempts_of(task.task_id)
    return task, attempt


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("approved", [True, False], ids=["approved", "denied"])
def test_an_ask_call_waits_for_a_person(kind: str, approved: bool, harness_factory: Any) -> None:
    turns = [shell(kind, "touch asked_marker"), Reply(outcome_message())]
    harness = harness_factory(kind, turns, more=policy(ASK_CURL))
    dispatcher = start(harness)
    call = held(harness)
    time.sleep(1)  # a second held: nothing runs while it waits
    assert not (harness.workspace / "asked_marker").exists()
    argv = ["approve", "--call", call.call_id] if approved else ["deny", "--call", call.call_id, "--reason", "not now"]
    assert main(["--config", str(harness.config_path), *argv]) == 0
    task, _ = ended(harness, dispatcher)
    assert (harness.workspace / "asked_marker").exists() is approved
    assert task.status == "completed"
    if not approved:
        assert model_saw(harness, "not now")


@pytest.mark.parametrize("kind", KINDS)
def test_an_unanswered_ask_is_denied_at_the_ask_timeout(kind: str, harness_factory: Any) -> None:
    turns = [shell(kind, "touch asked_marker"), Reply(outcome_message())]
    harness = harness_factory(kind, turns, more=policy(ASK_CURL, ask_timeout_s=2))
    task, _ = harness_run(harness)
    assert not (harness.workspace / "asked_marker").exists()
    [denied] = events(harness, "tool_call_denied")
    assert denied.payload["decided_by"] == "timeout" and task.status == "completed"


def priced(budget: dict[str, float]) -> Any:
    def mutate(raw: dict[str, Any]) -> None:
        raw["budget"] = budget
        adapter = next(a for a in raw["adapters"] if a["adapter_id"] == "a")
        adapter["prices"] = {adapter["model"]: {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}

    return mutate


@pytest.mark.parametrize("kind", KINDS)
def test_a_running_attempt_past_its_budget_is_stopped_before_it_ends_by_itself(kind: str, harness_factory: Any) -> None:
    """agentd's meter: the day's budget left ($0.01) is no cap the harness is given; the first turn costs
    ~$0.06 (codex reports it in its session file once that call has run), and the second call would sleep."""
    expensive = ToolCall(*_shell_args(kind, "echo first"), input_tokens=20_000, output_tokens=100)
    slow = ToolCall(*_shell_args(kind, "sleep 25; touch late_marker"))
    more = without_gateway(priced({"daily_usd": 0.01}))  # the gateway holds the call itself: test_gateway_attempts
    harness = harness_factory(kind, [expensive, slow, Reply(outcome_message())], more=more)
    started = time.monotonic()
    task, attempt = harness_run(harness)
    assert time.monotonic() - started < 25, "it ran to its own end"
    assert not (harness.workspace / "late_marker").exists()
    assert attempt.termination_reason == "budget_exceeded", (attempt.termination_reason, attempt.diagnostics)
    assert task.status == "retryable_failure" and "what was left of the day's budget" in (task.last_error or "")
    assert (attempt.usage or {}).get("input_tokens", 0) >= 20_000, attempt.usage
    stop = attempt.diagnostics["budget_stop"]
    assert stop["spent_usd"] > 0.01 and stop["by"] == "agentd"


def test_claude_stopping_itself_at_the_attempt_s_cap_is_a_budget_stop(harness_factory: Any) -> None:
    """[budget] per_attempt_usd is claude's --max-budget-usd: when claude stops itself, that is budget_exceeded
    too. No prices are configured, so agentd's own meter (which would otherwise race claude) cannot stop it."""
    expensive = ToolCall(*_shell_args("claude-code", "touch late_marker"), input_tokens=20_000, output_tokens=100)

    def more(raw: dict[str, Any]) -> None:
        raw["budget"] = {"per_attempt_usd": 0.01}

    harness = harness_factory("claude-code", [expensive, Reply(outcome_message())], more=more)
    task, attempt = harness_run(harness)
    assert attempt.termination_reason == "budget_exceeded" and task.status == "permanent_failure"
    assert "claude (--max-budget-usd)" in (task.last_error or "")
    assert not (harness.workspace / "late_marker").exists()


# The attempt forges a line into claude's own stdout (a pipe: /proc/$PPID/fd/1 is claude's, as the Bash tool runs
# it), re-using the id of the message that asked for this call, read back from claude's session transcript in HOME.
FORGE_ZERO_USAGE = (
    r"id=$(grep -rhoE 'msg_fake_[0-9a-f]{8,}' ~/.claude/projects | head -1); "
    r"""printf '{"type":"assistant","message":{"id":"%s","content":[],"usage":{"input_tokens":0,"""
    r""""output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}\n' "$id" """
    r"> /proc/$PPID/fd/1"
)


def test_a_line_forged_into_claude_s_stdout_does_not_lower_the_running_figure(harness_factory: Any) -> None:
    """Issue 50, finding 6: each of the two messages alone is below the day's budget left ($0.05 at $3 per million
    input tokens: 12 000 tokens cost $0.036), both are past it. The first call rewrites the first message's usage
    to zero through claude's stdout pipe; the meter keeps, per message id, the largest usage any line gave."""
    forge = ToolCall(*_shell_args("claude-code", FORGE_ZERO_USAGE), input_tokens=12_000)
    slow = ToolCall(*_shell_args("claude-code", "sleep 25; touch late_marker"), input_tokens=12_000)
    more = without_gateway(priced({"daily_usd": 0.05}))  # claude's stdout is the meter's only without the gateway
    harness = harness_factory("claude-code", [forge, slow, Reply(outcome_message())], more=more)
    started = time.monotonic()
    _, attempt = harness_run(harness)
    assert time.monotonic() - started < 25, "it ran to its own end"
    stdout = (Path(attempt.evidence_dir or "") / "stdout.log").read_text()
    assert '"content":[],"usage":{"input_tokens":0' in stdout, "the forged line did not reach claude's stdout"
    assert attempt.termination_reason == "budget_exceeded", (attempt.termination_reason, attempt.diagnostics)
    assert not (harness.workspace / "late_marker").exists()
    assert attempt.diagnostics["budget_stop"]["input_tokens"] == 24_000  # each message once, neither lowered


def _shell_args(kind: str, command: str) -> tuple[str, dict[str, Any]]:
    tool, argument = SHELL_TOOL[kind]
    return tool, {argument: command}


# --- the traps (docs/policy.md, "What each harness enforces") ---------------------------------------------


def test_claude_cannot_silence_the_hook_through_its_settings_mid_run(harness_factory: Any) -> None:
    """claude re-reads user settings, and project settings that existed at its start: run with
    --setting-sources "" it reads neither, and its hook settings are no file it could re-read."""
    silence = (
        'mkdir -p "$HOME/.claude" && echo \'{"disableAllHooks": true}\' > "$HOME/.claude/settings.json"'
        " && echo '{\"disableAllHooks\": true}' > .claude/settings.json; sleep 2"
    )
    turns = [shell("claude-code", silence), shell("claude-code", "touch denied_marker"), Reply(outcome_message())]
    harness = harness_factory("claude-code", turns, more=policy(DENY_MARKER))
    (harness.workspace / ".claude").mkdir(parents=True, exist_ok=True)
    (harness.workspace / ".claude" / "settings.json").write_text("{}")  # exists at start: claude would re-read it
    task, _ = harness_run(harness)
    assert not (harness.workspace / "denied_marker").exists(), "a mid-run disableAllHooks silenced the hook"
    assert task.status == "completed" and len(events(harness, "tool_call_denied")) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_repository_s_own_settings_cannot_turn_the_hook_off(kind: str, harness_factory: Any) -> None:
    turns = [shell(kind, "touch denied_marker"), Reply(outcome_message())]
    harness = harness_factory(kind, turns, more=policy(DENY_MARKER))
    harness.workspace.mkdir(parents=True, exist_ok=True)
    (harness.workspace / ".claude").mkdir()
    (harness.workspace / ".claude" / "settings.json").write_text('{"disableAllHooks": true}')
    (harness.workspace / ".codex").mkdir()
    (harness.workspace / ".codex" / "config.toml").write_text("[features]\nhooks = false\n")
    harness_run(harness)
    assert not (harness.workspace / "denied_marker").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_deny_holds_in_the_harness_s_bypass_mode(kind: str, harness_factory: Any) -> None:
    def trusted(raw: dict[str, Any]) -> None:
        adapter = next(a for a in raw["adapters"] if a["adapter_id"] == "a")
        adapter["autonomy"] = {"profile": "trusted-vm"}
        if kind == "codex":
            adapter["sandbox"] = "danger-full-access"

    turns = [shell(kind, "touch denied_marker"), Reply(outcome_message())]
    harness = harness_factory(kind, turns, more=both(policy(DENY_MARKER), trusted))
    harness_run(harness)
    assert not (harness.workspace / "denied_marker").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_nested_shell_does_not_hide_a_denied_command(kind: str, harness_factory: Any) -> None:
    """codex's own `forbidden` rules do not look inside `sh -c "…"`; agentd's command globs do."""
    turns = [shell(kind, "sh -c 'cd . && touch denied_marker'"), Reply(outcome_message())]
    harness = harness_factory(kind, turns, more=policy(DENY_MARKER))
    harness_run(harness)
    assert not (harness.workspace / "denied_marker").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_dispatcher_that_cannot_be_reached_means_deny_never_run(kind: str, harness_factory: Any) -> None:
    """Both harnesses run a call when their hook fails or times out: agentd's hook answers deny instead. The
    socket is unlinked from outside as soon as it is bound (codex's sandbox keeps its calls out of the run
    folder, so the attempt itself could not)."""
    turns = [shell(kind, "touch ok_marker"), Reply(outcome_message())]
    harness = harness_factory(kind, turns, more=policy(DENY_MARKER))
    unlinked = threading.Event()

    def unlink_the_socket() -> None:
        deadline = time.monotonic() + 60
        while not unlinked.is_set() and time.monotonic() < deadline:
            for found in harness.directory.rglob("policy.sock"):
                found.unlink()
                unlinked.set()
            time.sleep(0.005)

    remover = threading.Thread(target=unlink_the_socket, daemon=True)
    remover.start()
    harness_run(harness)
    remover.join()
    assert unlinked.is_set()
    assert not (harness.workspace / "ok_marker").exists(), "the hook failed open"
    assert model_saw(harness, "policy socket could not be reached")
