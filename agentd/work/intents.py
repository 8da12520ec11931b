"""The tasks the runtime makes itself: a schedule's, a workflow step's, a follow-up an outcome asked
for. Each goes through the same admission as `agentd task add` (agentd/work/intake.py), and a task that
cannot be made is a recorded reason, never an exception: one schedule, workflow or follow-up
cannot stall the others."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from agentd.config import Config, task_intent_from_schedule
from agentd.errors import InputError
from agentd.records import (
    DueSchedule,
    NewTask,
    OutboxEntry,
    ScheduleRun,
    ScheduleSpec,
    StepDecision,
    TaskIntent,
    TaskRecord,
    WorkflowRecord,
    WorkflowRef,
    WorkflowState,
)
from agentd.work.intake import admit_task, delegation_caps, widening
from agentd.work.workflows import next_run_after, state_of, step_payload

logger = logging.getLogger(__name__)


def schedule_spec(spec: ScheduleSpec) -> ScheduleSpec:
    """A schedule as stored: its task a complete TaskIntent (source schedule:<id>)."""
    task = task_intent_from_schedule(spec).model_dump(mode="json", exclude_none=True)
    return spec.model_copy(update={"task": task, "name": spec.name or spec.schedule_id})


def schedule_runs(due: list[DueSchedule], config: Config, now: datetime) -> list[ScheduleRun]:
    """What each due schedule does now: its task (unless the last one is still open) or why it
    cannot make one; either way its next run is one interval from now (coalesced catch-up)."""
    runs = []
    for item in due:
        schedule = item.schedule
        task, refusal = None, None
        if not item.has_open_task:
            task, refusal = _admitted(
                schedule.task.model_copy(update={"source": f"schedule:{schedule.schedule_id}"}), config, now
            )
            task = replace(task, schedule_id=schedule.schedule_id) if task else None
        runs.append(
            ScheduleRun(
                schedule.schedule_id,
                schedule.next_run_at,
                next_run_after(now, schedule.interval_seconds),
                task,
                refusal,
            )
        )
    return runs


def step_decisions(workflows: list[WorkflowRecord], config: Config, now: datetime) -> list[StepDecision]:
    """For each active workflow whose current entry has no task: the task, or why it blocks."""
    return [_step_decision(workflow, config, now) for workflow in workflows]


def _step_decision(workflow: WorkflowRecord, config: Config, now: datetime) -> StepDecision:
    decision = StepDecision(workflow.workflow_id, workflow.current_state, workflow.iteration)
    definition = config.workflows.get(workflow.workflow_type)
    state = state_of(definition, workflow.current_state) if definition else None
    if definition is None or state is None:
        reason = f"workflow {workflow.workflow_type} has no state {workflow.current_state!r} any more"
        return replace(decision, block_reason=reason)
    if state.task_type is None:
        return replace(decision, block_reason="")  # a state without a task: it waits for a signal
    intent = _step_intent(
        workflow.workflow_id,
        workflow.workflow_type,
        workflow.instance_key,
        state,
        workflow.iteration,
        step_payload(workflow),
    )
    task, refusal = _admitted(intent, config, now, trusted=True)
    if task is None:
        return replace(decision, block_reason=f"cannot create the {state.state_id} task: {refusal}")
    return replace(decision, task=replace(task, workflow_iteration=workflow.iteration))


def follow_up(
    entry: OutboxEntry, config: Config, now: datetime, parent: TaskRecord | None = None
) -> tuple[NewTask | None, str | None]:
    """A follow-up task an outcome asked for, admitted like any untrusted proposal (or why not). It may
    not widen what its parent had, and it inherits the stricter of its parent's delegation caps and its
    own profile's, and its parent's tree (seed 004 bounded delegation)."""
    try:
        intent = TaskIntent.model_validate({**entry.payload, "source": f"follow_up:task:{entry.task_id}"})
    except ValidationError as exc:
        return None, f"not a valid TaskIntent: {exc.errors()[0]['msg']}"
    if parent is not None and (widened := widening(config, parent, intent)) is not None:
        return None, widened
    task, refusal = _admitted(intent, config, now)
    if task is None or parent is None:
        return task, refusal
    child = replace(
        task,
        parent_task_id=parent.task_id,
        delegation_depth=parent.delegation_depth + 1,
        root_task_id=parent.root_task_id or parent.task_id,
        delegation_caps=delegation_caps(config, parent),
    )
    return replace(child, delegation_caps=delegation_caps(config, child)), None


def first_step_refusal(
    config: Config, workflow_type: str, instance_key: str, state_id: str, context: dict[str, Any], now: datetime
) -> str | None:
    """Why a workflow starting in `state_id` with this context could not make its first step task
    (its payload refused by the task type's schema, say), or None: `workflow start` refuses it at
    once instead of starting a workflow that blocks on its first step."""
    definition = config.workflows.get(workflow_type)
    state = state_of(definition, state_id) if definition else None
    if state is None or state.task_type is None:
        return None
    intent = _step_intent(1, workflow_type, instance_key, state, 1, dict(context))
    task, refusal = _admitted(intent, config, now, trusted=True)
    return None if task is not None else refusal


def _step_intent(
    workflow_id: int,
    workflow_type: str,
    instance_key: str,
    state: WorkflowState,
    iteration: int,
    payload: dict[str, Any],
) -> TaskIntent:
    return TaskIntent(
        task_type=state.task_type,
        source=f"workflow:{workflow_id}:{state.state_id}:{iteration}",
        subject=f"{workflow_type} {instance_key}: {state.state_id} (#{iteration})"[:500],
        requested_profile_id=state.default_profile_id,
        skill_ids=state.default_skill_ids,
        workflow_ref=WorkflowRef(workflow_id=workflow_id, state_id=state.state_id, instance_key=instance_key),
        payload=payload,
    )


def _admitted(
    intent: TaskIntent, config: Config, now: datetime, *, trusted: bool = False
) -> tuple[NewTask | None, str | None]:
    try:
        return admit_task(intent, config, now, trusted=trusted), None
    except InputError as exc:
        return None, str(exc)
    except Exception as exc:  # a bug or a value nothing foresaw: recorded, never a stall
        logger.exception("the task %s could not be made", intent.source)
        return None, f"internal_error: {type(exc).__name__}: {exc}"
