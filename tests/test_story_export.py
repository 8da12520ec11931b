"""Every fact agentd has, in the Agent Runtime's (seed 002) vocabulary (docs/evidence.md, "The Agent Runtime
envelope"): the facts one agentd event carries beyond its own type (a timeout, a rate limit, a cost, a
delegation, a kill, a subagent) become their own seed-002 events, the ids in payloads are lifted into the
envelope, one meaning of a session, and a table in the docs that a new event type cannot skip."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from support import reference_dir

from agentd.clock import parse_ts
from agentd.outlook.agent_runtime import ANNOUNCED_EVENT_TYPES, EVENT_MAP, NOT_EXPORTED, runtime_type
from agentd.outlook.runtime_facts import runtime_events
from agentd.records import EVENT_TYPES, RuntimeEvent

DOCS = Path(__file__).resolve().parent.parent / "docs" / "evidence.md"


def event(
    kind: str, payload: dict[str, Any], *, task_id: int | None = 7, attempt_id: str | None = "A1"
) -> RuntimeEvent:
    return RuntimeEvent(
        event_id="01JGZ5N2X4K7V9B3C8D0E1F2G3",
        type=kind,
        timestamp=parse_ts("2026-01-02T03:04:05.000000Z"),
        sequence=12,
        schema_version=1,
        task_id=task_id,
        attempt_id=attempt_id,
        workflow_id=None,
        schedule_id=None,
        sensor_id=None,
        payload=payload,
        refs={},
        prev_hash="0" * 64,
        hash="1" * 64,
    )


def types_of(shown: list[dict[str, Any]]) -> list[str]:
    return [x["type"] for x in shown]


def test_every_event_type_is_mapped_or_said_not_exported_and_the_announced_ones_too() -> None:
    known = set(EVENT_TYPES) | set(ANNOUNCED_EVENT_TYPES)
    assert set(EVENT_MAP) | set(NOT_EXPORTED) == known
    assert not set(EVENT_MAP) & set(NOT_EXPORTED)
    assert all(reason.startswith("because ") for reason in NOT_EXPORTED.values())
    assert EVENT_MAP["permission_requested"] == "permission.requested"
    assert EVENT_MAP["tool_call_allowed"] == EVENT_MAP["tool_call_denied"] == "permission.resolved"


def documented_rows() -> dict[str, str]:
    """docs/evidence.md's table: `agentd event` → the cell that names its seed-002 type (or why not)."""
    text = DOCS.read_text()
    section = text.split("| agentd event | Agent Runtime type |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in section.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for name in re.findall(r"`([a-z_]+)`", cells[0]):
            rows[name] = cells[1]
    return rows


def test_the_docs_table_names_every_event_type_with_its_type_or_why_not() -> None:
    rows = documented_rows()
    assert set(rows) == set(EVENT_MAP) | set(NOT_EXPORTED), "docs/evidence.md's table and EVENT_MAP differ"
    for name, cell in rows.items():
        if name in NOT_EXPORTED:
            assert cell.startswith("not exported, because"), name
        else:
            assert f"`{EVENT_MAP[name]}`" in cell, (name, cell)


def test_a_timeout_is_task_timed_out_and_its_kill_process_terminated_with_the_signal() -> None:
    finished = event(
        "task_attempt_finished",
        {"outcome": "retryable_failure", "termination_reason": "timeout", "failure_type": "timeout", "signal": 15},
    )
    shown = runtime_events(finished, "demo")
    assert types_of(shown) == ["task.attempt.failed", "task.timed_out", "process.terminated"]
    killed = shown[2]
    assert killed["payload"]["signal"] == "SIGTERM" and killed["payload"]["reason"] == "timeout"
    assert killed["processId"] == "A1" and killed["attemptId"] == "A1"
    assert len({x["eventId"] for x in shown}) == 3, "each derived event has an id of its own"
    assert {x["refs"]["agentd"]["hash"] for x in shown} == {"1" * 64}, "each points at the event it came from"


def test_a_cancel_kill_is_process_terminated_but_not_a_timeout() -> None:
    canceled = event(
        "task_attempt_finished",
        {"outcome": "operator_canceled", "termination_reason": "operator_canceled", "signal": 9},
    )
    assert types_of(runtime_events(canceled, "demo")) == ["task.attempt.failed", "process.terminated"]


def test_a_cost_is_cost_recorded_with_the_tokens() -> None:
    usage = {"cost_usd": 0.25, "input_tokens": 11, "output_tokens": 7, "cost_estimated": 0}
    shown = runtime_events(event("task_attempt_finished", {"outcome": "completed", "usage": usage}), "demo")
    assert types_of(shown) == ["task.attempt.completed", "cost.recorded"]
    assert shown[1]["costState"] == {"costUsd": 0.25, "estimated": False, "inputTokens": 11, "outputTokens": 7}
    none = event("task_attempt_finished", {"outcome": "completed", "usage": {"cost_usd": None}})
    assert types_of(runtime_events(none, "demo")) == ["task.attempt.completed"], "nothing known: nothing said"


def test_a_rate_limited_retry_is_rate_limit_hit() -> None:
    retry = event("task_retry_scheduled", {"rate_limited": True, "available_at": "2026-01-02T03:05:00.000000Z"})
    assert types_of(runtime_events(retry, "demo")) == ["task.retrying", "rate_limit.hit"]
    plain = event("task_retry_scheduled", {"rate_limited": False})
    assert types_of(runtime_events(plain, "demo")) == ["task.retrying"]


def test_a_follow_up_is_task_delegated_with_its_parent() -> None:
    follow = event("task_enqueued", {"parent_task_id": 3, "follow_up_of": 3}, task_id=9, attempt_id=None)
    shown = runtime_events(follow, "demo")
    assert types_of(shown) == ["task.queued", "task.delegated"]
    assert shown[1]["parentTaskId"] == "3" and shown[1]["taskId"] == "9"
    assert shown[1]["taskRelationship"] == {"kind": "delegated", "parentTaskId": "3", "childTaskId": "9"}


def test_tool_and_turn_ids_are_lifted_into_the_envelope() -> None:
    [tool] = runtime_events(event("tool_started", {"call_id": "toolu_1", "tool": "Bash", "summary": "ls"}), "demo")
    assert tool["toolCallId"] == "toolu_1"
    [turn] = runtime_events(event("model_turn_completed", {"turn": 2, "input_tokens": 5}), "demo")
    assert turn["turnId"] == "A1/turn/2"


def test_claude_task_tool_calls_are_subagents_with_their_parents() -> None:
    spawned = runtime_events(event("tool_started", {"call_id": "toolu_9", "tool": "Task", "summary": "x"}), "demo")
    assert types_of(spawned) == ["tool.started", "subagent.spawned"]
    child = spawned[1]
    assert child["subagentId"] == "toolu_9" and child["toolCallId"] == "toolu_9"
    assert (child["taskId"], child["attemptId"], child["sessionId"]) == ("7", "A1", "demo")
    done = runtime_events(event("tool_finished", {"call_id": "toolu_9", "tool": "Task", "ok": True}), "demo")
    failed = runtime_events(event("tool_finished", {"call_id": "toolu_9", "tool": "Task", "ok": False}), "demo")
    assert types_of(done) == ["tool.result", "subagent.completed"]
    assert types_of(failed) == ["tool.failed", "subagent.failed"]


def test_the_announced_governance_events_have_their_permission_types() -> None:
    assert runtime_type(event("task_enqueued", {})) == "task.queued"
    for name, expected in {
        "permission_requested": "permission.requested",
        "tool_call_allowed": "permission.resolved",
        "tool_call_denied": "permission.resolved",
    }.items():
        assert EVENT_MAP[name] == expected


@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        ("task_attempt_finished", {"outcome": "failed", "termination_reason": "timeout", "failure_type": "timeout",
                                   "signal": 9, "usage": {"cost_usd": 1.5, "input_tokens": 3}}),
        ("task_retry_scheduled", {"rate_limited": True}),
        ("task_enqueued", {"parent_task_id": 3}),
        ("tool_started", {"call_id": "c", "tool": "Task"}),
        ("tool_finished", {"call_id": "c", "tool": "Task", "ok": False}),
        ("model_turn_completed", {"turn": 1}),
    ],
)  # fmt: skip
def test_every_derived_envelope_validates_against_the_public_event_schema(kind: str, payload: dict[str, Any]) -> None:
    import json

    from jsonschema import Draft202012Validator

    document = json.loads((reference_dir("agent-runtime") / "agentruntime-event.schema.json").read_text())
    validator = Draft202012Validator(document)
    for shown in runtime_events(event(kind, payload), "demo"):
        assert list(validator.iter_errors(shown)) == [], shown["type"]


