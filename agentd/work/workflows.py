"""Workflows and recurring schedules (seed 000 §10, §11, §11b): the pure rules.

A workflow is in one state at a time. Entering a state is one *iteration*; the step's task is
keyed by (workflow, state, iteration), so exactly one task exists per entry. When that task
ends, its signal is judged here: a transition, completion, or a block — never a silent loop.
A signal from an older iteration is ignored (the ancestor's goal-loop livelocked on those), and
a state entered more than its cap blocks the workflow. A signal from outside (an operator's, or a
sensor's waking an existing workflow) is judged by the same rules, but is refused rather than block;
a blocked workflow is unblocked only into a state the current config's cap still allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from agentd.config import BUILTIN_WORKFLOWS, Config, missing_task_types
from agentd.errors import InputError
from agentd.records import (
    Change,
    SignalDecision,
    StepResult,
    WorkflowDefinition,
    WorkflowRecord,
    WorkflowState,
)


def state_of(definition: WorkflowDefinition, state_id: str) -> WorkflowState | None:
    return next((s for s in definition.states if s.state_id == state_id), None)


def accepted_signals(state: WorkflowState) -> tuple[str, ...]:
    return tuple(t.signal for t in state.transitions or ()) + tuple(state.completion_signals or ())


def start_state(
    workflows: Mapping[str, WorkflowDefinition], task_types: Iterable[str], workflow_type: str, state: str | None
) -> str:
    """The state a new workflow of this type starts in (the initial one unless `state`); InputError
    naming what is configured otherwise (and what a built-in would need)."""
    definition = workflows.get(workflow_type)
    if definition is None:
        hint = ""
        for builtin in BUILTIN_WORKFLOWS:
            if builtin.workflow_type == workflow_type:
                needed = ", ".join(missing_task_types(builtin, set(task_types)))
                hint = f"; the built-in {workflow_type} needs task types {needed}"
        known = ", ".join(sorted(workflows)) or "none"
        raise InputError(f"unknown workflow type {workflow_type!r}; configured: {known}{hint}")
    chosen = state or definition.initial_state
    if state_of(definition, chosen) is None:
        raise InputError(f"{workflow_type} has no state {chosen!r}")
    return chosen


def next_move(
    definition: WorkflowDefinition | None, workflow: WorkflowRecord, step: StepResult, entries: dict[str, int], cap: int
) -> Change:
    """The workflow's next move after one of its step tasks ended."""
    if workflow.status != "active":
        return Change("ignore", reason=f"workflow is {workflow.status}")
    if (step.state_id, step.iteration) != (workflow.current_state, workflow.iteration):
        return Change(
            "ignore",
            reason=f"signal from {step.state_id}#{step.iteration}, the workflow is at "
            f"{workflow.current_state}#{workflow.iteration}",
        )
    if definition is None:
        return Change("block", reason=f"workflow type {workflow.workflow_type!r} is no longer configured")
    state = state_of(definition, workflow.current_state)
    if state is None:
        return Change(
            "block", reason=f"state {workflow.current_state!r} no longer exists in {definition.workflow_type}"
        )
    if step.task_status != "completed":
        return Change("block", reason=f"task {step.task_id} of state {state.state_id} ended {step.task_status}")
    return _move_on(state, step.signal, entries, cap)


def signal_move(
    definition: WorkflowDefinition | None, workflow: WorkflowRecord, signal: str, entries: dict[str, int], cap: int
) -> Change:
    """An outside signal (an operator's or a sensor's) judged by the rules a step's signal is, as if
    the current step had emitted it. What would block the workflow is "ignore" with the reason
    instead: a signal from outside never blocks a workflow, it is refused (and nothing changes)."""
    if workflow.status != "active":
        return Change("ignore", reason=f"workflow {workflow.workflow_id} is {workflow.status}, not active")
    state = state_of(definition, workflow.current_state) if definition else None
    if state is None:
        return Change(
            "ignore",
            reason=f"state {workflow.current_state!r} of {workflow.workflow_type} is no longer configured",
        )
    change = _move_on(state, signal, entries, cap)
    return Change("ignore", reason=change.reason) if change.kind == "block" else change


def unblock_move(
    definition: WorkflowDefinition | None,
    workflow: WorkflowRecord,
    entries: dict[str, int],
    cap: int,
    state_id: str | None = None,
) -> Change:
    """A blocked workflow re-enters its current state (or `state_id`) as a new iteration, if the
    current config has that state and its cap allows one more entry; InputError saying what to
    change otherwise."""
    if workflow.status != "blocked":
        raise InputError(f"workflow {workflow.workflow_id} is {workflow.status}; only a blocked workflow is unblocked")
    if definition is None:
        raise InputError(f"workflow type {workflow.workflow_type!r} is no longer configured; configure it first")
    target = state_id or workflow.current_state
    if state_of(definition, target) is None:
        known = ", ".join(s.state_id for s in definition.states)
        raise InputError(f"{workflow.workflow_type} has no state {target!r}; its states: {known}")
    entered = entries.get(target, 0) + 1
    if entered > cap:
        raise InputError(
            f"state {target} would be entered {entered} times (cap {cap}), so the workflow would block again; "
            f"raise max_state_entries of {workflow.workflow_type} (or dispatch.workflow_state_cap) to at "
            f"least {entered}, or unblock into another state with --state"
        )
    return Change("transition", next_state=target)


def _move_on(state: WorkflowState, signal: str | None, entries: dict[str, int], cap: int) -> Change:
    """The rules a completed step's signal is judged by: complete, transition, or block."""
    if signal in (state.completion_signals or ()):
        return Change("complete")
    target = next((t.next_state for t in state.transitions or () if t.signal == signal), None)
    if target is None:
        allowed = ", ".join(accepted_signals(state)) or "none"
        return Change("block", reason=f"state {state.state_id} got signal {signal!r}; it accepts: {allowed}")
    if entries.get(target, 0) + 1 > cap:
        return Change("block", reason=f"state {target} would be entered {entries.get(target, 0) + 1} times (cap {cap})")
    return Change("transition", next_state=target)


def state_cap(definition: WorkflowDefinition | None, default: int) -> int:
    return definition.max_state_entries if definition and definition.max_state_entries else default


def judge_signal(
    config: Config, workflow: WorkflowRecord, entries: dict[str, int], signal: str, by: str, reason: str | None
) -> SignalDecision:
    """An outside signal judged against the current config (its workflow definition and cap)."""
    definition = config.workflows.get(workflow.workflow_type)
    cap = state_cap(definition, config.dispatch.workflow_state_cap)
    return SignalDecision(workflow, signal, signal_move(definition, workflow, signal, entries, cap), by, reason)


def signal_refusal(definition: WorkflowDefinition, signal: str) -> str | None:
    """Why a sensor may not propose `signal` for this workflow type: no state of it accepts it."""
    if any(signal in accepted_signals(state) for state in definition.states):
        return None
    known = ", ".join(dict.fromkeys(s for state in definition.states for s in accepted_signals(state))) or "none"
    return f"no state of {definition.workflow_type} accepts signal {signal!r}; its signals: {known}"


def step_payload(workflow: WorkflowRecord) -> dict[str, Any]:
    """A step task's payload: the workflow's context (checked against the task type's schema)."""
    return dict(workflow.context or {})


def next_run_after(evaluated_at: datetime, interval_seconds: int) -> datetime:
    """Coalesced catch-up: however many slots were missed, the next run is one interval from now."""
    return evaluated_at + timedelta(seconds=interval_seconds)
