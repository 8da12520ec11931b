"""Attempts through the model gateway with the real, pinned claude and codex against the fake model (`make
test-harness`; docs/gateway.md): the usage recorded is exactly what the upstream answered, whatever the harness
prints; a 429 with a reset waits for it and resumes the session, nothing else on the credential claimed
meanwhile; a budget past its cap asks a person or stops before the upstream sees the call; inside its own network
the harness reaches only agentd's ways out; a gateway that is gone lets no call out."""

# ruff: noqa: F811  (harness_factory is the adapter contract's fixture, imported to be used by name)

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakemodel import Fail, Reply, ToolCall
from support import wait_until
from test_adapter_contract import SHELL_TOOL, Harness, harness_factory, outcome_message, shell  # noqa: F401

from agentd.cli import main
from agentd.services.fleet import credentials_of
from agentd.work.validation import load_config

pytestmark = [pytest.mark.harness, pytest.mark.process]


def through_gateway(network: bool = True, **more: Any) -> Any:
    def mutate(raw: dict[str, Any]) -> None:
        raw["gateway"] = {"enabled": True, "network": network}
        for key, value in more.items():
            if key == "adapter":
                next(a for a in raw["adapters"] if a["adapter_id"] == "a").update(value)
            elif key == "profile":
                next(p for p in raw["profiles"] if p["profile_id"] == "p").update(value)
            else:
                raw[key] = value

    return mutate


def events(harness: Harness, kind: str, attempt_id: str | None = None) -> list[Any]:
    return [e for e in harness.store.read_events() if e.type == kind and attempt_id in (None, e.attempt_id)]


def answered(harness: Harness) -> tuple[int, int]:
    """What the upstream answered in all: the usage every model call's answer carried."""
    turns = [r.turn for r in harness.model_calls()]
    return (
        sum(getattr(t, "input_tokens", 0) for t in turns if t is not None),
        sum(getattr(t, "output_tokens", 0) for t in turns if t is not None),
    )


FORGE = (  # written into claude's own stdout pipe and its session files: usage it never had
    "for fd in /proc/$PPID/fd/1 /proc/$PPID/fd/2; do printf '%s\\n' "
    '\'{"type":"assistant","message":{"id":"msg_forged","content":[],"usage":{"input_tokens":0,"output_tokens":0}}}\' '
    '\'{"type":"result","subtype":"success","is_error":false,"usage":{"input_tokens":1,"output_tokens":1}}\' '
    "> $fd; done 2>/dev/null; echo forged"
)


