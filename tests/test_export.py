"""The Agent Runtime (seed 002) export: every agentd event and status is mapped (always), and what is exported
validates against that project's own published schemas when the third-party reference is at hand (they are not
part of this repo: support.reference_dir finds them, or the schema checks skip by name)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from rig import Rig
from support import reference_dir, write_sensor
from test_status_truth import add_held

from agentd import control
from agentd.clock import parse_ts
from agentd.outlook.agent_runtime import (
    ANNOUNCED_EVENT_TYPES,
    EVENT_MAP,
    GENERIC,
    runtime_event,
    runtime_snapshot,
    session_snapshot,
)
from agentd.outlook.readmodel import task_statuses
from agentd.outlook.status import snapshot
from agentd.outlook.taskstate import state_facts
from agentd.records import EVENT_TYPES, RuntimeEvent, ScheduleSpec

EVENT_SCHEMA = "agentruntime-event.schema.json"
SNAPSHOT_SCHEMA = "agentruntime-snapshot.schema.json"


def schema(name: str) -> Draft202012Validator:
    """One of the Agent Runtime's published schemas (skips by name where the reference is not at hand)."""
    document = json.loads((reference_dir("agent-runtime") / name).read_text())
    return Draft202012Validator(document, format_checker=Draft202012Validator.FORMAT_CHECKER)


def test_every_agentd_event_type_has_a_mapping() -> None:
    assert set(EVENT_MAP) == set(EVENT_TYPES) | set(ANNOUNCED_EVENT_TYPES)  # issue 45's, mapped before they land
    assert all(isinstance(v, str) and v for v in EVENT_MAP.values())


def test_every_mapped_type_is_one_the_public_event_schema_names() -> None:
    enum = set(schema(EVENT_SCHEMA).schema["properties"]["type"]["enum"])
    assert set(EVENT_MAP.values()) <= enum


async def lifecycle(sensing: Any, sensors_dir: Path) -> tuple[Rig, list[RuntimeEvent]]:
    """Sensor events (one duplicate, one junk line), a task done, one retried until it fails, one canceled,
    a goal-loop workflow and an hourly schedule, dispatched over four hours: the rig, and its events."""
    write_sensor(sensors_dir, "feed", 'print(event("a"))\nprint(event("a"))\nprint("junk")')
    rig: Rig = sensing()  # after the sensor is written: the service finds its sensors when it starts
    rig.add("example", subject="done")
    rig.add("flaky", subject="retried until it fails")
    waiting = rig.add("example", subject="canceled", schedule={"delay_minutes": 60})
    add_held(rig, subject="held for approval")
    control.cancel_task(rig.config, rig.store, waiting.task_id, rig.clock.now())
    control.start_workflow(
        rig.config, rig.store, "goal-loop", "m1", {"answers": {"verify": ["complete"]}}, None, rig.clock.now()
    )
    spec = ScheduleSpec.model_validate(
        {"schedule_id": "hourly", "interval_seconds": 3600, "task": {"task_type": "example"}}
    )
    control.add_schedule(rig.config, rig.store, spec, rig.clock.now())
    await rig.service.run_due(rig.clock.now())
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    for _ in range(4):
        await dispatcher.run_due_schedules(rig.clock.now())
        await dispatcher.run_until_idle()
        rig.clock.advance(3600)
    return rig, rig.events()


