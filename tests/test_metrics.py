"""Both services scraped over HTTP while a task runs, parsed with prometheus-client's own parser."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import write_sensor
from test_dispatch_process import Agent, ok, wait_until

from agentd.clock import SystemClock

pytestmark = pytest.mark.process

COMMON = {
    "agentd_build_info": "gauge",
    "agentd_tasks": "gauge",
    "agentd_tasks_waiting": "gauge",
    "agentd_oldest_pending_task_age_seconds": "gauge",
    "agentd_running_attempt_age_seconds": "gauge",
    "agentd_service_live": "gauge",
    "agentd_service_heartbeat_age_seconds": "gauge",
    "agentd_event_chain_head_sequence": "gauge",
    "agentd_backup_last_success_timestamp_seconds": "gauge",
    "agentd_backup_interval_seconds": "gauge",
}
DISPATCH = {
    **COMMON,
    "agentd_attempts": "counter",
    "agentd_attempt_duration_seconds": "histogram",
    "agentd_cost_usd": "counter",
    "agentd_tokens": "counter",
    "agentd_schedule_tasks_created": "counter",
    "agentd_workflow_transitions": "counter",
    "agentd_dispatch_lock_held": "gauge",
    "agentd_last_successful_attempt_timestamp_seconds": "gauge",
    "agentd_boot_sweep_reclaimed": "counter",
}
SENSORS = {**COMMON, "agentd_sensor_runs": "counter", "agentd_sensor_events": "counter"}


def scrape(url: str) -> dict[str, Any]:
    started = time.monotonic()
    with httpx.Client(trust_env=False, timeout=5) as client:
        response = client.get(url)
    assert response.status_code == 200
    assert time.monotonic() - started < 2, "a scrape never waits for an attempt"
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def value(families: dict[str, Any], name: str, sample: str | None = None, **labels: str) -> float:
    family = families[name]
    wanted = sample or name
    matches = [
        s.value for s in family.samples if s.name == wanted and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    return sum(matches)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    sensors = tmp_path / "sensors"
    write_sensor(sensors, "feed", "for n in range(3): print(event(n))\nprint('not json')", interval=3600)
    made = Agent(
        tmp_path,
        {
            "AGENTD_PATHS__SENSORS_DIR": str(sensors),
            "AGENTD_METRICS__DISPATCH_LISTEN": "127.0.0.1:0",
            "AGENTD_METRICS__SENSORS_LISTEN": "127.0.0.1:0",
        },
        lambda raw: raw.update(
            schedules=[{"schedule_id": "hourly", "interval_seconds": 3600, "task": {"task_type": "example"}}]
        ),
    )
    yield made
    made.close()


def metrics_urls(agent: Agent) -> dict[str, str]:
    def found() -> dict[str, str] | None:
        rows = {r["service"]: r["metrics_url"] for r in agent.store.service_statuses() if r["metrics_url"]}
        return rows if len(rows) == 2 else None

    return wait_until(found, 20, "both services to publish their metrics URL")  # type: ignore[no-any-return]


def test_both_services_expose_every_metric_and_the_counters_move(agent: Agent, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "agentd", "--config", str(agent.config_path), "sensors"]
    with open(tmp_path / "sensors.log", "wb") as log:
        sensors = subprocess.Popen(command, env=agent.env, stdout=log, stderr=subprocess.STDOUT)
    try:
        agent.store.create_workflow(
            "goal-loop", "m1", "plan", {"answers": {"verify": ["complete"]}}, SystemClock().now(), "test"
        )
        dispatcher = agent.start()
        urls = metrics_urls(agent)
        # three sensor tasks, one scheduled task, three workflow steps (plan, execute, verify)
        wait_until(
            lambda: (
                len(agent.store.list_tasks()) == 7 and all(t.status == "completed" for t in agent.store.list_tasks())
            ),
            30,
            "seven tasks done",
        )
        slow = agent.add(sleep_s=600, outcome=ok())
        agent.wait_event("task_started", slow)
        during = {"dispatch": scrape(urls["dispatch"]), "sensors": scrape(urls["sensors"])}
        for service, expected in (("dispatch", DISPATCH), ("sensors", SENSORS)):
            families = during[service]
            for name, kind in expected.items():
                assert name in families, (service, name)
                assert families[name].type == kind, (service, name, families[name].type)
            assert value(families, "agentd_tasks", status="running") == 1
            assert value(families, "agentd_tasks", status="completed") == 7
            assert value(families, "agentd_build_info", agent_id="demo") == 1
            assert value(families, "agentd_service_live", service="dispatch") == 1
            assert value(families, "agentd_service_live", service="sensors") == 1
            assert value(families, "agentd_running_attempt_age_seconds") > 0
            head = agent.store.chain_head()
            assert head is not None and value(families, "agentd_event_chain_head_sequence") <= head[0]
            assert not [s.name for f in families.values() for s in f.samples if s.name.endswith("_created")]
        d, s = during["dispatch"], during["sensors"]
        assert value(d, "agentd_attempts", "agentd_attempts_total", adapter="script", outcome="completed") == 4
        assert value(d, "agentd_attempts", "agentd_attempts_total", adapter="stepper", outcome="completed") == 3
        assert (
            value(d, "agentd_attempt_duration_seconds", "agentd_attempt_duration_seconds_count", adapter="script") == 4
        )
        assert value(d, "agentd_schedule_tasks_created", "agentd_schedule_tasks_created_total", schedule="hourly") == 1
        transitions = "agentd_workflow_transitions_total"
        assert value(d, "agentd_workflow_transitions", transitions, workflow_type="goal-loop", kind="transition") == 2
        assert value(d, "agentd_workflow_transitions", transitions, workflow_type="goal-loop", kind="complete") == 1
        assert value(d, "agentd_dispatch_lock_held") == 1
        assert value(d, "agentd_last_successful_attempt_timestamp_seconds") > time.time() - 120
        assert value(d, "agentd_boot_sweep_reclaimed", "agentd_boot_sweep_reclaimed_total") == 0
        assert value(s, "agentd_sensor_runs", "agentd_sensor_runs_total", sensor="feed", result="ok") == 1
        assert value(s, "agentd_sensor_events", "agentd_sensor_events_total", sensor="feed", result="created") == 3
        assert value(s, "agentd_sensor_events", "agentd_sensor_events_total", sensor="feed", result="rejected") == 1
        dispatcher.send_signal(signal.SIGTERM)
        sensors.send_signal(signal.SIGTERM)
        assert dispatcher.wait(timeout=30) == 0 and sensors.wait(timeout=30) == 0
    finally:
        if sensors.poll() is None:
            sensors.kill()
            sensors.wait()


def test_metrics_bind_loopback_by_default() -> None:
    from agentd.config.settings import MetricsSection

    defaults = MetricsSection()
    assert defaults.dispatch_listen.startswith("127.0.0.1:") and defaults.sensors_listen.startswith("127.0.0.1:")
    assert defaults.dispatch_listen != defaults.sensors_listen


def test_a_taken_metrics_port_is_a_clear_error(agent: Agent) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        agent.env["AGENTD_METRICS__DISPATCH_LISTEN"] = f"127.0.0.1:{port}"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "agentd",
                "--config",
                str(agent.config_path),
                "dispatch",
                "--until-idle",
                "--metrics",
            ],
            env=agent.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr  # bad input, before any work
    assert f"port {port} is in use (127.0.0.1:{port}, the dispatcher's /metrics): set [metrics] dispatch_listen" in (
        result.stderr
    )


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no thread count for pid {pid}")


def test_a_thousand_idle_connections_cannot_hold_the_dispatcher(agent: Agent) -> None:
    """Finding 6: a thread per idle connection made 1005 threads; now the endpoint lives in the event
    loop, caps its connections and times each one out, and attempts keep running meanwhile."""
    import socket

    dispatcher = agent.start()
    url = metrics_urls_of(agent, "dispatch")
    host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
    idle: list[socket.socket] = []
    try:
        before = threads_of(dispatcher.pid)
        for _ in range(1000):
            sock = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall(b"GET /metr")  # a request that never finishes
            idle.append(sock)
        task_id = agent.add(outcome=ok())
        agent.wait_event("task_finished", task_id, timeout=30)
        assert agent.store.get_task_or_raise(task_id).status == "completed"
        assert threads_of(dispatcher.pid) <= before + 4, "idle connections must not pin threads"
        assert dispatcher.poll() is None
    finally:
        for sock in idle:
            sock.close()
    wait_until(lambda: scrape_ok(url), 15, "a scrape to be answered once the flood is gone")
    dispatcher.send_signal(signal.SIGTERM)
    assert dispatcher.wait(timeout=30) == 0


def metrics_urls_of(agent: Agent, service: str) -> str:
    def found() -> str | None:
        return next((r["metrics_url"] for r in agent.store.service_statuses() if r["service"] == service), None)

    return wait_until(found, 20, f"{service} to publish its metrics URL")  # type: ignore[no-any-return]


def scrape_ok(url: str) -> bool:
    try:
        with httpx.Client(trust_env=False, timeout=2) as client:
            return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def test_both_units_cap_their_tasks() -> None:
    from support import REPO

    for unit in ("agentd-dispatch@.service", "agentd-sensors@.service"):
        text = (REPO / "units" / unit).read_text()
        assert "\nTasksMax=" in text, unit
