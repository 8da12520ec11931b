"""The sensor service: real sensor processes, real SQLite, a fake clock (real time only for hangs)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from rig import Rig
from support import task_subjects, write_sensor

from agentd.clock import SystemClock
from agentd.services.sensing import SensorService

pytestmark = [pytest.mark.process, pytest.mark.asyncio]


async def test_the_same_1000_events_for_5_runs_make_1000_tasks(sensing: Callable[[], Rig], sensors_dir: Path) -> None:
    write_sensor(sensors_dir, "repeat", "for n in range(1000): print(event(n))", interval=60)
    rig = sensing()
    for _ in range(5):
        [report] = await rig.service.run_due(rig.clock.now())
        assert report.result == "ok"
        rig.clock.advance(60)
    assert len(task_subjects(rig)) == 1000 and report.counts.deduped == 1000
    kinds = [e.type for e in rig.events()]
    assert kinds.count("sensor_task_created") == 1000
    assert kinds.count("sensor_event_deduped") == 1000, "each key's first repeat, once; never per run"
    assert all(t.source.startswith("sensor:repeat:") for t in rig.store.list_tasks(limit=10))


async def test_repeated_lines_are_counted_and_a_run_with_nothing_new_writes_no_run_event(
    sensing: Callable[[], Rig], sensors_dir: Path
) -> None:
    """Honest operations, finding 5: the audit log is not a diary of sensors seeing what they saw before
    (each key's first repeat writes its sensor_event_deduped, once: issue 21)."""
    write_sensor(sensors_dir, "same", 'print(event("a"))\nprint(event("b"))', interval=60)
    rig = sensing()
    for _ in range(10):
        await rig.service.run_due(rig.clock.now())
        rig.clock.advance(60)
    first_run = [e.type for e in rig.events() if e.sensor_id == "same"]
    assert first_run.count("sensor_event_recorded") == 2 and first_run.count("sensor_run_finished") == 1
    assert first_run.count("sensor_event_deduped") == 2
    [state] = rig.store.sensor_states().values()
    assert state.runs == 10 and state.last_result == "ok"  # `sensor list` still says when it last ran
    assert state.last_run_at == rig.clock.now() - timedelta(seconds=60)


async def test_a_run_with_something_new_or_wrong_keeps_its_event_and_counts_its_repeats(
    sensing: Callable[[], Rig], sensors_dir: Path
) -> None:
    body = """
state = os.path.join(os.environ["AGENTD_SENSOR_STATE_DIR"], "runs")
run = int(open(state).read()) + 1 if os.path.exists(state) else 1
open(state, "w").write(str(run))
print(event("a"))
print(event("b"))
if run == 2:
    print(event("c"))
if run == 3:
    print("not json")
if run == 4:
    sys.exit(3)
"""
    write_sensor(sensors_dir, "mostly-same", body, interval=60)
    rig = sensing()
    for _ in range(5):
        await rig.service.run_due(rig.clock.now())
        rig.clock.advance(60)
    finished = [e.payload for e in rig.events() if e.type == "sensor_run_finished"]
    assert [(p["result"], p["recorded"], p["deduped"], p["rejected"]) for p in finished] == [
        ("ok", 2, 0, 0),  # new events
        ("ok", 1, 2, 0),  # one new event among repeats
        ("ok", 0, 2, 1),  # a rejected line
        ("exit 3", 0, 2, 0),  # a failure
    ]  # and the fifth run saw nothing new: no event


async def test_a_sensor_killed_mid_output_then_rerun_creates_each_task_once(
    sensing: Callable[[], Rig], sensors_dir: Path
) -> None:
    body = """
marker = os.path.join(os.environ["AGENTD_SENSOR_STATE_DIR"], "ran-once")
first = not os.path.exists(marker)
open(marker, "w").close()
for n in range(1000):
    print(event(n), flush=True)
    if first and n == 499:
        os.kill(os.getpid(), 9)
"""
    write_sensor(sensors_dir, "dies", body, interval=60)
    rig = sensing()
    [first] = await rig.service.run_due(rig.clock.now())
    assert first.result == "killed by SIGKILL" and first.counts.created == 500
    rig.clock.advance(60)
    [second] = await rig.service.run_due(rig.clock.now())
    assert second.result == "ok" and second.counts.created == 500 and second.counts.deduped == 500
    assert task_subjects(rig) == sorted(f"task {n}" for n in range(1000))


async def test_malformed_lines_are_rejected_by_number_and_the_rest_still_count(
    sensing: Callable[[], Rig], sensors_dir: Path
) -> None:
    body = """
print(event("a"))
print("this is not json")
print(json.dumps({"event_id": "x"}))
print(event("b", proposed_task={"task_type": "no-such-type", "source": "x", "payload": {}}))
print(event("c", sensor_id="someone-else"))
print(json.dumps([1, 2]))
print(event("d"))
"""
    write_sensor(sensors_dir, "mixed", body)
    rig = sensing()
    [report] = await rig.service.run_due(rig.clock.now())
    assert task_subjects(rig) == ["task a", "task d"]
    assert [r.line for r in report.rejected] == [2, 3, 4, 5, 6]
    rejected = {e.payload["line"]: e.payload["reason"] for e in rig.events() if e.type == "sensor_event_rejected"}
    assert rejected[2].startswith("not JSON") and "not a SensorEvent" in rejected[3]
    assert "unknown task type 'no-such-type'" in rejected[4] and "is not this sensor" in rejected[5]
    assert "expected a JSON object" in rejected[6]


async def test_a_rejected_event_keeps_its_dedupe_key_free(sensing: Callable[[], Rig], sensors_dir: Path) -> None:
    """The sensor's key is not spent on an event agentd refused: once the cause is fixed, it counts."""
    write_sensor(
        sensors_dir,
        "fixable",
        'print(event("k", proposed_task={"task_type": os.environ["TYPE"], "source": "x", "payload": {}}))',
        env={"TYPE": "nope"},
    )
    rig = sensing()
    await rig.service.run_due(rig.clock.now())
    assert task_subjects(rig) == []
    toml = sensors_dir / "fixable" / "sensor.toml"
    toml.write_text(toml.read_text().replace('"nope"', '"example"'))
    rig = sensing()  # the operator fixed the config
    rig.clock.advance(120)
    await rig.service.run_due(rig.clock.now())
    assert len(task_subjects(rig)) == 1


async def test_stale_events_are_recorded_without_a_task(sensing: Callable[[], Rig], sensors_dir: Path) -> None:
    write_sensor(sensors_dir, "late", 'print(event("old", freshness_deadline="2000-01-01T00:00:00Z"))')
    rig = sensing()
    [report] = await rig.service.run_due(rig.clock.now())
    assert report.counts.stale == 1 and task_subjects(rig) == []
    assert any(e.type == "sensor_event_stale" for e in rig.events())


async def test_proposed_workflows_are_created_once(sensing: Callable[[], Rig], sensors_dir: Path) -> None:
    proposal = '{"template": "goal-loop", "instance_key": "g1", "context": {"goal": "x"}}'
    body = (
        f'print(event("w", proposed_task=None, proposed_workflow={proposal}))\n'
        f'print(event("w2", proposed_task=None, proposed_workflow={proposal}))'
    )
    write_sensor(sensors_dir, "goals", body)
    rig = sensing()
    [report] = await rig.service.run_due(rig.clock.now())
    assert report.counts.workflows_created == 1 and report.counts.workflows_deduped == 1
    [workflow] = rig.store.list_workflows()
    assert workflow.instance_key == "g1" and workflow.current_state == "plan"
    [found] = [e for e in rig.events() if e.type == "sensor_workflow_deduped"]
    assert found.workflow_id == workflow.workflow_id and found.payload["dedupe_key"] == "w2"


async def test_a_restart_neither_reruns_early_nor_forgets(sensing: Callable[[], Rig], sensors_dir: Path) -> None:
    write_sensor(sensors_dir, "tick", "print(event(time.time()))", interval=300)
    rig = sensing()
    assert len(await rig.service.run_due(rig.clock.now())) == 1
    restarted = SensorService(rig.config, rig.db, clock=rig.clock)
    rig.clock.advance(299)
    assert await restarted.run_due(rig.clock.now()) == []
    rig.clock.advance(1)
    assert len(await restarted.run_due(rig.clock.now())) == 1
    [state] = rig.store.sensor_states().values()
    assert state.runs == 2


async def test_a_hanging_sensor_is_killed_and_the_others_still_run_on_time(
    sensing: Callable[[], Rig], sensors_dir: Path
) -> None:
    write_sensor(sensors_dir, "hang", "time.sleep(600)", interval=60, timeout=2)
    write_sensor(sensors_dir, "quick", "print(event(time.time()))", interval=1)
    rig = sensing()
    service = SensorService(rig.config, rig.db, clock=SystemClock())
    started = time.monotonic()
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: service.run())
        with anyio.fail_after(10):  # the database is the only channel between the service and us
            while not any(e.type == "sensor_run_finished" and e.sensor_id == "hang" for e in rig.events()):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        service.request_stop()
    quick_runs = [e for e in rig.events() if e.type == "sensor_run_finished" and e.sensor_id == "quick"]
    [hang] = [e for e in rig.events() if e.type == "sensor_run_finished" and e.sensor_id == "hang"]
    assert hang.payload["result"] == "timeout"
    assert time.monotonic() - started < 2 + 1 + 3
    assert len(quick_runs) >= 2, "quick kept its 1 s schedule while hang was stuck"
    created = [e for e in rig.events() if e.type == "sensor_task_created" and e.sensor_id == "quick"]
    # A run the stop cancelled may have recorded its event (and task) before its run_finished: count tasks by event.
    assert len(task_subjects(rig)) == len(created) >= len(quick_runs)
