"""Work: intents, sensor events, outcomes, task records and attempts, artifacts and task types
(seed 000 §5–§9, §12, §13)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agentd.edge import MAX_DESCRIPTION_CHARS, MAX_KEY_CHARS, MAX_SUBJECT_CHARS, check_json_size
from agentd.records.base import (
    ArtifactRole,
    Identifier,
    JsonBool,
    JsonFloat,
    JsonInt,
    JsonObject,
    MachineStatus,
    OutcomeStatus,
    Priority,
    Record,
    TaskStatus,
    Timestamp,
)
from agentd.vocabulary import MACHINE_STATUS_OF as MACHINE_STATUS_OF


class WorkflowRef(Record):
    schema_id = "agent-runtime/task.workflow-ref/v1"
    workflow_id: JsonInt
    state_id: str
    instance_key: str


class RelativeSchedule(Record):
    schema_id = "agent-runtime/task.schedule/v1"
    delay_minutes: JsonFloat = Field(ge=0, le=525_600)


class EvidenceRequirements(Record):
    schema_id = "agent-runtime/task.evidence-requirements/v1"
    required_artifacts: list[str] | None = None
    require_file_change_verification: JsonBool | None = None
    require_adapter_audit: JsonBool | None = None


class TaskIntent(Record):
    schema_id = "agent-runtime/task.intent/v1"
    schema_mode = "validation"
    task_type: Identifier
    source: str = Field(min_length=1, max_length=1024)
    subject: str | None = Field(default=None, max_length=MAX_SUBJECT_CHARS)
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION_CHARS)
    priority: Priority | None = None
    requested_profile_id: Identifier | None = None
    requested_adapter_id: Identifier | None = None
    requested_model: str | None = None
    skill_ids: list[Identifier] | None = None
    workflow_ref: WorkflowRef | None = None
    schedule: RelativeSchedule | None = None
    available_at: Timestamp | None = None
    payload: JsonObject
    evidence_requirements: EvidenceRequirements | None = None

    @model_validator(mode="after")
    def _payload_fits(self) -> TaskIntent:
        check_json_size(self.payload, "payload")
        return self


class ProposedWorkflow(Record):
    schema_id = "agent-runtime/sensor.proposed-workflow/v1"
    template: Identifier
    instance_key: str = Field(min_length=1, max_length=MAX_KEY_CHARS)
    state: str | None = None
    context: JsonObject | None = None
    signal: Identifier | None = Field(
        default=None,
        description="agentd: wakes the existing workflow for (template, instance_key) as if its current step "
        "had emitted this signal (seed 000 §5: sensors may create or wake workflows)",
    )


class SensorEvent(Record):
    schema_id = "agent-runtime/sensor.event/v1"
    schema_mode = "validation"
    sensor_id: Identifier
    event_id: str = Field(min_length=1, max_length=512)
    observed_at: Timestamp
    source_ref: str = Field(max_length=4096)
    dedupe_key: str = Field(min_length=1, max_length=MAX_KEY_CHARS)
    freshness_deadline: Timestamp | None = None
    payload: JsonObject
    proposed_task: TaskIntent | None = None
    proposed_workflow: ProposedWorkflow | None = None


# --- §9 outcome, §7 record, §8 attempt ------------------------------------------------------------


class ConstitutionProposal(Record):
    """agentd (seed 000 §1b): an outcome proposes a revision of SOUL.md or PURPOSE.md, written as a
    file in the workspace; the operator accepts or rejects it (`agentd constitution`)."""

    schema_id = "agent-runtime/task.constitution-proposal/v1"
    document: Literal["soul", "purpose"]
    path: str = Field(min_length=1, max_length=4096, description="the proposed text: a file in the workspace")
    reason: str = Field(min_length=1, max_length=4000, description="why the agent proposes it")


class TaskOutcome(Record):
    schema_id = "agent-runtime/task.outcome/v1"
    schema_mode = "validation"
    status: OutcomeStatus
    machine_status: MachineStatus
    operator_summary: str
    raw_output: str | None = None
    file_changes: list[str] | None = None
    artifact_paths: list[str] | None = None
    artifact_roles: dict[str, ArtifactRole] | None = Field(
        default=None, description="agentd: the role of each artifact path (one the task type allows)"
    )
    workflow_signal: str | None = None
    follow_up_tasks: list[TaskIntent] | None = None
    external_messages: list[JsonObject] | None = None
    constitution_proposal: ConstitutionProposal | None = Field(
        default=None, description="agentd: a revision of SOUL.md or PURPOSE.md for the operator to review"
    )

    @classmethod
    def failure(cls, summary: str, status: OutcomeStatus = "retryable_failure") -> TaskOutcome:
        """Every outcome agentd itself gives (a timeout, a crash, a cancel, its own failure)."""
        return cls(status=status, machine_status=MACHINE_STATUS_OF[status], operator_summary=summary)

    def for_task(self, status: TaskStatus, why: str | None) -> TaskOutcome:
        """This attempt's outcome as its task stores it: unchanged, or, when the runtime ended the task
        otherwise (out of attempts, past the rate-limit cap, the runtime crashing under it), restated
        with the task's status and `why`, keeping what the attempt reported."""
        if status == self.status or status not in MACHINE_STATUS_OF:
            return self
        reported = f"the attempt reported {self.status}"
        if self.operator_summary not in (why or ""):
            reported += f": {self.operator_summary}"
        return self.model_copy(
            update={
                "status": status,
                "machine_status": MACHINE_STATUS_OF[status],
                "operator_summary": f"{why or status} ({reported})",
            }
        )


