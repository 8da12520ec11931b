"""The facts one agentd event carries beyond its own type, each as a seed-002 event of its own
(docs/evidence.md, "The Agent Runtime envelope"): an attempt that timed out is also `task.timed_out`, its
process killed `process.terminated` with the signal, its cost `cost.recorded`; a retry the provider's rate
limit forced is also `rate_limit.hit`; a follow-up task `task.delegated` from its parent; a call of claude's
Task tool (a subagent of the harness's own) `subagent.spawned` and `subagent.completed` or `subagent.failed`.

Pure: one RuntimeEvent in, its envelopes out, the first always agentd's own (agentd/outlook/agent_runtime.py).
A derived envelope's `eventId` is its event's with a suffix, and it carries the same `refs.agentd` (the
event's place in the chain), so every exported fact is still checkable against the event it came from.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from agentd.outlook.agent_runtime import runtime_event
from agentd.outlook.correlation import call_id_of
from agentd.records import RuntimeEvent

SUBAGENT_TOOLS = ("Task", "Agent")  # claude's tool that runs a subagent (named Agent by newer CLIs)
KILLED_BY = ("timeout", "operator_canceled")  # termination reasons whose process agentd killed
Derived = tuple[str, dict[str, Any]]  # (seed-002 type, what the envelope adds or replaces)


def runtime_events(event: RuntimeEvent, agent_id: str) -> list[dict[str, Any]]:
    """The event's envelope, then one envelope per further fact it carries."""
    primary = runtime_event(event, agent_id)
    derived = DERIVE.get(event.type)
    facts = derived(event) if derived is not None else []
    return [primary, *(_derived_envelope(primary, kind, extra) for kind, extra in facts)]


def _derived_envelope(primary: dict[str, Any], kind: str, extra: dict[str, Any]) -> dict[str, Any]:
    suffix = kind.replace(".", "-")
    envelope = {k: v for k, v in primary.items() if k not in ("status", "payload")}
    return {**envelope, "type": kind, "eventId": f"{primary['eventId']}.{suffix}", **extra}


def _attempt_finished(event: RuntimeEvent) -> list[Derived]:
    payload = event.payload
    found: list[Derived] = []
    if payload.get("failure_type") == "timeout" or payload.get("termination_reason") == "timeout":
        found.append(("task.timed_out", {"status": "timed_out", "payload": {"attemptId": event.attempt_id}}))
    if payload.get("termination_reason") in KILLED_BY:
        found.append(("process.terminated", _terminated(event)))
    cost = _cost_state(payload.get("usage"))
    if cost:
        found.append(("cost.recorded", {"costState": cost, "payload": dict(cost)}))
    return found


def _terminated(event: RuntimeEvent) -> dict[str, Any]:
    number = event.payload.get("signal")
    name = _signal_name(number)
    reason = event.payload.get("termination_reason")
    return {
        "processId": event.attempt_id,
        "payload": {"reason": reason, "signal": name, **({"signalNumber": number} if name else {})},
    }


def _signal_name(number: Any) -> str | None:
    if not isinstance(number, int) or isinstance(number, bool):
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


COST_FIELDS = {"cost_usd": "costUsd", "input_tokens": "inputTokens", "output_tokens": "outputTokens",
               "cache_read_tokens": "cacheReadTokens", "cache_write_tokens": "cacheWriteTokens"}  # fmt: skip


def _cost_state(usage: Any) -> dict[str, Any]:
    """What of the attempt's usage is known; empty when nothing is (then nothing is said)."""
    if not isinstance(usage, dict):
        return {}
    state = {ours: usage[theirs] for theirs, ours in COST_FIELDS.items() if isinstance(usage.get(theirs), int | float)}
    if "costUsd" in state:
        state["estimated"] = bool(usage.get("cost_estimated"))
    return state


def _retry_scheduled(event: RuntimeEvent) -> list[Derived]:
    if event.payload.get("rate_limited") is not True:
        return []
    limit = {"kind": "rate_limit", "retryAt": event.payload.get("available_at")}
    return [("rate_limit.hit", {"limitEvent": limit, "payload": limit})]


def _enqueued(event: RuntimeEvent) -> list[Derived]:
    parent = event.payload.get("parent_task_id")
    if not isinstance(parent, int) or isinstance(parent, bool) or event.task_id is None:
        return []
    edge = {"kind": "delegated", "parentTaskId": str(parent), "childTaskId": str(event.task_id)}
    return [("task.delegated", {"parentTaskId": str(parent), "taskRelationship": edge, "payload": edge})]


def _subagent(event: RuntimeEvent) -> list[Derived]:
    """A call of the harness's subagent tool: the child's id is the call's, its parents the attempt's ids."""
    call = call_id_of(event.type, event.payload)
    if event.payload.get("tool") not in SUBAGENT_TOOLS or call is None:
        return []
    if event.type == "tool_started":
        kind = "subagent.spawned"
    else:
        kind = "subagent.completed" if event.payload.get("ok") is not False else "subagent.failed"
    parents = {"parentTaskId": str(event.task_id), "parentRunId": event.attempt_id, "parentToolCallId": call}
    return [(kind, {"subagentId": call, "payload": {k: v for k, v in parents.items() if v is not None}})]


DERIVE: dict[str, Callable[[RuntimeEvent], list[Derived]]] = {
    "task_attempt_finished": _attempt_finished,
    "task_retry_scheduled": _retry_scheduled,
    "task_enqueued": _enqueued,
    "tool_started": _subagent,
    "tool_finished": _subagent,
}
