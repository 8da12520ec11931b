"""The attempt cannot decide its own tool calls (docs/policy.md, "Who decides"): tried from inside a real
attempt running as its own user, under a dispatcher running as the services' user, as the units run them."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import privsep
import pytest
from support import ran_ok, wait_until

DENIED = "touch denied_marker"
HELD = "echo needs a person"


def _policy(raw: dict[str, Any]) -> None:
    raw["policy"] = {
        "ask_timeout_s": 8,
        "rules": [
            {"decision": "deny", "tool": "Bash", "command": f"*{DENIED}*", "reason": "not here"},
            {"decision": "ask", "tool": "Bash", "command": f"*{HELD}*", "reason": "a person decides"},
        ],
    }


def _held_calls(agent: privsep.PrivAgent) -> list[dict[str, Any]]:
    waiting = json.loads(ran_ok(agent.as_operator("approvals", "--json")))
    return [entry for entry in waiting if entry.get("scope") == "tool_call"]


@pytest.mark.deep
@pytest.mark.process
def test_an_attempt_cannot_answer_approve_or_unbind_its_own_tool_calls() -> None:
    privsep.require()
    with privsep.priv_agent(_policy) as agent:
        ran_ok(agent.as_service("init"))
        told = agent.workspace / "held-call-id"
        payload = {"report": "calls-report.json", "denied_command": DENIED, "held_command": HELD}
        payload["held_call_file"] = str(told)
        ran_ok(agent.as_operator("task", "add", "--type", "hostile", "--payload", json.dumps(payload)))
        dispatcher = subprocess.Popen(
            agent.service_argv("dispatch", "--until-idle"), env=agent.env(), stderr=subprocess.PIPE, text=True
        )
        try:
            [held] = wait_until(lambda: _held_calls(agent), 60, "the attempt's held call")
            told.write_text(held["call_id"])  # what an attempt could learn at worst: the id itself
            told.chmod(0o644)
            _, stderr = dispatcher.communicate(timeout=90)
            assert dispatcher.returncode == 0, stderr
        finally:
            if dispatcher.poll() is None:
                dispatcher.kill()
                dispatcher.wait()

        tries = json.loads((agent.workspace / "calls-report.json").read_text())
        names = {t["name"] for t in tries}
        assert {"unlink the policy socket", "answer its own question (a forged request)"} <= names
        assert {"agentd approve --call", "run its held call without a person"} <= names
        assert [t for t in tries if t["succeeded"]] == [], json.dumps(tries, indent=1)
        events = [json.loads(line) for line in ran_ok(agent.as_operator("events", "--json")).splitlines()]
        allowed = [e for e in events if e["type"] == "tool_call_allowed"]
        assert allowed == [], allowed
        denied = {e["payload"]["summary"]: e["payload"] for e in events if e["type"] == "tool_call_denied"}
        assert any(DENIED in summary for summary in denied), denied
        [by_timeout] = [p for summary, p in denied.items() if HELD in summary]
        assert by_timeout["decided_by"] == "timeout", by_timeout
        assert _held_calls(agent) == []
