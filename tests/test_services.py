"""Both services at once on one database, as real processes: nothing locked, nothing lost."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import write_sensor
from test_dispatch_process import Agent, wait_until

pytestmark = pytest.mark.process

LOAD = """
state = os.path.join(os.environ["AGENTD_SENSOR_STATE_DIR"], "runs")
run = int(open(state).read()) + 1 if os.path.exists(state) else 1
open(state, "w").write(str(run))
for n in range(200):
    print(event(f"{run}-{n}"))
"""


@pytest.mark.deep
def test_sensors_and_dispatcher_share_the_database_under_load(tmp_path: Path) -> None:
    sensors = tmp_path / "sensors"
    write_sensor(sensors, "load", LOAD, interval=1)
    agent = Agent(tmp_path, {"AGENTD_PATHS__SENSORS_DIR": str(sensors)})
    try:
        command = [sys.executable, "-m", "agentd", "--config", str(agent.config_path), "sensors"]
        with open(tmp_path / "sensors.log", "wb") as log:
            sensing = subprocess.Popen(command, env=agent.env, stdout=log, stderr=subprocess.STDOUT)
        dispatcher = agent.start()
        runs = lambda: [e for e in agent.store.read_events(limit=100_000) if e.type == "sensor_run_finished"]  # noqa: E731
        wait_until(lambda: len(runs()) >= 4, 60, "four sensor runs")
        sensing.send_signal(signal.SIGTERM)
        dispatcher.send_signal(signal.SIGTERM)
        assert sensing.wait(timeout=30) == 0 and dispatcher.wait(timeout=30) == 0
        logs = (tmp_path / "sensors.log").read_text() + agent.log(0)
        assert "database is locked" not in logs and "Traceback" not in logs
        created = sum(e.payload["created"] for e in runs())
        tasks = agent.store.list_tasks(limit=100_000)
        assert created == len(tasks) == 200 * len(runs())
        assert {t.status for t in tasks} <= {"completed", "pending"}  # each ran, or waits for the next start
        assert sum(t.status == "completed" for t in tasks) > 0
        assert agent.store.verify_event_chain() == []
    finally:
        agent.close()


def agentd_run(tmp_path: Path, agent: Agent) -> tuple[list[str], subprocess.Popen[bytes]]:
    """`agentd run` for `agent` as a real process (its output in tmp_path/run.log), once its dispatcher
    has started; and the command, to start another."""
    command = [sys.executable, "-m", "agentd", "--config", str(agent.config_path), "run"]
    with open(tmp_path / "run.log", "wb") as log:
        running = subprocess.Popen(command, env=agent.env, stdout=log, stderr=subprocess.STDOUT)
    wait_until(lambda: agent.event("dispatch_started"), 20, "the first dispatcher")
    return command, running


def test_a_second_agentd_run_says_dispatch_locked_without_a_traceback(tmp_path: Path) -> None:
    agent = Agent(tmp_path, {"AGENTD_METRICS__ENABLED": "false"})
    try:
        command, first = agentd_run(tmp_path, agent)
        second = subprocess.run(command, env=agent.env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert "dispatch_locked: another dispatcher holds the lock" in second.stderr
        assert "Traceback" not in second.stderr
        # the second served nothing: every service's row is still the first's, none says stopped
        rows = {row["service"]: row for row in agent.store.service_statuses()}
        assert {row["pid"] for row in rows.values()} == {first.pid}, rows
        assert all(row["status"] != "stopped" for row in rows.values()), rows
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
    finally:
        agent.close()


def test_a_closed_terminal_sighup_stops_agentd_run_as_sigterm_does(tmp_path: Path) -> None:
    """`make run` in a terminal that is closed gets SIGHUP: the services stop as they do on SIGTERM
    (each says so and records it), rather than die where they stand."""
    agent = Agent(tmp_path, {"AGENTD_METRICS__ENABLED": "false"})
    try:
        _, running = agentd_run(tmp_path, agent)
        running.send_signal(signal.SIGHUP)
        assert running.wait(timeout=30) == 0
        assert "SIGHUP received: stopping" in (tmp_path / "run.log").read_text()
        assert agent.event("dispatch_stopped")
    finally:
        agent.close()