def test_a_real_attempt_records_its_cost_and_failure_type_in_its_finished_event(rig: Rig) -> None:
    import anyio

    done = {"status": "completed", "machine_status": "ok", "operator_summary": "done"}
    usage = {"cost_usd": 0.5, "input_tokens": 10, "output_tokens": 4}
    task = rig.add("scripted", payload={"outcome": done, "usage": usage})

    async def run() -> None:
        await rig.dispatcher().run_until_idle()

    anyio.run(run)
    [finished] = [e for e in rig.events(task.task_id) if e.type == "task_attempt_finished"]
    assert finished.payload["usage"]["cost_usd"] == 0.5 and finished.payload["failure_type"] is None
    assert "cost.recorded" in types_of(runtime_events(finished, rig.config.agent.agent_id))


# --- one meaning of a session (seed 003 AgentSession) ------------------------------------------------------


def exported(rig: Rig) -> dict[str, Any]:
    from agentd.outlook.agent_runtime import session_snapshot
    from agentd.outlook.status import snapshot

    return session_snapshot(rig.config, rig.store, snapshot(rig.config, rig.store, rig.clock.now()), rig.clock.now())


def test_a_todo_list_names_its_attempt_and_exports_in_the_agents_one_session(rig: Rig) -> None:
    task = rig.add("example")
    todo = {"todoId": "t1", "runId": "A9", "text": "plan", "status": "open", "createdAt": "x", "updatedAt": "x"}
    rig.store.record_activity(task.task_id, "A9", [("todos_updated", {"todos": [todo]})], rig.clock.now())
    agent = rig.config.agent.agent_id
    shown = [x for e in rig.events(task.task_id) for x in runtime_events(e, agent)]
    [listed] = [x for x in shown if x["nativeStatus"] == "todos_updated"]
    assert listed["payload"]["todos"][0]["sessionId"] == agent and listed["payload"]["todos"][0]["runId"] == "A9"
    assert {x["sessionId"] for x in shown} == {agent} == {exported(rig)["sessionId"]}


def test_the_claude_stream_records_each_todo_with_its_attempt_not_a_session() -> None:
    import json

    from agentd.adapters.activity import EventText, stream_parser

    parser = stream_parser("claude-code", "A7", EventText())
    assert parser is not None
    todos = {"todos": [{"content": "x", "status": "pending"}]}
    block = {"type": "tool_use", "id": "c1", "name": "TodoWrite", "input": todos}
    line = {"type": "assistant", "message": {"id": "m", "content": [block]}}
    [listed] = [a for a in parser.feed(json.loads(json.dumps(line)), "t") if a.type == "todos_updated"]
    assert listed.payload["todos"][0]["runId"] == "A7" and "sessionId" not in listed.payload["todos"][0]


def test_the_agent_session_says_what_the_agent_is_doing(rig: Rig) -> None:
    from test_status_truth import add_held

    from agentd import control

    shown = exported(rig)["agentSession"]
    assert shown["sessionId"] == rig.config.agent.agent_id and shown["status"] == "active"
    assert set(shown) >= {"sessionId", "productId", "userId", "status", "startedAt", "updatedAt", "resumable",
                          "currentTaskId", "memoryRefs", "artifactRefs", "approvalRefs"}  # fmt: skip
    held = add_held(rig, subject="held")
    waiting = exported(rig)["agentSession"]
    assert waiting["status"] == "waiting-approval" and waiting["approvalRefs"] == [f"approval:task/{held.task_id}"]
    control.pause_dispatch(rig.config, rig.store, "lunch", rig.clock.now(), by="tester")
    assert exported(rig)["agentSession"]["status"] == "paused"


def test_each_task_says_where_it_came_from(rig: Rig) -> None:
    rig.add("example", source="schedule:hourly")
    rig.add("example", source="web:alice")
    contexts = {t["taskId"]: t["dispatchContext"] for t in exported(rig)["tasks"]}
    assert contexts["1"]["dispatchMode"] == "scheduled" and contexts["1"]["originProductId"] == "agentd:schedule:hourly"
    assert (contexts["2"]["originSurface"], contexts["2"]["dispatchMode"]) == ("web", "interactive")
