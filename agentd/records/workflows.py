"""Workflows and recurring schedules (seed 000 §10, §11, §11b)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from agentd import frozen_value
from agentd.records.base import Identifier, JsonBool, JsonInt, JsonObject, Record, Timestamp
from agentd.records.tasks import TaskIntent
from agentd.records.work import NewTask

YEAR_S = 31_536_000


class WorkflowTransition(Record):
    schema_id = "agent-runtime/workflow.transition/v1"
    signal: Identifier = Field(description="the signal a step task reports")
    next_state: Identifier = Field(description="the state it leads to")


class WorkflowState(Record):
    schema_id = "agent-runtime/workflow.state/v1"
    state_id: Identifier = Field(description="the state's name")
    task_type: Identifier | None = Field(
        default=None, description="the task type of the state's step task (none: a state without work)"
    )
    default_profile_id: Identifier | None = Field(default=None, description="the step task's profile")
    default_skill_ids: list[Identifier] | None = Field(default=None, description="the step task's skills")
    transitions: list[WorkflowTransition] | None = Field(default=None, description="where each signal leads")
    completion_signals: list[Identifier] | None = Field(default=None, description="signals that complete the workflow")
    emits_task_intent: bool | None = Field(default=None, description="must agree with task_type (true when it has one)")


class WorkflowDefinition(Record):
    schema_id = "agent-runtime/workflow.definition/v1"
    schema_mode = "validation"
    workflow_type: Identifier = Field(description="the workflow's name (`workflow start TYPE`)")
    initial_state: Identifier = Field(description="where an instance starts")
    states: list[WorkflowState] = Field(description="the states", min_length=1)
    max_state_entries: int | None = Field(
        default=None, ge=1, description="agentd: entries of one state before the workflow blocks"
    )


class WorkflowRecord(Record):
    schema_id = "agent-runtime/workflow.record/v1"
    workflow_id: int
    workflow_type: str
    instance_key: str
    current_state: str
    context: JsonObject | None
    status: Literal["active", "completed", "blocked", "canceled"]
    created_at: Timestamp
    updated_at: Timestamp
    completed_at: Timestamp | None
    iteration: int = Field(description="agentd: state entries so far, 1 at the initial state")
    blocked_reason: str | None = Field(description="agentd: why it is blocked")


class RecurringScheduleRecord(Record):
    schema_id = "agent-runtime/schedule.record/v1"
    schedule_id: str
    name: str
    enabled: bool
    interval_seconds: int = Field(ge=1, le=31_536_000)
    next_run_at: Timestamp
    last_run_at: Timestamp | None
    task: TaskIntent
    created_at: Timestamp
    updated_at: Timestamp
    skipped_for_task_id: int | None = Field(
        default=None, description="agentd: the open task the latest skipped slot waited for"
    )
    skipped_slots: int = Field(default=0, ge=0, description="agentd: slots skipped while that task stayed open")
    skipped_slots_total: int = Field(default=0, ge=0, description="agentd: slots skipped because a task was open")


class ScheduleSpec(Record):
    """A recurring schedule as it is defined (a `[[schedules]]` entry or `agentd schedule add`);
    the RecurringScheduleRecord is that definition with its timing, as stored."""

    schema_id = "agent-runtime/schedule.spec/v1"
    schema_mode = "validation"
    schedule_id: Identifier = Field(description="the schedule's id")
    name: str | None = Field(default=None, description="a label")
    enabled: JsonBool = Field(default=True, description="false: defined but not run")
    interval_seconds: JsonInt = Field(
        description="one task per interval, never a second while the last is open", ge=1, le=YEAR_S
    )
    task: JsonObject = Field(description="a TaskIntent; source defaults to schedule:<id>")


# --- the workflow engine's decisions, made before the store writes them -----------------------------

ChangeKind = Literal["transition", "complete", "block", "ignore"]


@frozen_value
class StepResult:
    """What a finished step task reported, as the outbox carries it."""

    workflow_id: int
    state_id: str
    iteration: int
    signal: str | None
    task_status: str
    task_id: int


@frozen_value
class Change:
    """A workflow's next move after one of its steps ended."""

    kind: ChangeKind
    next_state: str | None = None
    reason: str | None = None


@frozen_value
class SignalDecision:
    """An outside signal (an operator's, or a sensor's) judged on `judged`, the workflow as it was
    read: the store applies `change` only if the workflow is still where it was, and records who
    (`by`) and why (`reason`)."""

    judged: WorkflowRecord
    signal: str
    change: Change
    by: str
    reason: str | None = None


@frozen_value
class StepDecision:
    """For an active workflow whose current entry has no task yet: the task to create, or why the
    workflow blocks ("" : the state has no task type and waits for a signal)."""

    workflow_id: int
    state: str
    iteration: int
    task: NewTask | None = None
    block_reason: str | None = None


@frozen_value
class DueSchedule:
    schedule: RecurringScheduleRecord
    has_open_task: bool


@frozen_value
class ScheduleRun:
    """What one due schedule does this time: create its task, record why not, or just move on."""

    schedule_id: str
    due_at: datetime
    next_run_at: datetime
    task: NewTask | None = None
    refusal: str | None = None
