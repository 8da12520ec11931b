"""An attempt that attacks its own policy socket (docs/policy.md, "What one attempt can make the gate do"): it
keeps a call held for ever, floods the socket with calls, hangs up on it by the thousand. Each is bounded:
the attempt's held time in all, the decisions written as events, the lines in the dispatcher's log. The
hook's side of a dispatcher that says nothing is tried against a real socket that never answers."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import ADAPTERS, accept_each, run_main, wait_until
from test_dispatch_process import Agent, ok

from agentd.process import hook

pytestmark = pytest.mark.process
ASK_CURL = {"decision": "ask", "tool": "Bash", "command": "curl *", "reason": "the network needs a person"}
DENY_PUSH = {"decision": "deny", "tool": "Bash", "command": "git push*", "reason": "pushing is the operator's"}


def hostile(timeout_ms: int = 30_000, **policy: Any) -> Any:
    def mutate(raw: dict[str, Any]) -> None:
        raw["policy"] = {"rules": [ASK_CURL, DENY_PUSH], **policy}
        command = str(ADAPTERS / "hostile_policy.py")
        raw["adapters"].append(
            {"adapter_id": "hostile", "kind": "script", "command": command, "timeout_ms": timeout_ms}
        )
        raw["task_types"].append(
            {
                "task_type": "hostile",
                "payload_schema_id": "agent-runtime/payload.any-object/v1",
                "default_profile_id": "operator",
                "default_adapter_id": "hostile",
            }
        )

    return mutate


@pytest.fixture
def make_agent(tmp_path: Path) -> Iterator[Any]:
    made: list[Agent] = []

    def make(mutate: Any) -> Agent:
        made.append(Agent(tmp_path / str(len(made)), {}, mutate))
        return made[-1]

    yield make
    for agent in made:
        agent.close()


def _ended(agent: Agent, attempt_id: str) -> Any:
    attempt = agent.store.get_attempt(attempt_id)
    return attempt if attempt is not None and attempt.ended_at is not None else None


def attacks(agent: Agent) -> dict[str, Any]:
    return json.loads((agent.config.paths.workspace / "attacks.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("timeout_s", "ask_timeout_s"),
    [(4, 2), pytest.param(20, 8, marks=pytest.mark.slow)],  # the issue's own numbers: 20 s and 8 s, in the slow tier
    ids=["4s-2s", "20s-8s"],
)
def test_an_attempt_that_keeps_a_call_held_still_times_out(make_agent: Any, timeout_s: int, ask_timeout_s: int) -> None:
    """Two staggered loops keep one `ask` held at every moment: the clock is paused only for [policy] max_held_s in
    all (here the default, twice ask_timeout_s), then every ask is denied at once and the attempt's time runs out:
    its timeout + twice ask_timeout_s, plus the kill grace, not for ever."""
    agent = make_agent(hostile(timeout_ms=timeout_s * 1000, ask_timeout_s=ask_timeout_s))
    task_id = agent.add("hostile", attacks=[{"hold": {"loops": 2, "stagger_s": 0.5}}])
    dispatcher = agent.start()
    first = wait_until(lambda: next(iter(agent.store.attempts_of(task_id)), None), 30, "an attempt")
    attempt = wait_until(lambda: _ended(agent, first.attempt_id), timeout_s + 2 * ask_timeout_s + 30, "its end")
    dispatcher.terminate()
    dispatcher.wait(timeout=30)
    ran = (attempt.ended_at - attempt.started_at).total_seconds()
    assert attempt.termination_reason == "timeout", attempt.termination_reason
    assert ran < timeout_s + 2 * ask_timeout_s + 1 + 3, f"the attempt ran {ran:.1f}s"
    denied = [e.payload for e in agent.store.read_events(task_id=task_id) if e.attempt_id == attempt.attempt_id]
    reasons = {str(p.get("reason")) for p in denied if p.get("decided_by") == "policy"}
    assert any("max_held_s" in reason for reason in reasons), reasons


def test_a_flood_of_calls_writes_a_bounded_number_of_events(make_agent: Any) -> None:
    agent = make_agent(hostile(max_recorded_decisions=40))
    flood = {"flood": {"threads": 8, "calls": 400, "command": "git push -f"}}
    task_id = agent.add("hostile", attacks=[flood], outcome=ok())
    assert agent.start("--until-idle").wait(timeout=120) == 0
    assert attacks(agent)["flood"]["deny"] == 400 and attacks(agent)["flood"]["allow"] == 0
    events = [e for e in agent.store.read_events(task_id=task_id)]
    assert sum(1 for e in events if e.type == "tool_call_denied") == 40
    [suppressed] = [e for e in events if e.type == "tool_calls_suppressed"]
    assert suppressed.payload == {"count": 360, "recorded": 40}
    [attempt] = agent.store.attempts_of(task_id)
    assert attempt.diagnostics["tool_calls_suppressed"] == 360
    assert agent.store.get_task_or_raise(task_id).status == "completed"


def test_peers_that_hang_up_are_not_errors_in_the_log(make_agent: Any) -> None:
    agent = make_agent(hostile())
    task_id = agent.add("hostile", attacks=[{"hangups": 400}], outcome=ok())
    assert agent.start("--until-idle").wait(timeout=120) == 0
    log = agent.log(0)
    assert "Traceback" not in log and "BrokenPipeError" not in log and " ERROR " not in log, log[-3000:]
    assert agent.store.get_task_or_raise(task_id).status == "completed"


def test_a_script_may_ask_for_itself_with_no_harness_call_id(make_agent: Any) -> None:
    """The call-id check is claude's (its stream announces each call): a script's `agentd ask` has none to give,
    and an impostor's made-up id is judged like any call of the script's."""
    agent = make_agent(hostile())
    task_id = agent.add("hostile", attacks=[{"impostor": {"times": 2}}], outcome=ok())
    assert agent.start("--until-idle").wait(timeout=60) == 0
    assert attacks(agent)["impostor"] == {
        "allow": 2,
        "deny": 0,
        "reasons": ["allow by the [policy] default (no rule matches)"],
    }
    assert agent.store.get_task_or_raise(task_id).status == "completed"


class Silent:
    """A policy socket that accepts and never answers (a stopped, overloaded or restarting dispatcher), or that
    says the call is held and then never decides."""

    def __init__(self, folder: Path, said: bytes = b"") -> None:
        self.path = folder / "policy.sock"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(4)
        self.said, self.held = said, []
        accept_each(self.listener, self._hold)

    def _hold(self, conn: socket.socket) -> None:
        self.held.append(conn)
        if self.said:
            conn.sendall(self.said)


@pytest.mark.parametrize("said", [b"", hook.HELD + b"\n"], ids=["silent", "held-then-silent"])
def test_the_hook_denies_when_the_dispatcher_says_nothing(tmp_path: Path, said: bytes) -> None:
    silent = Silent(tmp_path, said)
    started = time.monotonic()
    with pytest.raises(hook.Unanswered) as refused:
        hook.ask(str(silent.path), {"tool": "Bash", "input": {}}, within_s=1.5, first_word_s=0.5)
    waited = time.monotonic() - started
    if said:
        assert "no decision reached the hook within 1.5s" in str(refused.value) and waited >= 1.4
    else:
        assert "agentd did not answer within 0.5s" in str(refused.value) and waited < 1.4
    assert hook.said({"decision": "deny", "reason": str(refused.value)})  # a deny the harness reads


def unhooked(raw: dict[str, Any]) -> None:
    """A claude-code adapter whose stand-in never runs its hook (tests/adapters/unhooked_claude.py), under a policy."""
    raw["policy"] = {"rules": [DENY_PUSH]}
    raw["dispatch"]["boundary"] = "advisory"  # a development rig on purpose (docs/install-and-deploy.md)
    command = str(ADAPTERS / "unhooked_claude.py")
    raw["adapters"].append({"adapter_id": "claude", "kind": "claude-code", "command": command, "timeout_ms": 60_000})
    raw["task_types"].append(
        {
            "task_type": "unhooked",
            "payload_schema_id": "agent-runtime/payload.any-object/v1",
            "default_profile_id": "operator",
            "default_adapter_id": "claude",
        }
    )


def test_a_call_that_ran_without_a_decision_ends_the_attempt_at_once_and_every_view_says_so(
    make_agent: Any, capsys: Any
) -> None:
    agent = make_agent(unhooked)
    task_id = agent.add("unhooked")
    started = time.monotonic()
    assert agent.start("--until-idle").wait(timeout=60) == 0
    assert time.monotonic() - started < 15, "the harness ran on after the call that ran without a decision"
    task = agent.store.get_task_or_raise(task_id)
    [attempt] = agent.store.attempts_of(task_id)
    assert attempt.termination_reason == "policy_violation" and task.status == "permanent_failure"
    assert "Bash call toolu_unhooked_1 ran without a decision from agentd" in (task.last_error or "")
    [undecided] = [e for e in agent.store.read_events(task_id=task_id) if e.type == "tool_call_undecided"]
    assert undecided.payload == {
        "tool": "Bash",
        "call_id": "toolu_unhooked_1",
        "what": "ran without a decision from agentd",
    }
    manifest = json.loads((Path(attempt.evidence_dir or "") / "manifest.json").read_text())
    assert manifest["tool_policy"]["violations"] == [undecided.payload]
    assert manifest["tool_policy"]["calls_reported"] == 1 and manifest["tool_policy"]["calls_decided"] == 0
    status = run_main(capsys, agent.config_path, "status")
    assert f"VIOLATION task {task_id}: attempt {attempt.attempt_id} was ended" in status.out
    [shown] = run_main(capsys, agent.config_path, "status", "--json").json()["policy_violations"]
    assert shown["task_id"] == task_id and shown["attempt_id"] == attempt.attempt_id
    verified = run_main(capsys, agent.config_path, "evidence", "verify")
    assert verified.code == 1 and "a tool call ran without agentd's decision (policy violation)" in verified.out
    shown_task = run_main(capsys, agent.config_path, "task", "show", str(task_id))
    assert "policy_violation" in shown_task.out