@pytest.mark.parametrize("kind", ["claude-code", "codex"])
def test_the_usage_recorded_is_what_the_upstream_answered_whatever_the_harness_prints(
    kind: str, harness_factory: Any
) -> None:
    turns = [shell(kind, FORGE), Reply(outcome_message(), input_tokens=4321, output_tokens=65)]
    harness = harness_factory(kind, turns, more=through_gateway())
    task, attempt = harness.run()[:2]
    assert task.status == "completed", (task.last_error, attempt.diagnostics)
    usage = attempt.usage or {}
    assert (usage["input_tokens"], usage["output_tokens"]) == answered(harness) == (11 + 4321, 7 + 65), usage
    assert attempt.diagnostics["usage_source"] == "gateway" and attempt.diagnostics["model_calls"] == 2
    calls = events(harness, "model_call_finished", attempt.attempt_id)
    assert [c.payload["status"] for c in calls] == [200, 200] and all(c.payload["request_sha256"] for c in calls)
    evidence = Path(attempt.evidence_dir or "")
    lines = [json.loads(line) for line in (evidence / "model_calls.jsonl").read_text().splitlines()]
    assert [line["response"]["sha256"] for line in lines] == [c.payload["response_sha256"] for c in calls]
    keys = [r.headers.get("x-api-key") or r.headers.get("authorization", "") for r in harness.model_calls()]
    assert keys and all(key.endswith("fake-key") for key in keys), keys  # the real key, never the token
    verified = subprocess.run(
        [sys.executable, "-m", "agentd", "--config", str(harness.config_path), "evidence", "verify"],
        capture_output=True,
        text=True,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


class Allowed:
    """A plain HTTP server on the host's loopback: the one host an attempt's profile allows (through the proxy)."""

    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = b"reached-the-allowed-host\n"
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def allowed() -> Iterator[Allowed]:
    server = Allowed()
    yield server
    server.server.shutdown()
    server.server.server_close()


PROBE = (
    "upstream=${AGENTD_TEST_UPSTREAM##*:}; "
    'python3 -c "import socket,sys\n'
    "for port in sys.argv[1:]:\n"
    "    try:\n"
    "        socket.create_connection(('127.0.0.1', int(port)), timeout=3); print('CONNECTED', port)\n"
    "    except OSError as e: print('REFUSED', port, type(e).__name__)\" $upstream $AGENTD_TEST_ALLOWED > probes.txt; "
    'curl -sS --noproxy "" -p -x "$HTTPS_PROXY" http://localhost:$AGENTD_TEST_ALLOWED/ > through-proxy.txt 2>&1; '
    'curl -sS --noproxy "" -p -x "$HTTPS_PROXY" http://localhost:$upstream/ > refused-proxy.txt 2>&1; echo done'
)


def test_inside_its_own_network_the_harness_reaches_only_agentds_ways_out(
    harness_factory: Any, allowed: Allowed
) -> None:
    def more(raw: dict[str, Any]) -> None:
        adapter = next(a for a in raw["adapters"] if a["adapter_id"] == "a")
        adapter["env"].update(
            AGENTD_TEST_UPSTREAM=adapter["env"]["ANTHROPIC_BASE_URL"], AGENTD_TEST_ALLOWED=str(allowed.port)
        )
        through_gateway(profile={"egress": {"allow": [f"localhost:{allowed.port}"]}})(raw)

    harness = harness_factory("claude-code", [shell("claude-code", PROBE), Reply(outcome_message())], more=more)
    upstream = harness.fake.url.rsplit(":", 1)[1].rstrip("/")
    task, attempt = harness.run()[:2]
    assert task.status == "completed", (task.last_error, attempt.diagnostics)
    probes = (harness.workspace / "probes.txt").read_text()
    assert f"REFUSED {upstream}" in probes and f"REFUSED {allowed.port}" in probes, probes
    assert "reached-the-allowed-host" in (harness.workspace / "through-proxy.txt").read_text()
    assert "reached" not in (harness.workspace / "refused-proxy.txt").read_text()
    connections = [e.payload for e in events(harness, "egress_connection", attempt.attempt_id)]
    assert any(c["allowed"] and c["port"] == allowed.port and c["bytes_down"] > 0 for c in connections), connections
    assert any(not c["allowed"] and c["port"] == int(upstream) for c in connections), connections


@pytest.mark.timeout(240)  # the provider's reset is 40 s away: the test waits for it
def test_a_429_with_a_reset_waits_for_it_resumes_the_session_and_holds_the_credential(
    harness_factory: Any,
) -> None:
    """The provider says its limit resets in 40 s: the task runs again then (not after a fixed backoff), resuming
    the same claude session; a second task on the same credential is not claimed before it."""
    turns = [
        ToolCall("Bash", {"command": "echo before-the-limit"}),  # a conversation to resume
        Fail(429, "rate limited", times=1, resets_in_s=40),  # its second call is turned away
        Reply(outcome_message()),  # the resumed session's
        Reply(outcome_message()),  # the second task's
    ]
    harness = harness_factory("claude-code", turns, timeout_ms=60_000, more=through_gateway(network=False))
    assert main(["--config", str(harness.config_path), "task", "add", "--type", "work", "--payload", "{}"]) == 0
    dispatcher = subprocess.Popen(
        [sys.executable, "-m", "agentd", "--config", str(harness.config_path), "dispatch"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        first = wait_until(lambda: next((a for a in _attempts(harness) if a.ended_at), None), 60, "the 429")
        limited_at = time.monotonic()
        assert first.termination_reason != "policy_violation" and first.diagnostics.get("rate_limit"), first.diagnostics
        assert main(["--config", str(harness.config_path), "task", "add", "--type", "work", "--payload", "{}"]) == 0
        [resets] = [harness.store.resting_credentials(harness.store.clock.now())]
        assert resets and resets[0].group.adapters == ("a",)
        # the fleet's name for the credential: the one every agent reading the same key computes from its config
        assert resets[0].fleet_credential in credentials_of(load_config(harness.config_path)), resets
        done = wait_until(lambda: _all_completed(harness), 120, "both tasks completed after the reset")
        waited = time.monotonic() - limited_at
    finally:
        dispatcher.send_signal(signal.SIGTERM)
        dispatcher.wait(timeout=60)
    assert 30 < waited < 100, f"the retry came after {waited:.0f}s, not at the reset"
    started = sorted(a.started_at for a in _attempts(harness) if a.attempt_id != first.attempt_id)
    reset_at = first.diagnostics["rate_limit"]["reset_at"]
    assert all(s.isoformat().replace("+00:00", "Z") >= reset_at[:19] for s in started), (started, reset_at)
    resumed = events(harness, "harness_session_resumed")
    assert resumed and resumed[0].payload.get("resumed_from") == first.attempt_id, [e.payload for e in resumed]
    assert done


def _attempts(harness: Harness) -> list[Any]:
    return [a for t in harness.store.list_tasks(limit=10) for a in harness.store.attempts_of(t.task_id)]


def _all_completed(harness: Harness) -> bool:
    tasks = harness.store.list_tasks(limit=10)
    return len(tasks) == 2 and all(t.status == "completed" for t in tasks)


def priced(per_attempt_usd: float, on_budget: str) -> Any:
    def mutate(raw: dict[str, Any]) -> None:
        through_gateway(network=False, profile={"on_budget": on_budget})(raw)
        raw["budget"] = {"per_attempt_usd": per_attempt_usd}
        adapter = next(a for a in raw["adapters"] if a["adapter_id"] == "a")
        adapter["prices"] = {adapter["model"]: {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}

    return mutate


@pytest.mark.parametrize("approved", [True, False], ids=["approved", "denied"])
def test_a_budget_past_its_cap_asks_a_person_first(approved: bool, harness_factory: Any) -> None:
    """claude asks for up to 32,000 output tokens a call: at $15 per million, its worst case ($0.48) is past a
    $0.01 cap. Allowed, the cap goes up once and the attempt goes on; denied, it ends budget_exceeded and the
    upstream never saw the call."""
    harness = harness_factory("claude-code", [Reply(outcome_message())], more=priced(0.01, "ask"))
    assert main(["--config", str(harness.config_path), "task", "add", "--type", "work", "--payload", "{}"]) == 0
    dispatcher = subprocess.Popen(
        [sys.executable, "-m", "agentd", "--config", str(harness.config_path), "dispatch", "--until-idle"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    held = wait_until(lambda: next(iter(harness.store.pending_calls()), None), 60, "the budget's question")
    assert held.tool == "model" and held.summary.startswith("budget reached: $0.0000 spent, allow up to $")
    assert harness.model_calls() == [], "the upstream saw the call before anyone allowed it"
    verb = ["approve", "--call", held.call_id] if approved else ["deny", "--call", held.call_id, "--reason", "no"]
    assert main(["--config", str(harness.config_path), *verb]) == 0
    assert dispatcher.wait(timeout=120) == 0
    [task] = harness.store.list_tasks(limit=1)
    [attempt] = harness.store.attempts_of(task.task_id)
    if approved:
        assert task.status == "completed" and attempt.diagnostics["budget_raised_usd"] > 0.01, attempt.diagnostics
        assert len(harness.model_calls()) == 1
    else:
        assert attempt.termination_reason == "budget_exceeded" and harness.model_calls() == []
        assert "before the call" in attempt.diagnostics["budget_stop"]["by"]


def test_a_budget_that_stops_ends_the_attempt_before_the_upstream_sees_the_call(harness_factory: Any) -> None:
    harness = harness_factory("claude-code", [Reply(outcome_message())], more=priced(0.01, "stop"))
    task, attempt = harness.run()[:2]
    assert attempt.termination_reason == "budget_exceeded" and task.status == "permanent_failure"
    assert harness.model_calls() == [], "the upstream saw a call past the cap"


def test_a_gateway_that_is_gone_lets_no_call_out(harness_factory: Any) -> None:
    """The dispatcher (the gateway is in it) is killed while the harness runs a tool: in its own network the
    harness's next model call reaches nothing, and the attempt ends with the runtime's death, said."""
    turns = [shell("claude-code", "sleep 6; echo slept"), Reply(outcome_message())]
    harness = harness_factory("claude-code", turns, timeout_ms=60_000, more=through_gateway())
    assert main(["--config", str(harness.config_path), "task", "add", "--type", "work", "--payload", "{}"]) == 0
    dispatcher = subprocess.Popen(
        [sys.executable, "-m", "agentd", "--config", str(harness.config_path), "dispatch"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until(lambda: len(harness.model_calls()) >= 1, 60, "the first model call")
    time.sleep(1)
    os.kill(dispatcher.pid, signal.SIGKILL)
    dispatcher.wait(timeout=10)
    time.sleep(12)  # the tool call ends; claude asks the model again: there is no one to answer
    assert len(harness.model_calls()) == 1, "a model call left the attempt with its gateway gone"
    swept = subprocess.run(
        [sys.executable, "-m", "agentd", "--config", str(harness.config_path), "dispatch", "--until-idle"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert swept.returncode == 0, swept.stderr
    [task] = harness.store.list_tasks(limit=1)
    first = harness.store.attempts_of(task.task_id)[0]
    assert first.termination_reason == "boot_sweep", first.termination_reason
