"""Workflows and recurring schedules (seed 000 §10, §11, §11b): the pure rules.

A workflow is in one state at a time. Entering a state is one *iteration*; the step's task is
keyed by (workflow, state, iteration), so exactly one task exists per entry. When that task
ends, its signal is judged here: a transition, completion, or a block — never a silent loop.
A signal from an older iteration is ignored (the ancestor's goal-loop livelocked on those), and
a state entered more than its cap blocks the workflow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from agentd.config import BUILTIN_WORKFLOWS, missing_task_types
from agentd.errors import InputError
from agentd.records import Change, StepResult, WorkflowDefinition, WorkflowRecord, WorkflowState


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
    if step.signal in (state.completion_signals or ()):
        return Change("complete")
    target = next((t.next_state for t in state.transitions or () if t.signal == step.signal), None)
    if target is None:
        allowed = ", ".join(accepted_signals(state)) or "none"
        return Change("block", reason=f"state {state.state_id} got signal {step.signal!r}; it accepts: {allowed}")
    if entries.get(target, 0) + 1 > cap:
        return Change("block", reason=f"state {target} would be entered {entries.get(target, 0) + 1} times (cap {cap})")
    return Change("transition", next_state=target)


def state_cap(definition: WorkflowDefinition | None, default: int) -> int:
    return definition.max_state_entries if definition and definition.max_state_entries else default


def step_payload(workflow: WorkflowRecord) -> dict[str, Any]:
    """A step task's payload: the workflow's context (checked against the task type's schema)."""
    return dict(workflow.context or {})


def next_run_after(evaluated_at: datetime, interval_seconds: int) -> datetime:
    """Coalesced catch-up: however many slots were missed, the next run is one interval from now."""
    return evaluated_at + timedelta(seconds=interval_seconds)
