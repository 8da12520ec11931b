"""Seed 000 §14 events written without noise (issue 21, finding 6): a repeated sensor event and a
skipped schedule slot each leave one event per thing repeated, never one per poll or tick.

Real SQLite, the real dispatcher and store verbs, a fake clock driving a day of polls and ticks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from rig import Rig

from agentd.records import AcceptedEvent
from agentd.services.sensor_runs import parse_output
from agentd.store import open_store

DAY_OF_MINUTES = 24 * 60


def sensor_lines(keys: list[str], *, task: bool = True) -> str:
    """What a sensor prints: one SensorEvent per key (the same event id each time it prints it)."""
    import json

    lines = []
    for key in keys:
        event: dict[str, Any] = {
            "event_id": f"e-{key}",
            "observed_at": "2026-11-22T09:00:00Z",
            "source_ref": "test",
            "dedupe_key": key,
            "payload": {"key": key},
        }
        if task:
            event["proposed_task"] = {"task_type": "example", "source": "x", "subject": f"task {key}", "payload": {}}
        lines.append(json.dumps(event))
    return "\n".join(lines)


def accepted(rig: Rig, text: str, sensor_id: str = "feed") -> list[AcceptedEvent]:
    events, rejected = parse_output(sensor_id, text, rig.config, rig.clock.now())
    assert rejected == []
    return events


def types_of(rig: Rig, sensor_id: str = "feed") -> Counter[str]:
    return Counter(e.type for e in rig.events() if e.sensor_id == sensor_id)


def test_a_sensor_repeating_100_items_every_minute_for_a_day_writes_100_deduped_events(rig: Rig) -> None:
    """Each (sensor, dedupe key) gets its sensor_event_deduped once, the first time a repeat is seen:
    a day of polls writes 100 such events in all, not 144,000."""
    keys = [f"item-{n}" for n in range(100)]
    batch = accepted(rig, sensor_lines(keys))
    rig.store.record_sensor_events("feed", batch, [], rig.clock.now())
    assert types_of(rig)["sensor_event_deduped"] == 0, "a first sighting is recorded, not deduped"
    deduped_counts = []
    for _ in range(DAY_OF_MINUTES - 1):
        rig.clock.advance(60)
        counts = rig.store.record_sensor_events("feed", batch, [], rig.clock.now())
        deduped_counts.append(counts.deduped)
    assert deduped_counts == [100] * (DAY_OF_MINUTES - 1), "every repeat is still counted in its run"
    kinds = types_of(rig)
    assert kinds["sensor_event_recorded"] == 100 and kinds["sensor_task_created"] == 100
    assert kinds["sensor_event_deduped"] == 100
    deduped = [e for e in rig.events() if e.type == "sensor_event_deduped"]
    assert sorted(e.payload["dedupe_key"] for e in deduped) == sorted(keys)
    assert {e.payload["event_id"] for e in deduped} == {f"e-{k}" for k in keys}
    first_repeat = deduped[0].timestamp
    assert all(e.timestamp == first_repeat for e in deduped), "all written at the first repeat, none later"


def test_the_deduped_event_is_remembered_across_a_restart(rig: Rig) -> None:
    batch = accepted(rig, sensor_lines(["a", "b"]))
    for _ in range(3):
        rig.store.record_sensor_events("feed", batch, [], rig.clock.now())
        rig.clock.advance(60)
    reopened = open_store(rig.config.db_path, rig.clock)  # a restarted sensor service: a new connection
    try:
        for _ in range(3):
            reopened.record_sensor_events("feed", batch, [], rig.clock.now())
            rig.clock.advance(60)
    finally:
        reopened.close()
    assert types_of(rig)["sensor_event_deduped"] == 2


def test_a_key_repeated_within_its_first_run_is_deduped_once(rig: Rig) -> None:
    batch = accepted(rig, sensor_lines(["a", "a", "a", "b"]))
    counts = rig.store.record_sensor_events("feed", batch, [], rig.clock.now())
    assert counts.recorded == 2 and counts.deduped == 2 and counts.created == 2
    [deduped] = [e for e in rig.events() if e.type == "sensor_event_deduped"]
    assert deduped.payload["dedupe_key"] == "a" and deduped.sensor_id == "feed"
    rig.clock.advance(60)
    rig.store.record_sensor_events("feed", batch, [], rig.clock.now())
    assert [e.payload["dedupe_key"] for e in rig.events() if e.type == "sensor_event_deduped"] == ["a", "b"]


def test_dedupe_keys_are_per_sensor(rig: Rig) -> None:
    """Another sensor using the same key is its own (sensor, dedupe key): recorded, then deduped once."""
    for sensor_id in ("feed", "other"):
        batch = accepted(rig, sensor_lines(["same"], task=False), sensor_id)
        for _ in range(3):
            rig.store.record_sensor_events(sensor_id, batch, [], rig.clock.now())
            rig.clock.advance(60)
    for sensor_id in ("feed", "other"):
        kinds = types_of(rig, sensor_id)
        assert kinds["sensor_event_recorded"] == 1 and kinds["sensor_event_deduped"] == 1


# --- schedules ------------------------------------------------------------------------------


def beat(raw: dict[str, Any]) -> None:
    raw["schedules"] = [
        {"schedule_id": "beat", "interval_seconds": 60, "task": {"task_type": "example", "subject": "beat"}}
    ]


@pytest.mark.asyncio
async def test_a_schedule_whose_task_stays_open_for_a_day_writes_one_skip_event_and_counts_the_rest(
    rig_factory: Callable[..., Rig], rig_cli: Callable[..., Any]
) -> None:
    rig = rig_factory(beat)
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.run_due_schedules(rig.clock.now())
    [first] = rig.store.list_tasks()
    for _ in range(DAY_OF_MINUTES):  # the task waits all day (no one claims it): every slot is skipped
        rig.clock.advance(60)
        await dispatcher.run_due_schedules(rig.clock.now())
    skipped = [e for e in rig.events() if e.type == "schedule_slot_skipped"]
    assert len(skipped) == 1, "one event per (schedule, open task), not one per tick"
    assert skipped[0].schedule_id == "beat" and skipped[0].payload["open_task_id"] == first.task_id
    [record] = rig.store.list_schedules()
    assert (record.skipped_slots, record.skipped_for_task_id) == (DAY_OF_MINUTES, first.task_id)
    listed = rig_cli(rig, "schedule", "list", "--json").json()
    assert listed[0]["skipped_slots"] == DAY_OF_MINUTES and listed[0]["skipped_for_task_id"] == first.task_id
    text = rig_cli(rig, "schedule", "list").out
    assert f"{DAY_OF_MINUTES} while task {first.task_id} was open" in text

    await dispatcher.run_until_idle()  # the task runs; the next slot makes a new task
    rig.clock.advance(60)
    await dispatcher.run_due_schedules(rig.clock.now())
    second = rig.store.list_tasks()[0]
    assert second.task_id != first.task_id
    for _ in range(10):
        rig.clock.advance(60)
        await dispatcher.run_due_schedules(rig.clock.now())
    skipped = [e for e in rig.events() if e.type == "schedule_slot_skipped"]
    assert [e.payload["open_task_id"] for e in skipped] == [first.task_id, second.task_id]
    [record] = rig.store.list_schedules()
    assert (record.skipped_slots, record.skipped_for_task_id) == (10, second.task_id)
    assert record.skipped_slots_total == DAY_OF_MINUTES + 10
    text = rig_cli(rig, "schedule", "list").out
    assert f"10 while task {second.task_id} was open, {DAY_OF_MINUTES} before" in text
    await dispatcher.stop()
