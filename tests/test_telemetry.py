"""Traces an observability stack reads (docs/telemetry.md): a trace per task, a span per attempt and per tool call,
the envelope's ids on both, sent over OTLP/HTTP by the OpenTelemetry SDK without ever holding up dispatch, and
received by a real OTLP backend on loopback (Arize Phoenix, from PyPI, installed by tests/otel/install.sh; the
end-to-end test skips by name without it unless AGENTD_REQUIRE_OTEL=1)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from support import accept_each, missing, wait_until

from agentd.errors import ConfigError
from agentd.outlook.correlation import attempt_span_id, task_span_id, trace_id
from agentd.outlook.runtime_facts import runtime_events
from agentd.outlook.spans import attempt_spans, task_span
from agentd.outlook.telemetry import TelemetryLoop, spans_of_task

REPO = Path(__file__).resolve().parent.parent
PHOENIX = REPO / ".cache" / "phoenix-venv" / "bin" / "phoenix"


def done(**fields: Any) -> dict[str, Any]:
    return {"status": "completed", "machine_status": "ok", "operator_summary": "done", **fields}


async def drain(rig: Rig) -> None:
    await rig.dispatcher().run_until_idle()


def with_tool_calls(rig: Rig, task_id: int, attempt_id: str) -> None:
    """What a harness's live stream records (agentd/attempt/live.py): two calls, one failed, one never finished."""
    calls = [
        ("tool_started", {"call_id": "c1", "tool": "Bash", "summary": "ls"}),
        ("tool_finished", {"call_id": "c1", "tool": "Bash", "ok": True, "summary": ""}),
        ("tool_started", {"call_id": "c2", "tool": "Read", "summary": "x"}),
        ("tool_finished", {"call_id": "c2", "tool": "Read", "ok": False, "summary": ""}),
        ("tool_started", {"call_id": "c3", "tool": "Task", "summary": "y"}),
    ]
    rig.store.record_activity(task_id, attempt_id, calls, rig.clock.now())


@pytest.mark.asyncio
async def test_a_task_is_one_trace_its_attempts_children_and_their_tool_calls_grandchildren(rig: Rig) -> None:
    task = rig.add("flaky")  # a retryable failure every time, until its attempts run out
    while rig.store.get_task_or_raise(task.task_id).status not in ("permanent_failure", "blocked"):
        await drain(rig)
        rig.clock.advance(3600)
    events = rig.events(task.task_id)
    attempts = list(dict.fromkeys(e.attempt_id for e in events if e.attempt_id))
    assert len(attempts) >= 2
    agent = rig.config.agent.agent_id
    spans = list(spans_of_task(agent, events))
    root = [s for s in spans if s.parent_span_id is None]
    assert [s.span_id for s in root] == [task_span_id(agent, task.task_id)] and not root[0].ok
    assert {s.trace_id for s in spans} == {trace_id(agent, task.task_id)}
    children = [s for s in spans if s.parent_span_id == root[0].span_id]
    assert sorted(s.span_id for s in children) == sorted(attempt_span_id(a) for a in attempts)
    assert all(root[0].start <= s.start <= s.end <= root[0].end for s in children)


@pytest.mark.asyncio
async def test_tool_spans_sit_inside_their_attempt_and_a_call_never_finished_fails_with_it(rig: Rig) -> None:
    task = rig.add("scripted", payload={"outcome": done()})
    await drain(rig)
    [attempt_id] = {e.attempt_id for e in rig.events(task.task_id) if e.attempt_id}
    with_tool_calls(rig, task.task_id, attempt_id)
    attempt, *tools = attempt_spans(rig.config.agent.agent_id, rig.events(task.task_id), attempt_id)
    assert {t.parent_span_id for t in tools} == {attempt.span_id}
    assert [(t.name, t.ok) for t in tools] == [("tool Bash", True), ("tool Read", False), ("tool Task", False)]
    assert all(attempt.start <= t.start <= t.end <= attempt.end for t in tools)


