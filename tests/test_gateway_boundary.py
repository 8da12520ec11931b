"""The model gateway as deployed (docs/gateway.md): attempts as their own user, the services as theirs, the
gateway in the dispatcher. The provider's key is nowhere the attempt can read, yet every model call reaches the
upstream with it; from inside its own network the attempt reaches neither the upstream nor any other port of the
host's, only agentd's ways out; the usage recorded is the upstream's, whatever the harness printed."""

from __future__ import annotations

import json
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import privsep
import pytest
from fakemodel import FakeModelServer, Reply
from support import accept_each, ran_ok

pytestmark = [pytest.mark.deep, pytest.mark.process]
STAND_IN = Path(__file__).resolve().parent / "adapters" / "gateway_claude.py"


class Listening:
    """A port on the host's loopback that answers anyone who connects: what the attempt must not reach."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        accept_each(self.sock, self._answer)

    def _answer(self, conn: socket.socket) -> None:
        self.accepted += 1
        conn.close()


@pytest.fixture
def probe() -> Iterator[Listening]:
    listening = Listening()
    yield listening
    listening.sock.close()


def stand_in(fake: FakeModelServer, probe: Listening, network: bool) -> Any:
    def mutate(raw: dict[str, Any]) -> None:
        port = fake.url.rsplit(":", 1)[1].rstrip("/")
        key_file = next(a["env_file"] for a in raw["adapters"] if a["adapter_id"] == "scripted")  # the services' own
        raw["adapters"].append(
            {
                "adapter_id": "claude",
                "kind": "claude-code",
                "command": str(STAND_IN),
                "timeout_ms": 60_000,
                "env_file": key_file,
                "env": {
                    "ANTHROPIC_BASE_URL": fake.url,
                    "AGENTD_TEST_UPSTREAM_PORT": port,
                    "AGENTD_TEST_PROBE_PORT": str(probe.port),
                },
            }
        )
        raw["task_types"].append(
            {
                "task_type": "claude",
                "payload_schema_id": "agent-runtime/payload.any-object/v1",
                "default_profile_id": "operator",
                "default_adapter_id": "claude",
            }
        )
        raw["gateway"] = {"network": network}  # the gateway itself: on, as the attempts run as their own user

    return mutate


@pytest.mark.parametrize("network", [True, False], ids=["own-network", "host-network"])
def test_the_key_is_nowhere_the_attempt_can_read_and_every_call_reaches_the_upstream_with_it(
    probe: Listening, network: bool
) -> None:
    privsep.require()
    key = "sk-ant-api03-" + secrets.token_hex(24)
    fake = FakeModelServer(turns=[Reply("done", input_tokens=31, output_tokens=9)])
    with fake, privsep.priv_agent(stand_in(fake, probe, network)) as agent:
        with agent.env_file.open("a") as env_file:  # the services' own (0600): the attempt never reads it
            env_file.write(f"ANTHROPIC_API_KEY={key}\n")
        ran_ok(agent.as_service("init"))
        ran_ok(agent.as_operator("task", "add", "--type", "claude"))
        ran = agent.as_service("dispatch", "--until-idle")
        assert ran.returncode == 0, ran.stderr
        [task] = json.loads(ran_ok(agent.as_operator("task", "list", "--json")))
        assert task["status"] == "completed", task
        hunt = (agent.workspace / "hunt.txt").read_text()
        assert len(hunt) > 10_000 and "/proc/" in hunt, "the stand-in looked nowhere"
        assert key not in hunt and key[:20] not in hunt, "the provider's key was readable from the attempt"
        [call] = [r for r in fake.requests if r.protocol == "anthropic"]
        assert call.headers.get("x-api-key") == key, "the upstream did not get the real key"
        probes = json.loads((agent.workspace / "probes.json").read_text())
        if network:  # its only ways out are agentd's
            assert probes["upstream"].startswith("refused") and probes["probe"].startswith("refused"), probes
            assert probe.accepted == 0
        shown = json.loads(ran_ok(agent.as_operator("task", "show", str(task["task_id"]), "--json")))
        [attempt] = shown["attempts"]
        assert (attempt["usage"]["input_tokens"], attempt["usage"]["output_tokens"]) == (31, 9), attempt["usage"]
        assert attempt["diagnostics"]["harness_usage"]["output_tokens"] == 654321  # kept beside, never believed
        verified = agent.as_operator("evidence", "verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr
