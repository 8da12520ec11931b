"""Retention (issue "Honest operations", finding 5): what piles up goes once it is old enough — evidence,
sensor logs, a checkpointed prefix of the event chain, finished tasks — and nothing of live work ever does.
Real SQLite, real files, the in-process adapters, a fake clock that starts well in the past (so the CLI,
which reads the real time, sees every record as old)."""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from rig import Rig
from support import CliResult, write_config

import agentd.evidence.retention
import agentd.services.sensing
from agentd.clock import FakeClock
from agentd.errors import ConfigError
from agentd.evidence.retention import Cutoffs, RetentionReport, apply_retention
from agentd.process.procs import this_process
from agentd.records import AcceptedEvent, SensorEvent, TaskIntent
from agentd.services.sensing import RETENTION_CATCH_UP_S, RETENTION_FIRST_S, SensorService
from agentd.work.intake import admit_task
from agentd.work.validation import load_config

DAY = 86_400


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock("2025-01-01T10:00:00.000000Z")


async def finish(rig: Rig, *task_types: str) -> list[int]:
    """Tasks of these types added and run until the dispatcher is idle; their ids."""
    ids = [rig.add(task_type).task_id for task_type in task_types]
    await rig.drain()
    return ids


def prune(rig: Rig, *, dry_run: bool = False, before: datetime | None = None) -> RetentionReport:
    now = rig.clock.now()
    cutoffs = Cutoffs.before(before) if before else Cutoffs.configured(rig.config.retention, now)
    return apply_retention(rig.store, rig.config, cutoffs, now, dry_run=dry_run)


def evidence_dirs(rig: Rig, task_id: int) -> list[Path]:
    return [Path(a.evidence_dir) for a in rig.store.attempts_of(task_id) if a.evidence_dir]


def sql(rig: Rig, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(rig.store.path) as raw:
        return [tuple(row) for row in raw.execute(statement, params).fetchall()]


def breaks(rig: Rig) -> list[str]:
    return [f"{b.sequence}: {b.reason}" for b in rig.store.verify_event_chain()]


# --- [retention] ------------------------------------------------------------------------------------


def test_retention_has_documented_defaults_and_refuses_bad_values(tmp_path: Path, rig: Rig) -> None:
    retention = rig.config.retention
    assert (retention.evidence_days, retention.sensor_logs_days, retention.events_days) == (90, 7, 365)
    assert (retention.tasks_days, retention.interval_s) == (365, 3600)
    bad = {"evidence_days": -1, "interval_s": 0, "evnts_days": 3}
    path = write_config(tmp_path / "bad", lambda raw: raw.update(retention=bad))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    problems = sorted(str(p).removeprefix(f"{path}: ") for p in caught.value.problems)
    assert problems[0].startswith("retention.evidence_days: input should be greater than or equal to 0")
    assert problems[1].startswith("retention.evnts_days: unknown key")
    assert problems[2].startswith("retention.interval_s: input should be greater than or equal to 60")
    keep = load_config(write_config(tmp_path / "keep", lambda raw: raw.update(retention={"events_days": 0})))
    assert Cutoffs.configured(keep.retention, rig.clock.now()).events is None  # 0: kept forever


# --- evidence -----------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_evidence_of_finished_tasks_goes_after_evidence_days_and_a_live_task_keeps_its_own(rig: Rig) -> None:
    done, live = await finish(rig, "example", "flaky")  # flaky: a retryable failure, attempts left
    assert rig.store.get_task_or_raise(live).status == "retryable_failure"
    [done_dir], [live_dir] = evidence_dirs(rig, done), evidence_dirs(rig, live)
    assert done_dir.is_dir() and live_dir.is_dir()
    rig.clock.advance(89 * DAY)
    assert prune(rig).evidence_dirs == 0 and done_dir.is_dir()
    rig.clock.advance(2 * DAY)
    report = prune(rig)
    assert report.evidence_dirs == 1 and report.evidence_failed == []
    assert not done_dir.exists() and not done_dir.parent.exists() and live_dir.is_dir()
    assert sql(rig, "SELECT task_id, evidence_pruned_at IS NOT NULL FROM task_attempts ORDER BY task_id") == [
        (done, 1),
        (live, 0),
    ]
    [event] = rig.store.read_events(types=("evidence_pruned",))
    assert event.payload == {"attempts": 1, "tasks": 1, "task_ids": [done]}
    assert prune(rig).evidence_dirs == 0  # once


# --- events -------------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_events_go_as_a_checkpointed_prefix_the_chain_still_verifies_and_live_tasks_keep_theirs(
    rig: Rig,
) -> None:
    [old] = await finish(rig, "example")
    live = rig.add("example", available_at="2030-01-01T00:00:00Z").task_id  # pending, not due for years
    [later] = await finish(rig, "example")
    [first_live] = [e.sequence for e in rig.events(live)]
    rig.clock.advance(366 * DAY)
    report = prune(rig)
    assert report.events == first_live - 1 and report.events_through == first_live - 1
    assert rig.events(old) == [] and rig.events(live) and rig.events(later)  # after the live task: kept
    [(through, through_hash, removed)] = sql(
        rig, "SELECT through_sequence, through_hash, removed FROM event_checkpoints"
    )
    [pruned] = rig.store.read_events(types=("events_pruned",))
    assert pruned.payload == {"through_sequence": through, "through_hash": through_hash, "removed": removed}
    assert (through, removed) == (first_live - 1, first_live - 1)
    assert breaks(rig) == []
    rig.add("example")  # the chain goes on from its tail
    assert breaks(rig) == []


@pytest.mark.asyncio
@pytest.mark.parametrize("dispatcher", ["running", "stopped", "another", "a waiver that is not JSON"])
async def test_the_running_dispatchers_boundary_waiver_outlives_events_days(rig: Rig, dispatcher: str) -> None:
    """`agentd status` shows ADVISORY from the newest dispatch_boundary_waived event while the dispatcher that
    recorded it runs: pruning stops before it then (a dispatcher up past events_days stays ADVISORY), and
    takes it once that dispatcher has stopped or another one runs."""
    [old] = await finish(rig, "example")
    pid = os.getpid()
    rig.store.record_event("dispatch_boundary_waived", rig.clock.now(), {"by": "--no-boundary", "pid": pid})
    [waiver] = [e.sequence for e in rig.store.read_events(types=("dispatch_boundary_waived",))]
    rig.store.report_service_status("dispatch", this_process(), "idle", None, rig.clock.now(), rig.clock.now())
    if dispatcher == "stopped":
        rig.store.report_service_status("dispatch", this_process(), "stopped", None, rig.clock.now(), rig.clock.now())
    if dispatcher == "another":
        sql(rig, "UPDATE service_status SET pid = ? WHERE service = 'dispatch'", pid + 1)
    if dispatcher == "a waiver that is not JSON":  # an edit: pruning goes on, and the chain names it
        sql(rig, "UPDATE events SET payload = '{not json' WHERE sequence = ?", waiver)
    rig.clock.advance(366 * DAY)
    report = prune(rig)
    if dispatcher == "a waiver that is not JSON":
        assert report.events_through >= waiver and rig.events(old) == []
        return
    kept = rig.store.boundary_waiver()
    if dispatcher == "running":
        assert report.events_through == waiver - 1 and kept is not None and kept[1]["pid"] == pid
    else:
        assert report.events_through >= waiver and kept is None
    assert rig.events(old) == [] and breaks(rig) == []


@pytest.mark.asyncio
async def test_a_prefix_removed_by_hand_or_a_tampered_checkpoint_is_still_a_break(rig: Rig) -> None:
    await finish(rig, "example", "example")
    rig.store.prune_events(6, rig.clock.now())
    assert breaks(rig) == []
    sql(rig, "UPDATE event_checkpoints SET through_hash = 'f00d'")
    assert breaks(rig) == [
        "7: prev_hash does not match the checkpoint of the pruned events",
        "6: the checkpoint through sequence 6 is not confirmed by an events_pruned event: "
        "events were removed outside `agentd prune`",
    ]
    sql(rig, "UPDATE event_checkpoints SET through_hash = (SELECT prev_hash FROM events WHERE sequence = 7)")
    assert breaks(rig) == []

    sql(rig, "DELETE FROM events WHERE sequence <= 8")  # more removed by hand, behind the checkpoint's back
    assert breaks(rig) == [
        "9: expected sequence 7: events are missing",
        "9: prev_hash does not match the checkpoint of the pruned events",
    ]
    [(prev,)] = sql(rig, "SELECT prev_hash FROM events WHERE sequence = 9")
    sql(
        rig,
        "INSERT INTO event_checkpoints (through_sequence, through_hash, removed, pruned_at) VALUES (8, ?, 2, '')",
        prev,
    )
    assert breaks(rig) == [  # a forged checkpoint: nothing in the chain confirms it
        "8: the checkpoint through sequence 8 is not confirmed by an events_pruned event: "
        "events were removed outside `agentd prune`"
    ]


@pytest.mark.asyncio
async def test_events_removed_by_hand_stay_a_break_after_a_later_pruning(rig: Rig) -> None:
    await finish(rig, "example")
    sql(rig, "DELETE FROM events WHERE sequence <= 3")
    assert breaks(rig)[0] == "4: expected sequence 1: events are missing"
    rig.store.prune_events(6, rig.clock.now())
    assert breaks(rig) == [
        "6: prunings removed 3 of the 6 events through sequence 6: the others were removed outside `agentd prune`"
    ]


# --- tasks --------------------------------------------------------------------------------------------


def sensor_task(rig: Rig, key: str) -> int:
    now = rig.clock.now()
    intent = TaskIntent(task_type="example", source="x", payload={})
    event = SensorEvent(
        sensor_id="watch",
        event_id=key,
        observed_at=now,
        source_ref="t",
        dedupe_key=key,
        payload={},
        proposed_task=intent,
    )
    accepted = AcceptedEvent(1, event, admit_task(intent, rig.config, now, trusted=False))
    counts = rig.store.record_sensor_events("watch", [accepted], [], now)
    return counts.task_ids[0] if counts.task_ids else 0


@pytest.mark.asyncio
async def test_a_finished_task_whose_evidence_is_kept_forever_keeps_its_row(
    rig_factory: Callable[..., Rig],
) -> None:
    keep_evidence = rig_factory(lambda raw: raw.update(retention={"evidence_days": 0}))
    [task] = await finish(keep_evidence, "example")
    keep_evidence.clock.advance(400 * DAY)
    report = prune(keep_evidence)
    assert report.events > 0 and report.tasks == 0  # its evidence is kept forever: so is its row
    assert keep_evidence.store.get_task(task) is not None


@pytest.mark.asyncio
async def test_finished_tasks_go_after_tasks_days_and_a_sensor_never_recreates_them(rig: Rig) -> None:
    from_sensor = sensor_task(rig, "k1")
    [done] = await finish(rig, "example")
    [live] = await finish(rig, "flaky")  # its events, and every later one, stay
    rig.clock.advance(366 * DAY)
    dry = prune(rig, dry_run=True)
    assert (dry.evidence_dirs, dry.tasks) == (2, 2) and rig.store.get_task(done) is not None
    report = prune(rig)
    assert report.tasks == 2  # the sensor's and the operator's; not the live one
    assert rig.store.get_task(from_sensor) is None and rig.store.get_task(done) is None
    assert rig.store.get_task(live) is not None and rig.store.attempts_of(live)
    assert sql(rig, "SELECT count(*) FROM task_attempts WHERE task_id IN (?, ?)", done, from_sensor) == [(0,)]
    assert sql(rig, "SELECT dedupe_key, task_id FROM sensor_events") == [("k1", None)]
    assert sensor_task(rig, "k1") == 0  # its dedupe key stays spent
    [event] = rig.store.read_events(types=("tasks_pruned",))
    assert sorted(event.payload["task_ids"]) == sorted([from_sensor, done])
    assert breaks(rig) == []


