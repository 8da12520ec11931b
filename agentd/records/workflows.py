"""Workflows and recurring schedules (seed 000 §10, §11, §11b)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentd.records.base import Identifier, JsonObject, Record, Timestamp
from agentd.records.tasks import TaskIntent


class WorkflowTransition(Record):
    schema_id = "agent-runtime/workflow.transition/v1"
    signal: Identifier
    next_state: Identifier


class WorkflowState(Record):
    schema_id = "agent-runtime/workflow.state/v1"
    state_id: Identifier
    task_type: Identifier | None = None
    default_profile_id: Identifier | None = None
    default_skill_ids: list[Identifier] | None = None
    transitions: list[WorkflowTransition] | None = None
    completion_signals: list[Identifier] | None = None
    emits_task_intent: bool | None = None


class WorkflowDefinition(Record):
    schema_id = "agent-runtime/workflow.definition/v1"
    schema_mode = "validation"
    workflow_type: Identifier
    initial_state: Identifier
    states: list[WorkflowState] = Field(min_length=1)
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
    status: Literal["active", "completed", "blocked"]
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
