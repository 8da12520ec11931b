"""Poisoned sensor output, sensor secrets and a sensor service that died mid-run (issue: poison-proof,
findings 2, 3 and 8). Real sensor processes, real SQLite, a fake clock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from support import alive, gone, task_subjects, wait_until, write_sensor

from agentd.store import Store

pytestmark = pytest.mark.process

POISON_LINES = """
print(event("a"))
print(event("old", observed_at="0001-01-01T00:00:00+05:00"))
nan_task = {"task_type": "example", "source": "x", "payload": {}}
print(event("nan", proposed_task=nan_task).replace('"payload": {}}', '"payload": {"n": NaN}}'))
print('{"event_id": "s", "observed_at": "2026-01-01T00:00:00Z", "source_ref": "x", '
      '"dedupe_key": "\\\\ud800", "payload": {}}')
print('[' * 100000 + ']' * 100000)
print(event("huge", payload={"n": 10 ** 30}))
print(event("far", freshness_deadline="9999-12-31T23:59:59-01:00"))
print(event("b"))
"""


@pytest.mark.asyncio
async def test_poisoned_lines_are_rejected_one_by_one_and_their_neighbours_count(
    sensing: Callable[[], Rig], sensors_dir: Path
) -> None:
    write_sensor(sensors_dir, "poison", POISON_LINES)
    rig = sensing()
    [report] = await rig.service.run_due(rig.clock.now())
    assert report.result == "ok"
    assert task_subjects(rig) == ["task a", "task b"]
    reasons = {r.line: r.reason for r in report.rejected}
    assert set(reasons) == {2, 3, 4, 5, 6, 7}, reasons
    assert "outside the years 1..9999" in reasons[2]
    assert "NaN is not a JSON number" in reasons[3]
    assert "lone surrogate" in reasons[4]
    assert "nested deeper than" in reasons[5]
    assert "64-bit integer range" in reasons[6]
    assert "outside the years 1..9999" in reasons[7]
    [state] = [s for s in (await rig.db.call(Store.sensor_states)).values()]
    assert state.last_result == "ok" and state.next_run_at > rig.clock.now()
    assert rig.store.verify_event_chain() == []


def test_sensor_run_of_poisoned_output_exits_0_without_a_traceback(
    sensing: Callable[[], Rig], sensors_dir: Path, cli: Any
) -> None:
    write_sensor(sensors_dir, "poison", POISON_LINES)
    rig = sensing()
    result = cli("sensor", "run", "poison", config=rig.config.path)
    assert result.code == 0, result.err
    assert "Traceback" not in result.err and "line 4 rejected" in result.out
    assert task_subjects(rig) == ["task a", "task b"]


@pytest.mark.asyncio
async def test_a_run_agentd_fails_is_recorded_and_not_rerun_before_its_interval(
    sensing: Callable[[], Rig], sensors_dir: Path, tmp_path: Path
) -> None:
    env_file = tmp_path / "sensor.env"
    env_file.write_text("TOKEN=abcdefgh\n")
    env_file.chmod(0o600)
    write_sensor(sensors_dir, "breaks", 'print(event("x"))', interval=300, env_file=str(env_file))
    rig = sensing()
    env_file.write_text("this line is not KEY=VALUE\n")  # the run cannot even build its environment
    [report] = await rig.service.run_due(rig.clock.now())
    assert report.result == "internal_error" and "expected KEY=VALUE" in (report.error or "")
    state = (await rig.db.call(Store.sensor_states))["breaks"]
    assert state.last_result == "internal_error" and state.next_run_at > rig.clock.now()
    assert await rig.service.run_due(rig.clock.now()) == [], "due again only after its interval: no hot loop"
    rig.clock.advance(300)
    env_file.write_text("TOKEN=abcdefgh\n")
    [again] = await rig.service.run_due(rig.clock.now())
    assert again.result == "ok" and task_subjects(rig) == ["task x"]


SECRET = "ghp_s3cret-token-value"


@pytest.mark.asyncio
async def test_sensor_secrets_are_redacted_from_events_logs_and_tasks(
    sensing: Callable[[], Rig], sensors_dir: Path, tmp_path: Path
) -> None:
    env_file = tmp_path / "sensor.env"
    env_file.write_text(f"TOKEN={SECRET}\n")
    env_file.chmod(0o600)
    body = """