class ArtifactRecord(Record):
    schema_id = "agent-runtime/artifact.record/v1"
    artifact_id: str
    task_id: int
    role: ArtifactRole
    relative_path: str
    content_type: str | None = None
    created_at: Timestamp
    verified_at: Timestamp | None = None
    attempt_id: str | None = Field(default=None, description="agentd: the attempt that made it")
    sha256: str | None = Field(default=None, description="agentd: content hash when verified")


class SuccessPolicy(Record):
    schema_id = "agent-runtime/task-type.success-policy/v1"
    require_artifacts: bool | None = Field(
        default=None, description="completed only if every declared artifact exists in the workspace"
    )
    require_adapter_audit: bool | None = Field(
        default=None, description="completed only if the harness's raw output was kept"
    )
    verify_claimed_file_changes: bool | None = Field(
        default=None, description="completed only if the files the outcome claims changed did change"
    )


class TaskTypeSpec(Record):
    schema_id = "agent-runtime/task-type.spec/v1"
    schema_mode = "validation"
    task_type: Identifier = Field(description="the type's name (`task add --type`)")
    payload_schema_id: str = Field(
        description="the payload's JSON Schema: an id of payload_schemas, "
        "or the built-in agent-runtime/payload.any-object/v1"
    )
    default_profile_id: Identifier | None = Field(default=None, description="the profile unless the task names one")
    default_adapter_id: Identifier | None = Field(default=None, description="the adapter unless the task names one")
    default_model: str | None = Field(default=None, description="the model unless the task names one")
    allowed_skill_ids: list[Identifier] | None = Field(
        default=None, description="the skills a task of this type may ask for"
    )
    artifact_roles: list[ArtifactRole] | None = Field(default=None, description="the roles its artifacts may take")
    success_policy: SuccessPolicy | None = Field(
        default=None, description="what completed requires, besides the outcome's word"
    )
    max_attempts: int | None = Field(default=None, ge=1, le=100, description="agentd")
    description: str | None = Field(default=None, description="agentd: for `agentd status`")
    version: int = Field(
        default=1,
        ge=1,
        le=1_000_000,
        description="agentd: bump when the type's definition changes (TraceCore task_ref)",
    )
    strict_evidence: bool | None = Field(
        default=None, description="agentd: overrides [dispatch] strict_evidence for this task type"
    )
    requires_approval: bool = Field(
        default=False, description="agentd: each task of this type waits for `agentd approve` before it runs"
    )
