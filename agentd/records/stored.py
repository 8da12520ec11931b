"""What the store reads back: a task, an attempt, an event (seed 000 §7, §8, §14), as plain frozen values.

Each is made in one place, agentd/store/rows.py, from its row, after that row's columns are checked; the
text people and agents send is judged by the pydantic records where it comes in (agentd/records/tasks.py
`TaskIntent`, `TaskOutcome`), so reading a row back needs no pydantic at all (docs/decisions.md, "One
shape per fact"). `agentd schema export` describes each from its fields, their annotations and the
docstring under each field (pydantic reads them there, only when it exports: agentd/config/schemas.py `json_schemas`,
which names the bounds the annotations give).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from agentd import frozen_value
from agentd.clock import format_ts
from agentd.records.event_names import EVENT_TYPES
from agentd.vocabulary import ExitStatus, MachineStatus, OutcomeStatus, RetryClass, SideEffects, TaskStatus

if TYPE_CHECKING:  # bounds only pydantic reads, where it exports the schema (agentd/config/schemas.py)
    from annotated_types import Ge, Interval

# What pydantic reads when it exports a record's schema: the docstring under a field is its description,
# and a field not named is refused (agentd/config/schemas.py).
EXPORTED: dict[str, Any] = {"use_attribute_docstrings": True, "extra": "forbid"}

ArtifactRole = Literal["plan", "execute-report", "verify-report", "output", "snapshot", "adapter-audit"]
EventType = Literal[EVENT_TYPES]  # type: ignore[valid-type]


@frozen_value
class WorkflowRefRecord:
    """The workflow step a task serves."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {**EXPORTED, "title": "WorkflowRef"}
    workflow_id: int
    state_id: str
    instance_key: str


@frozen_value
class EvidenceRequirementsRecord:
    """What a task's intent asked its evidence to hold."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {**EXPORTED, "title": "EvidenceRequirements"}
    required_artifacts: list[str] | None = None
    require_file_change_verification: bool | None = None
    require_adapter_audit: bool | None = None


@frozen_value
class TaskOutcomeRecord:
    """An outcome as its task stores it (judged as a `TaskOutcome` when the attempt reported it)."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {**EXPORTED, "title": "TaskOutcome"}
    status: OutcomeStatus
    machine_status: MachineStatus
    operator_summary: str
    raw_output: str | None = None
    file_changes: list[str] | None = None
    artifact_paths: list[str] | None = None
    artifact_roles: dict[str, ArtifactRole] | None = None
    """agentd: the role of each artifact path (one the task type allows)"""
    workflow_signal: str | None = None
    follow_up_tasks: list[dict[str, Any]] | None = None
    """the task intents it asked for, as the outcome gave them"""
    external_messages: list[dict[str, Any]] | None = None
    constitution_proposal: dict[str, Any] | None = None
    """agentd: a revision of SOUL.md or PURPOSE.md for the operator to review"""


class Stored:
    """What the three stored records share: their schema is the JSON agentd writes of them, and pydantic
    reads their fields' docstrings and refuses an unknown field when it exports it."""

    schema_mode: ClassVar[Literal["validation", "serialization"]] = "serialization"
    __pydantic_config__: ClassVar[dict[str, Any]] = EXPORTED