token = os.environ["TOKEN"]
print(event("k", payload={"token": token}, proposed_task={"task_type": "example", "source": "x",
      "subject": "use " + token, "payload": {}}))
print("debug " + token, file=sys.stderr)
sys.exit(3)
"""
    write_sensor(sensors_dir, "leaky", body, env_file=str(env_file))
    rig = sensing()
    [report] = await rig.service.run_due(rig.clock.now())
    assert report.result == "exit 3" and "[redacted]" in (report.error or "")
    assert task_subjects(rig) == ["use [redacted]"]
    places = [p for p in rig.config.paths.state_dir.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert [p.name for p in places if not p.name.startswith("agentd.db")] == []
    conn = rig.store._conn
    for table in ("sensor_events", "events", "tasks", "sensor_state"):
        rows = conn.execute(f"SELECT * FROM {table}").fetchall()
        assert not [r for r in rows if SECRET in json.dumps([str(v) for v in tuple(r)])], table


def running_as(rig: Rig, pid: int) -> bool:
    return any(s["pid"] == pid and s["status"] != "stopped" for s in rig.store.service_statuses())


def test_a_sensor_left_running_by_a_killed_service_is_swept_at_restart(
    sensing: Callable[[], Rig], sensors_dir: Path
) -> None:
    body = """
with open(os.path.join(os.environ["AGENTD_SENSOR_STATE_DIR"], "pid"), "w") as f:
    f.write(str(os.getpid()))
time.sleep(600)
"""
    write_sensor(sensors_dir, "hangs", body, timeout=3600)
    rig = sensing()
    pid_file = rig.config.paths.state_dir / "sensors" / "hangs" / "state" / "pid"
    env = {**os.environ, "AGENTD_METRICS__ENABLED": "false"}
    argv = [sys.executable, "-m", "agentd", "--config", str(rig.config.path), "sensors"]
    first = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sensor_pid = int(wait_until(lambda: pid_file.exists() and pid_file.read_text(), 30, "the sensor to start"))
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        assert alive(sensor_pid), "a sensor outlives a SIGKILL of its service: only a sweep stops it"
        second = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:

            def reclaimed() -> list[Any]:
                return [e for e in rig.store.read_events(limit=10_000) if e.type == "sensor_run_reclaimed"]

            [swept] = wait_until(reclaimed, 30, "the sweep to reclaim the orphaned sensor run")
            assert swept.sensor_id == "hangs" and swept.payload["killed"] >= 1
            assert gone(sensor_pid)
            wait_until(lambda: running_as(rig, second.pid), 30, "the restarted service to report itself")
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=30) == 0
    finally:
        if first.poll() is None:
            first.kill()
        if pid_file.exists() and alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


@pytest.mark.parametrize("name", ["bad\nname", "my sensor", "\u00b2", "-dash", "x" * 129])
def test_a_sensor_folder_whose_name_is_no_id_is_named_by_config_check(sensors_dir: Path, name: str) -> None:
    """The folder's name is the sensor's id (events, sources, logs, its state folder): "bad\\nname" was a
    sensor whose id split every log line it was in."""
    from agentd.config.sensors import load_sensors

    write_sensor(sensors_dir, "fine", "pass")
    write_sensor(sensors_dir, name, "pass")
    sensors, problems = load_sensors(sensors_dir, {})
    assert list(sensors) == ["fine"]
    [problem] = problems
    assert problem.source == str(sensors_dir / name) and "a sensor's folder name is its id: expected" in str(problem)


def test_a_dot_folder_in_sensors_or_skills_is_passed_over(sensors_dir: Path, tmp_path: Path) -> None:
    """A .git (or an editor's folder) was "missing: every sensor folder needs a sensor.toml"."""
    from agentd.config.sensors import load_sensors
    from agentd.config.skills import load_skills

    write_sensor(sensors_dir, "fine", "pass")
    for root in (sensors_dir, tmp_path / "skills"):
        (root / ".git" / "objects").mkdir(parents=True)
        (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    sensors, problems = load_sensors(sensors_dir, {})
    assert list(sensors) == ["fine"] and problems == []
    assert load_skills(tmp_path / "skills") == ({}, [])