# --- sensor logs --------------------------------------------------------------------------------------


def test_old_sensor_logs_go_and_the_sensors_own_state_stays(rig: Rig) -> None:
    sensors = rig.config.paths.state_dir / "sensors"
    for sensor, age_days in (("gone", 8), ("running", 1)):
        (sensors / sensor / "state").mkdir(parents=True)
        (sensors / sensor / "state" / "cursor").write_text("42")
        for name in ("stdout.log", "stderr.log"):
            (sensors / sensor / name).write_text("output")
            moment = (rig.clock.now() - timedelta(days=age_days)).timestamp()
            os.utime(sensors / sensor / name, (moment, moment))
    os.utime(sensors / "gone" / "state" / "cursor", (0, 0))  # the sensor's own files: never retention's
    assert prune(rig).sensor_logs == 2
    assert sorted(p.relative_to(sensors).as_posix() for p in sensors.rglob("*") if p.is_file()) == [
        "gone/state/cursor",
        "running/state/cursor",
        "running/stderr.log",
        "running/stdout.log",
    ]
    [event] = rig.store.read_events(types=("sensor_logs_pruned",))
    assert event.payload == {"files": 2, "sensors": ["gone"]}


# --- agentd prune -------------------------------------------------------------------------------------


def snapshot(state_dir: Path) -> dict[str, bytes]:
    """Every file of the state dir, byte for byte (SQLite's shared-memory index aside: readers use it)."""
    return {str(p): p.read_bytes() for p in sorted(state_dir.rglob("*")) if p.is_file() and p.suffix != ".db-shm"}


@pytest.mark.asyncio
async def test_agentd_prune_dry_run_changes_nothing_then_prune_removes_what_it_said(
    rig: Rig, cli: Callable[..., CliResult]
) -> None:
    [done] = await finish(rig, "example")
    [done_dir] = evidence_dirs(rig, done)
    before = snapshot(rig.config.paths.state_dir)
    dry = cli("prune", "--dry-run", "--json", config=rig.config.path)
    assert dry.code == 0, dry.err
    said = dry.json()
    assert said["dry_run"] is True and said["evidence"]["attempts"] == 1 and said["tasks"]["removed"] == 1
    assert said["events"]["removed"] > 0
    assert snapshot(rig.config.paths.state_dir) == before

    done_run = cli("prune", config=rig.config.path)
    assert done_run.code == 0, done_run.err
    lines = done_run.out.splitlines()
    assert lines[0].split() == ["KIND", "REMOVED", "OLDER", "THAN"]
    assert lines[1].startswith("evidence") and "1 attempt directories" in lines[1]
    assert f"{said['events']['removed']} events" in lines[3] and "1 finished tasks" in lines[4]
    assert not done_dir.exists() and rig.store.get_task(done) is None and breaks(rig) == []


@pytest.mark.asyncio
async def test_agentd_prune_before_sets_one_cutoff_and_a_bad_one_is_one_line_exit_2(
    rig: Rig, cli: Callable[..., CliResult]
) -> None:
    [done] = await finish(rig, "example")
    kept = cli("prune", "--before", "2024-12-31", "--json", config=rig.config.path)  # before anything happened
    assert kept.code == 0 and kept.json()["evidence"]["attempts"] == 0 and evidence_dirs(rig, done)[0].is_dir()
    assert kept.json()["evidence"]["older_than"] == "2024-12-31T00:00:00.000000Z"
    for bad in ("yesterday", "2026-13-01", "2999-01-01"):
        refused = cli("prune", "--before", bad, config=rig.config.path)
        assert refused.code == 2 and refused.out == "", bad
        assert len(refused.err.strip().splitlines()) == 1 and "--before" in refused.err, refused.err


