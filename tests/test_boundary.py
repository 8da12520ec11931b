"""The agent cannot act as its operator (README, "The boundary"): tried from inside a real attempt,
running as its own user under a service that runs as another, as the units run them."""

from __future__ import annotations

import json
from typing import Any

import privsep
import pytest


def hostile_payload(agent: privsep.PrivAgent, **more: Any) -> str:
    return json.dumps({"report": "hostile-report.json", "env_file": str(agent.env_file), **more})


def ok(done: Any) -> str:
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


@pytest.mark.process
def test_an_attempt_that_tries_to_act_as_its_operator_fails_at_every_try() -> None:
    privsep.require()
    with privsep.priv_agent() as agent:
        ok(agent.as_service("init"))
        held = json.loads(ok(agent.as_operator("task", "add", "--type", "example", "--require-approval", "--json")))
        payload = hostile_payload(agent, approve=held["task_id"])
        ok(agent.as_operator("task", "add", "--type", "hostile", "--payload", payload))
        ran = agent.as_service("dispatch", "--until-idle")
        assert ran.returncode == 0, ran.stderr
        assert f"attempts run as {agent.run}" in ran.stderr

        tries = json.loads((agent.workspace / "hostile-report.json").read_text())
        assert len(tries) >= 15
        succeeded = [t for t in tries if t["succeeded"]]
        assert succeeded == [], json.dumps(tries, indent=1)

        approvals = json.loads(ok(agent.as_operator("approvals", "--json")))
        assert [a["task_id"] for a in approvals] == [held["task_id"]]  # still held
        tasks = json.loads(ok(agent.as_operator("task", "list", "--json")))
        assert not any(t["source"] == "operator:x" for t in tasks)
        events = [json.loads(line) for line in ok(agent.as_operator("events", "--json")).splitlines()]
        assert not {"dispatch_paused", "dispatch_resumed", "approval_resolved"} & {e["type"] for e in events}
        hostile = next(t for t in tasks if t["task_type"] == "hostile")
        assert hostile["status"] == "completed"
        verified = agent.as_operator("evidence", "verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr
