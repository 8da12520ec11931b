"""The ids that tie an agentd event to its session, thread, turn, tool call and trace, the same wherever they are
shown: the Agent Runtime envelope (agentd/outlook/agent_runtime.py), the OTLP spans (agentd/outlook/telemetry.py).

One meaning of each (docs/evidence.md, "Sessions, turns and traces"): the session is the agent (its durable
work container: every task it takes belongs to it), a thread one of its services (the dispatcher runs the
tasks' attempts one at a time), a run an attempt, a turn one model turn inside an attempt
(`<attempt>/turn/<n>`), a tool call the harness's own call id. A trace is a task: its root span the task, a
child span per attempt, a grandchild per tool call. Every id is computed from what the event itself says,
so an exporter needs no lookup and two exporters agree.
"""

from __future__ import annotations

import hashlib
from typing import Any

DISPATCH_THREAD = "dispatch"  # the thread (the service) an attempt runs in
TOOL_EVENTS = ("tool_started", "tool_finished")


def _hex(text: str, chars: int) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()[:chars]
    return digest if digest.strip("0") else "1".rjust(chars, "0")  # an all-zero id is invalid in OTLP


def trace_id(agent_id: str, task_id: int) -> str:
    """The task's trace: 32 hex digits (W3C trace context), the same on every export of the task."""
    return _hex(f"agentd/{agent_id}/task/{task_id}", 32)


def task_span_id(agent_id: str, task_id: int) -> str:
    return _hex(f"agentd/{agent_id}/task/{task_id}/span", 16)


def attempt_span_id(attempt_id: str) -> str:
    return _hex(f"agentd/attempt/{attempt_id}", 16)


def tool_span_id(attempt_id: str, call_id: str) -> str:
    return _hex(f"agentd/attempt/{attempt_id}/tool/{call_id}", 16)


def model_span_id(attempt_id: str, call: str) -> str:
    """A model call's span (its number among the attempt's calls through the gateway)."""
    return _hex(f"agentd/attempt/{attempt_id}/model/{call}", 16)


def turn_id(attempt_id: str, turn: int) -> str:
    return f"{attempt_id}/turn/{turn}"


def call_id_of(event_type: str, payload: dict[str, Any]) -> str | None:
    """The harness's tool call id a tool event carries, if any."""
    call = payload.get("call_id") if event_type in TOOL_EVENTS else None
    return call if isinstance(call, str) and call else None


def correlation(
    event_type: str, payload: dict[str, Any], agent_id: str, task_id: int | None, attempt_id: str | None
) -> dict[str, str]:
    """The envelope's ids for one event: its session always; its thread, turn and tool call when it has
    them; its trace and span when it belongs to a task."""
    ids = {"sessionId": agent_id}
    call = call_id_of(event_type, payload)
    turn = payload.get("turn") if event_type == "model_turn_completed" else None
    if attempt_id is not None:
        ids["threadId"] = DISPATCH_THREAD
        if isinstance(turn, int) and not isinstance(turn, bool):
            ids["turnId"] = turn_id(attempt_id, turn)
    if call is not None:
        ids["toolCallId"] = call
    if task_id is not None:
        ids["traceId"] = trace_id(agent_id, task_id)
        if attempt_id is None:
            ids["spanId"] = task_span_id(agent_id, task_id)
        else:
            ids["spanId"] = tool_span_id(attempt_id, call) if call else attempt_span_id(attempt_id)
    return ids