@frozen_value
class TaskRecord(Stored):
    """seed §7. task_id is an integer: operators type it (docs/design.md, "Storage")."""

    schema_id: ClassVar[str] = "agent-runtime/task.record/v1"
    task_id: int
    task_type: str
    source: str
    subject: str | None
    description: str | None
    priority: Annotated[int, Interval(ge=1, le=10)]
    """1 is the most urgent, 10 the least"""
    payload: dict[str, Any]
    requested_profile_id: str
    requested_adapter_id: str | None
    requested_model: str | None
    status: TaskStatus
    max_attempts: int
    attempt_count: int
    available_at: datetime
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    outcome: TaskOutcomeRecord | None
    last_error: str | None
    skill_ids: list[str]
    """agentd: skills bundled with the task"""
    evidence_requirements: EvidenceRequirementsRecord | None
    """agentd: from intent"""
    workflow_ref: WorkflowRefRecord | None
    """agentd: the workflow step it serves"""
    workflow_iteration: int | None
    """agentd: the workflow state entry it serves"""
    schedule_id: str | None
    """agentd: the schedule that created it"""
    free_attempt_count: int
    """agentd: attempts not spent (rate-limited or interrupted)"""
    rate_limit_count: int
    """agentd: rate-limited attempts (capped)"""
    crash_count: int = 0
    """agentd: boot sweeps in a row that reclaimed it (crash_limit ends it crashed_runtime)"""
    cancel_requested_at: datetime | None = None
    """agentd: operator cancel pending"""
    awaiting_approval: bool = False
    """agentd: held until an operator approves it"""
    parent_task_id: int | None = None
    """agentd: the task whose outcome asked for this one (dispatch context, seed 003)"""
    delegation_depth: Annotated[int, Ge(0)] = 0
    """agentd: follow-ups deep (seed 004)"""
    root_task_id: int | None = None
    """agentd: the root of its follow-up tree"""
    delegation_caps: dict[str, int] | None = None
    """agentd: max_depth and max_per_outcome: the stricter of its parent's and profile's"""


@frozen_value
class TaskAttempt(Stored):
    """seed §8. exit_status is null while the attempt runs."""

    schema_id: ClassVar[str] = "agent-runtime/task.attempt/v1"
    attempt_id: str
    task_id: int
    attempt_number: int
    """agentd: 1 for the first attempt of the task"""
    adapter_id: str
    adapter_kind: str
    model: str | None
    runner_id: str
    started_at: datetime
    ended_at: datetime | None
    exit_status: ExitStatus | None
    """error for one the boot sweep closed (its exit unseen: diagnostics exit_seen false)"""
    retry_class: RetryClass | None
    termination_reason: str | None
    """agentd: why the attempt ended"""
    side_effects: SideEffects | None = None
    """agentd: whether the adapter ran far enough for side effects to have happened"""
    pid: int | None = None
    """agentd: the adapter's process (group leader), once started"""
    bundle_hash: str | None = None
    """agentd: sha256 of the compiled bundle"""
    evidence_dir: str | None = None
    """agentd: the attempt's evidence directory"""
    prompt_path: str | None = None
    stdout_path: str | None = None
    stderr_path: str | None = None
    result_path: str | None = None
    last_message_path: str | None = None
    diagnostics: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    """agentd: tokens (input/output/cache) and cost_usd, cost_estimated"""
    evidence_pruned_at: datetime | None = None
    """agentd: when retention deleted its evidence folder (the row stays)"""


@frozen_value
class RuntimeEvent(Stored):
    """seed 000 §14 names in the seed 002 envelope, chained by hash (docs/design.md, "Events")."""

    schema_id: ClassVar[str] = "agent-runtime/runtime.event/v1"
    event_id: str
    type: EventType
    timestamp: datetime
    sequence: int
    schema_version: int
    task_id: int | None
    attempt_id: str | None
    workflow_id: int | None
    schedule_id: str | None
    sensor_id: str | None
    payload: dict[str, Any]
    refs: dict[str, Any]
    prev_hash: str
    hash: str


STORED_RECORDS = (TaskRecord, TaskAttempt, RuntimeEvent)


def record_json(value: Any) -> Any:
    """A stored record (or anything holding them) as JSON values: its fields in order, times as
    agentd writes them (`format_ts`), nested records as objects — what `--json` and the API print."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: record_json(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return format_ts(value)
    if isinstance(value, dict):
        return {key: record_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [record_json(item) for item in value]
    return value


def without_none(value: dict[str, Any]) -> dict[str, Any]:
    """A record's JSON without its empty fields, as agentd stores a nested record in a JSON column."""
    return {key: item for key, item in value.items() if item is not None}


def event_json(event: RuntimeEvent) -> str:
    """One event as `agentd events --json` prints it: its fields in order, compact, UTF-8 kept."""
    return json.dumps(record_json(event), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