def test_nothing_unfinished_is_a_span(rig: Rig) -> None:
    task = rig.add("example")
    assert task_span(rig.config.agent.agent_id, rig.events(task.task_id)) is None
    assert attempt_spans(rig.config.agent.agent_id, rig.events(task.task_id), "A1") == []


@pytest.mark.asyncio
async def test_the_envelope_names_the_spans_it_belongs_to(rig: Rig) -> None:
    task = rig.add("scripted", payload={"outcome": done()})
    await drain(rig)
    agent = rig.config.agent.agent_id
    shown = [x for e in rig.events(task.task_id) for x in runtime_events(e, agent)]
    spans = {s.span_id for s in spans_of_task(agent, rig.events(task.task_id))}
    assert {x["traceId"] for x in shown} == {trace_id(agent, task.task_id)}
    assert {x["spanId"] for x in shown} <= spans


class BlackHole:
    """A collector that accepts a connection and never answers: the worst a collector can do to a sender."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.accepted: list[socket.socket] = []
        accept_each(self.server, self.accepted.append)

    def close(self) -> None:
        self.server.close()
        for connection in self.accepted:
            connection.close()


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    hole = BlackHole()
    yield hole
    hole.close()


def telemetry_rig(rig_factory: Callable[..., Rig], endpoint: str) -> Rig:
    def set_endpoint(raw: dict[str, Any]) -> None:
        raw["telemetry"] = {"otlp_endpoint": endpoint, "export_timeout_s": 1, "interval_s": 0.1}

    return rig_factory(set_endpoint)


@pytest.mark.asyncio
async def test_a_collector_that_never_answers_does_not_hold_up_the_pass(
    rig_factory: Callable[..., Rig], black_hole: BlackHole
) -> None:
    rig = telemetry_rig(rig_factory, f"http://127.0.0.1:{black_hole.port}")
    loop = TelemetryLoop.of(rig.config, rig.db, rig.clock)
    assert loop is not None
    assert await loop.pass_once() == 0  # the first pass starts at the chain's head
    rig.add("scripted", payload={"outcome": done()})
    await drain(rig)
    assert await loop.pass_once() == 2  # the attempt's span and the task's, handed over
    # the pass is back while the collector holds the export: it was sent from the SDK's own thread
    wait_until(lambda: black_hole.accepted, 10, "the sender to reach the collector")
    assert await loop.pass_once() == 0, "a cursor: nothing is handed over twice"
    assert (rig.config.paths.state_dir / "telemetry_cursor").read_text().strip().isdigit()
    loop.sender.close()


def test_an_endpoint_without_the_sdk_is_refused_naming_the_extra(
    rig_factory: Callable[..., Rig], monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = telemetry_rig(rig_factory, "http://127.0.0.1:1")
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if the extra were not installed
    with pytest.raises(ConfigError, match=r"telemetry\.otlp_endpoint.*agentd\[otel\]"):
        TelemetryLoop.of(rig.config, rig.db, rig.clock)


def test_no_endpoint_no_loop(rig: Rig) -> None:
    assert TelemetryLoop.of(rig.config, rig.db, rig.clock) is None


@pytest.mark.parametrize("endpoint", ["127.0.0.1:4318", "ftp://x", "http://", "http://a b"])
def test_an_endpoint_that_is_no_http_url_is_refused(rig_factory: Callable[..., Rig], endpoint: str) -> None:
    with pytest.raises(ConfigError, match=r"telemetry\.otlp_endpoint"):
        telemetry_rig(rig_factory, endpoint)


# --- end to end: a real OTLP backend on loopback ------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def phoenix(tmp_path: Path) -> Iterator[str]:
    """Arize Phoenix serving OTLP/HTTP on 127.0.0.1 (its REST API reads back what it stored)."""
    if not PHOENIX.exists():
        missing("OTEL", f"no OTLP backend at {PHOENIX} (tests/otel/install.sh installs Arize Phoenix from PyPI)")
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (tmp_path / "phoenix.log").open("wb")
    process = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: process.poll() is not None or _up(url), 90, "Phoenix to serve")
        assert process.poll() is None, (tmp_path / "phoenix.log").read_text()[-2000:]
        yield url
    finally:
        process.terminate()
        process.wait(30)
        log.close()


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def stored_spans(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/v1/projects/default/spans?limit=100", timeout=5) as answer:
        return list(json.loads(answer.read())["data"])


@pytest.mark.deep  # Phoenix is slow to start; make test keeps the in-process span tests above
@pytest.mark.process
@pytest.mark.timeout(180)
@pytest.mark.asyncio
async def test_a_real_backend_receives_a_tasks_spans_with_their_parentage(
    rig_factory: Callable[..., Rig], phoenix: str
) -> None:
    rig = telemetry_rig(rig_factory, phoenix)
    loop = TelemetryLoop.of(rig.config, rig.db, rig.clock)
    assert loop is not None
    await loop.pass_once()
    task = rig.add("scripted", payload={"outcome": done()})
    await drain(rig)
    [attempt_id] = {e.attempt_id for e in rig.events(task.task_id) if e.attempt_id}
    with_tool_calls(rig, task.task_id, attempt_id)
    assert await loop.pass_once() == 5  # the attempt, its three tool calls, the task
    assert loop.sender.flush()
    agent = rig.config.agent.agent_id
    stored = wait_until(lambda: len(found := stored_spans(phoenix)) >= 5 and found, 30, "the spans to be stored")
    by_id = {s["context"]["span_id"]: s for s in stored}
    root, attempt = task_span_id(agent, task.task_id), attempt_span_id(attempt_id)
    assert {s["context"]["trace_id"] for s in stored} == {trace_id(agent, task.task_id)}
    assert by_id[root]["parent_id"] is None and by_id[attempt]["parent_id"] == root
    tools = [s for s in stored if s["name"].startswith("tool ")]
    assert len(tools) == 3 and {s["parent_id"] for s in tools} == {attempt}
    assert attempt_id in json.dumps(by_id[attempt]["attributes"]), "its attributes name the attempt"
    assert by_id[attempt]["status_code"] == "OK" and by_id[by_id[attempt]["parent_id"]]["status_code"] == "OK"
    loop.sender.close()


@pytest.mark.asyncio
async def test_each_model_call_through_the_gateway_is_a_span_inside_its_attempt(rig: Rig) -> None:
    """docs/gateway.md: a model_call_finished event becomes a span of its own, ending when it was written and as
    long as the call took; a 429 or a cut answer is a failed span."""
    task = rig.add("scripted", payload={"outcome": done()})
    await drain(rig)
    [attempt_id] = {e.attempt_id for e in rig.events(task.task_id) if e.attempt_id}
    for n, status, cut in ((1, 200, False), (2, 429, False), (3, 200, True)):
        said = {"n": n, "api": "anthropic", "model": "claude-x", "status": status, "latency_ms": 12.5}
        payload = {**said, "input_tokens": 11, "output_tokens": 7, **({"cut": True} if cut else {})}
        rig.store.record_model_call(task.task_id, attempt_id, payload, rig.clock.now())
    attempt, *models = attempt_spans(rig.config.agent.agent_id, rig.events(task.task_id), attempt_id)
    assert [m.ok for m in models] == [True, False, False] and {m.name for m in models} == {"model claude-x"}
    assert {m.parent_span_id for m in models} == {attempt.span_id} and len({m.span_id for m in models}) == 3
    assert all(attempt.start <= m.start <= m.end <= attempt.end for m in models)
    assert models[0].attributes["agentd.model.input_tokens"] == 11 and models[1].status_message == "status 429"
