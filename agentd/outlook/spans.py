"""A task's events as trace spans (docs/telemetry.md): the task the root span, each attempt a child span, each
tool call the stream showed a grandchild. Pure: events in, `SpanRecord`s out; the ids are the envelope's
(agentd/outlook/correlation.py), so a span and the events it came from name each other.

A span is made only of what is finished: an attempt's span once its `task_attempt_finished` is in, the task's
once its `task_finished` is. A tool call the attempt never saw finish ends, failed, with its attempt; every
tool span is held inside its attempt's span.
"""

from __future__ import annotations

from dataclasses import field
from datetime import datetime, timedelta
from typing import Any

from agentd import frozen_value
from agentd.outlook.correlation import (
    attempt_span_id,
    call_id_of,
    model_span_id,
    task_span_id,
    tool_span_id,
    trace_id,
)
from agentd.records import RuntimeEvent

TERMINAL_OK = ("completed",)


@frozen_value
class SpanRecord:
    trace_id: str  # 32 hex
    span_id: str  # 16 hex
    parent_span_id: str | None
    name: str
    start: datetime
    end: datetime
    ok: bool
    attributes: dict[str, str | int | float | bool] = field(default_factory=dict)
    status_message: str | None = None


def task_span(agent_id: str, events: list[RuntimeEvent]) -> SpanRecord | None:
    """The task's root span, from its first event to its task_finished; None while it is not finished."""
    finished = [e for e in events if e.type == "task_finished"]
    if not events or not finished or events[0].task_id is None:
        return None
    task_id, end = events[0].task_id, finished[-1]
    enqueued = next((e for e in events if e.type == "task_enqueued"), events[0])
    status = str(end.payload.get("status"))
    return SpanRecord(
        trace_id(agent_id, task_id),
        task_span_id(agent_id, task_id),
        None,
        f"task {task_id} {enqueued.payload.get('task_type') or ''}".strip(),
        enqueued.timestamp,
        end.timestamp,
        status in TERMINAL_OK,
        {"agentd.task_id": task_id, "agentd.status": status, "agentd.agent_id": agent_id},
        None if status in TERMINAL_OK else str(end.payload.get("summary") or status)[:200],
    )


def attempt_spans(agent_id: str, events: list[RuntimeEvent], attempt_id: str) -> list[SpanRecord]:
    """The attempt's span and its tool calls' spans; [] while the attempt is not finished."""
    mine = [e for e in events if e.attempt_id == attempt_id]
    ended = [e for e in mine if e.type == "task_attempt_finished"]
    if not mine or not ended or mine[0].task_id is None:
        return []
    task_id, end = mine[0].task_id, ended[-1]
    start = mine[0].timestamp
    outcome = str(end.payload.get("outcome"))
    attempt = SpanRecord(
        trace_id(agent_id, task_id),
        attempt_span_id(attempt_id),
        task_span_id(agent_id, task_id),
        f"attempt {attempt_id}",
        start,
        max(end.timestamp, start),
        outcome in TERMINAL_OK,
        _attempt_attributes(task_id, attempt_id, end.payload),
        None if outcome in TERMINAL_OK else str(end.payload.get("termination_reason") or outcome),
    )
    return [attempt, *_tool_spans(attempt, mine, attempt_id), *_model_spans(attempt, mine, attempt_id)]


def _attempt_attributes(task_id: int, attempt_id: str, payload: dict[str, Any]) -> dict[str, str | int | float | bool]:
    found: dict[str, str | int | float | bool] = {
        "agentd.task_id": task_id,
        "agentd.attempt_id": attempt_id,
        "agentd.outcome": str(payload.get("outcome")),
        "agentd.termination_reason": str(payload.get("termination_reason")),
    }
    usage = payload.get("usage")
    if isinstance(usage, dict):
        for key in ("cost_usd", "input_tokens", "output_tokens"):
            value = usage.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                found[f"agentd.usage.{key}"] = value
    return found


def _tool_spans(attempt: SpanRecord, events: list[RuntimeEvent], attempt_id: str) -> list[SpanRecord]:
    """tool_started → tool_finished by call id, each held inside the attempt's span."""
    started: dict[str, RuntimeEvent] = {}
    spans = []
    for event in events:
        call = call_id_of(event.type, event.payload)
        if call is None:
            continue
        if event.type == "tool_started":
            started.setdefault(call, event)
        elif call in started:
            spans.append(_tool(attempt, started.pop(call), event, attempt_id, call))
    spans += [_tool(attempt, begun, None, attempt_id, call) for call, begun in started.items()]
    return spans


def _model_spans(attempt: SpanRecord, events: list[RuntimeEvent], attempt_id: str) -> list[SpanRecord]:
    """Each model call through the gateway (docs/gateway.md), from its `model_call_finished`: it ended when the
    event was written and took its latency, held inside the attempt's span."""
    spans = []
    for event in (e for e in events if e.type == "model_call_finished"):
        said = event.payload
        latency = said.get("latency_ms")
        took = timedelta(milliseconds=latency) if isinstance(latency, int | float) and latency >= 0 else timedelta()
        end = min(max(event.timestamp, attempt.start), attempt.end)
        status = said.get("status")
        ok = status == 200 and not said.get("cut")
        attributes: dict[str, str | int | float | bool] = {
            "agentd.attempt_id": attempt_id,
            "agentd.model_call": str(said.get("n")),
        }
        for key in ("api", "model", "status", "input_tokens", "output_tokens", "request_sha256", "response_sha256"):
            value = said.get(key)
            if isinstance(value, str | int | float) and not isinstance(value, bool):
                attributes[f"agentd.model.{key}"] = value
        spans.append(
            SpanRecord(
                attempt.trace_id,
                model_span_id(attempt_id, str(said.get("n"))),
                attempt.span_id,
                f"model {said.get('model') or said.get('api') or 'call'}",
                max(end - took, attempt.start),
                end,
                ok,
                attributes,
                None if ok else str(said.get("error") or f"status {status}")[:200],
            )
        )
    return spans


def _tool(
    attempt: SpanRecord, begun: RuntimeEvent, done: RuntimeEvent | None, attempt_id: str, call: str
) -> SpanRecord:
    start = min(max(begun.timestamp, attempt.start), attempt.end)
    end = attempt.end if done is None else min(max(done.timestamp, start), attempt.end)
    ok = done is not None and done.payload.get("ok") is not False
    tool = str(begun.payload.get("tool") or "?")
    return SpanRecord(
        attempt.trace_id,
        tool_span_id(attempt_id, call),
        attempt.span_id,
        f"tool {tool}",
        start,
        end,
        ok,
        {"agentd.tool": tool, "agentd.tool_call_id": call, "agentd.attempt_id": attempt_id},
        None if ok else ("not seen to finish" if done is None else "the tool call failed"),
    )