def exported_snapshot(rig: Rig) -> dict[str, Any]:
    status = snapshot(rig.config, rig.store, rig.clock.now())
    return session_snapshot(rig.config, rig.store, status, rig.clock.now())


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_whole_lifecycle_exports_every_event_and_status(sensing: Any, sensors_dir: Path) -> None:
    rig, events = await lifecycle(sensing, sensors_dir)
    kinds = {e.type for e in events}
    assert {
        "task_enqueued", "task_claimed", "task_started", "task_attempt_finished", "task_retry_scheduled",
        "task_finished", "artifact_recorded", "outbox_applied", "schedule_upserted", "schedule_task_created",
        "sensor_event_recorded", "sensor_event_rejected", "sensor_task_created", "sensor_run_finished",
        "workflow_started", "workflow_task_created", "workflow_transitioned", "workflow_completed",
    } <= kinds  # fmt: skip
    exported = [runtime_event(e, rig.config.agent.agent_id) for e in events]
    assert all(parse_ts(x["timestamp"]) for x in exported)
    assert [x["sequence"] for x in exported] == [e.sequence for e in events]
    failed = [
        x for x in exported if x["nativeStatus"] == "task_attempt_finished" and x["payload"]["outcome"] != "completed"
    ]
    assert failed and {x["type"] for x in failed} == {"task.attempt.failed"}
    generic = sorted({x["nativeStatus"] for x in exported if x["type"] == GENERIC})
    assert set(generic) <= {k for k, v in EVENT_MAP.items() if v == GENERIC}

    tasks = rig.store.list_tasks(limit=1000)
    assert task_statuses(events) == {t.task_id: t.status for t in tasks}, "the queue rebuilds from its events alone"

    shown = exported_snapshot(rig)
    held = next(t for t in rig.store.list_tasks(limit=1000) if t.subject == "held for approval")
    assert [t["status"] for t in shown["tasks"] if t["taskId"] == str(held.task_id)] == ["waiting_permission"]
    statuses = {t["nativeStatus"]: t["status"] for t in shown["tasks"]}
    assert statuses["completed"] == "completed" and statuses["operator_canceled"] == "cancelled"
    assert statuses["permanent_failure"] == "failed"
    # jsonschema checks `format: date-time` only with an extra package; agentd's times are parsed here instead
    assert all(parse_ts(t["createdAt"]) and parse_ts(t["updatedAt"]) for t in shown["tasks"])


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_whole_lifecycle_validates_against_the_public_core_schemas(sensing: Any, sensors_dir: Path) -> None:
    events_schema, snapshot_schema = schema(EVENT_SCHEMA), schema(SNAPSHOT_SCHEMA)  # or skip before the run
    rig, events = await lifecycle(sensing, sensors_dir)
    exported = [runtime_event(e, rig.config.agent.agent_id) for e in events]
    problems = [(x["nativeStatus"], e.message) for x in exported for e in events_schema.iter_errors(x)]
    assert problems == []
    assert list(snapshot_schema.iter_errors(exported_snapshot(rig))) == []


def test_a_running_task_whose_dispatcher_is_gone_is_lost_not_running(rig: Rig) -> None:
    task = rig.add("example")
    rig.store._conn.execute("UPDATE tasks SET status = 'running' WHERE id = ?", (task.task_id,))
    now = rig.clock.now()
    status = snapshot(rig.config, rig.store, now)
    facts = state_facts(rig.store, rig.config, now, [task.task_id])
    [shown] = runtime_snapshot(status, rig.store.list_tasks(), {}, facts)["tasks"]
    assert shown["status"] == "lost" and shown["nativeStatus"] == "running"


def test_the_cli_prints_both(cli: Any) -> None:
    assert cli("init").code == 0
    assert cli("task", "add", "--type", "example").code == 0
    lines = cli("events", "--format", "agent-runtime").json_lines()
    assert lines[-1]["type"] == "task.queued" and lines[-1]["taskId"] == "1"
    shown = cli("status", "--format", "agent-runtime").json()
    assert [(t["taskId"], t["status"]) for t in shown["tasks"]] == [("1", "queued")]


def test_what_the_cli_prints_validates_against_the_public_schemas(cli: Any) -> None:
    events_schema, snapshot_schema = schema(EVENT_SCHEMA), schema(SNAPSHOT_SCHEMA)
    assert cli("init").code == 0
    assert cli("task", "add", "--type", "example").code == 0
    lines = cli("events", "--format", "agent-runtime").json_lines()
    assert lines and all(not list(events_schema.iter_errors(line)) for line in lines)
    assert list(snapshot_schema.iter_errors(cli("status", "--format", "agent-runtime").json())) == []