# --- the sensor service applies it --------------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_sensor_service_applies_retention_shortly_after_start_then_every_interval(rig: Rig) -> None:
    [done] = await finish(rig, "example")
    rig.clock.advance(100 * DAY)
    service = SensorService(rig.config, rig.db, clock=rig.clock)
    assert await service.apply_retention_if_due(rig.clock.now()) is None  # just started
    rig.clock.advance(RETENTION_FIRST_S - 1)
    assert await service.apply_retention_if_due(rig.clock.now()) is None
    rig.clock.advance(1)
    first = await service.apply_retention_if_due(rig.clock.now())
    assert first is not None and first.evidence_dirs == 1 and not evidence_dirs(rig, done)[0].exists()
    rig.clock.advance(rig.config.retention.interval_s - 1)
    assert await service.apply_retention_if_due(rig.clock.now()) is None
    rig.clock.advance(1)
    again = await service.apply_retention_if_due(rig.clock.now())
    assert again is not None and again.removed == 0


@pytest.mark.asyncio
async def test_a_failing_retention_pass_is_logged_and_recorded_and_the_next_one_still_comes(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    await finish(rig, "example")
    rig.clock.advance(400 * DAY)
    checkpoints = sql(rig, "SELECT sql FROM sqlite_master WHERE name = 'event_checkpoints'")[0][0]
    sql(rig, "DROP TABLE event_checkpoints")  # the events step now fails inside SQLite
    service = SensorService(rig.config, rig.db, clock=rig.clock)
    service._retention_due = rig.clock.now()
    with caplog.at_level(logging.ERROR, logger="agentd.services.sensing"):
        assert await service.apply_retention_if_due(rig.clock.now()) is None
    assert "retention_failed" in caplog.text
    [failed] = rig.store.read_events(types=("retention_failed",))
    assert "no such table: event_checkpoints" in failed.payload["error"]
    sql(rig, checkpoints)
    rig.clock.advance(rig.config.retention.interval_s)
    report = await service.apply_retention_if_due(rig.clock.now())
    assert report is not None and report.events > 0 and breaks(rig) == []


@pytest.mark.asyncio
async def test_a_bounded_pass_that_left_more_is_followed_soon(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agentd.evidence.retention, "BOUNDED_EVIDENCE", 2)  # a backlog bigger than one pass
    tasks = await finish(rig, "example", "example", "example")
    rig.clock.advance(100 * DAY)
    service = SensorService(rig.config, rig.db, clock=rig.clock)
    service._retention_due = rig.clock.now()
    first = await service.apply_retention_if_due(rig.clock.now())
    assert first is not None and first.evidence_dirs == 2 and first.more
    rig.clock.advance(RETENTION_CATCH_UP_S)
    second = await service.apply_retention_if_due(rig.clock.now())
    assert second is not None and second.evidence_dirs == 1
    assert not any(d.exists() for task in tasks for d in evidence_dirs(rig, task))


@pytest.mark.asyncio
async def test_the_running_service_applies_retention_on_its_own(
    sensing: Callable[[], Rig], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agentd.services.sensing, "RETENTION_FIRST_S", 0.0)  # not a minute after start: at once
    rig = sensing()  # no sensors: the service only applies retention
    [done] = await finish(rig, "example")
    rig.clock.advance(100 * DAY)
    service = SensorService(rig.config, rig.db, clock=rig.clock)
    async with anyio.create_task_group() as group:
        group.start_soon(service.run)
        with anyio.fail_after(10):
            while not rig.store.read_events(types=("evidence_pruned",)):  # noqa: ASYNC110
                await anyio.sleep(0.02)
        service.request_stop()
    assert not evidence_dirs(rig, done)[0].exists()
