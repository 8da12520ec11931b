"""Pydantic models of every seed 000 record, each with a versioned schema id.

Field names are the seed's. Where agentd needs more than the seed says, the extra field is
marked "agentd:" in its description and the JSON Schema carries it too.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
)

from agentd.clock import format_ts, parse_ts


def _to_utc(value: Any) -> Any:
    if isinstance(value, str):
        return parse_ts(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a timestamp needs a time zone; write it in UTC with a trailing Z")
        return value.astimezone(UTC)
    return value


Timestamp = Annotated[
    datetime,
    BeforeValidator(_to_utc),
    PlainSerializer(format_ts, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
Priority = Annotated[int, Field(ge=1, le=10, description="1 is the most urgent, 10 the least")]
Identifier = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]
JsonObject = dict[str, Any]

Sandbox = Literal["read-only", "workspace-write", "danger-full-access"]
TaskStatus = Literal[
    "pending",
    "running",
    "completed",
    "retryable_failure",
    "permanent_failure",
    "blocked",
    "operator_canceled",
]
TERMINAL_STATUSES: tuple[TaskStatus, ...] = (
    "completed",
    "permanent_failure",
    "blocked",
    "operator_canceled",
)
OutcomeStatus = Literal["completed", "retryable_failure", "permanent_failure", "blocked", "operator_canceled"]
MachineStatus = Literal["ok", "needs_retry", "blocked", "failed", "canceled"]
ArtifactRole = Literal["plan", "execute-report", "verify-report", "output", "snapshot", "adapter-audit"]

# Seed 000 §14, exactly, then the events agentd adds in the same snake_case.
SEED_EVENT_TYPES = (
    "task_enqueued",
    "task_claimed",
    "bundle_compiled",
    "task_retry_scheduled",
    "task_attempt_finished",
    "task_started",
    "task_finished",
    "schedule_upserted",
    "schedule_task_created",
    "sensor_event_recorded",
    "sensor_event_deduped",
    "sensor_task_created",
    "sensor_workflow_created",
    "sensor_workflow_deduped",
    "workflow_transitioned",
    "workflow_completed",
    "workflow_task_created",
    "dispatch_idle",
    "dispatch_locked",
    "boot_sweep_reclaimed",
    "dispatch_lock_stale_cleared",
)
AGENTD_EVENT_TYPES = (
    "migration_applied",
    "task_cancel_requested",
    "task_requeued",
    "outcome_downgraded",
    "artifact_recorded",
    "outbox_applied",
    "outbox_refused",
    "workflow_started",
    "workflow_blocked",
    "schedule_removed",
    "sensor_event_rejected",
    "sensor_event_stale",
    "sensor_run_finished",
    "dispatch_started",
    "dispatch_stopped",
)
EVENT_TYPES = SEED_EVENT_TYPES + AGENTD_EVENT_TYPES


class Record(BaseModel):
    """Common base: unknown fields are refused, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_id: ClassVar[str]
    # Records written by people (config, sensors) export their validation schema; records
    # agentd writes export what it serializes.
    schema_mode: ClassVar[Literal["validation", "serialization"]] = "serialization"


# --- §1 identity, §1b constitution, §1a wallet ----------------------------------------------


class ExternalName(Record):
    schema_id = "agent-runtime/agent.external-name/v1"
    name: str
    registered_at: Timestamp | None = None
    source: Literal["aibtc-api", "local-cache"]
    wallet_ref: str


class OnchainIdentity(Record):
    schema_id = "agent-runtime/agent.onchain-identity/v1"
    contract: str
    token_id: str | None = None
    reputation_ref: str | None = None


class AgentIdentity(Record):
    schema_id = "agent-runtime/agent.identity/v1"
    schema_mode = "validation"
    agent_id: Identifier
    internal_name: Identifier
    external_name: ExternalName | None = None
    onchain_identity: OnchainIdentity | None = None
    display_name: str
    codename: str | None = None
    purpose_ref: str | None = None
    soul_ref: str | None = None
    host: str | None = None
    user: str | None = None
    runtime_instance_id: str | None = None
    metadata: JsonObject | None = None


class AgentConstitution(Record):
    schema_id = "agent-runtime/agent.constitution/v1"
    agent_id: str
    soul_path: str
    purpose_path: str
    soul_hash: str = Field(description="sha256 of SOUL.md, computed, never typed")
    purpose_hash: str = Field(description="sha256 of PURPOSE.md, computed, never typed")
    version: str
    revised_at: Timestamp


class WalletIdentity(Record):
    schema_id = "agent-runtime/wallet.identity/v1"
    schema_mode = "validation"
    agent_id: str
    chain: str
    network: str | None = None
    address: str
    public_key: str | None = None
    name: str | None = None
    capabilities: list[str] | None = None
    onchain_identity_contract: str | None = None
    reputation_ref: str | None = None
    metadata: JsonObject | None = None


# --- §2 adapters ------------------------------------------------------------------------------


class HarnessAutonomy(Record):
    schema_id = "agent-runtime/adapter.autonomy/v1"
    profile: Literal["restricted", "trusted-vm"] = "restricted"
    required_args: list[str] | None = None


class ClaudeAutonomy(HarnessAutonomy):
    schema_id = "agent-runtime/adapter.claude-autonomy/v1"
    required_settings_files: list[str] | None = None


class ScriptAutonomy(Record):
    schema_id = "agent-runtime/adapter.script-autonomy/v1"
    profile: Literal["runtime-native"] = "runtime-native"


class CodexProvider(Record):
    schema_id = "agent-runtime/adapter.codex-provider/v1"
    id: Identifier
    name: str | None = None
    base_url: str | None = None
    wire_api: Literal["responses"] = "responses"
    requires_openai_auth: bool | None = None
    env_key: str | None = Field(default=None, description="agentd: env var whose value codex sends as the bearer token")


class TokenPrice(Record):
    """agentd: USD per million tokens, for adapters whose CLI reports no cost."""

    schema_id = "agent-runtime/adapter.token-price/v1"
    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)
    cached_input_per_mtok: float | None = Field(default=None, ge=0)


class _SubprocessAdapter(Record):
    adapter_id: Identifier
    command: str = Field(min_length=1, description="the executable; never a shell string")
    working_dir: str | None = None
    timeout_ms: int = Field(gt=0)
    env_file: str | None = None
    env: dict[str, str] | None = None
    extra_args: list[str] | None = None


class ClaudeCodeAdapter(_SubprocessAdapter):
    schema_id = "agent-runtime/adapter.claude-code/v1"
    kind: Literal["claude-code"]
    sandbox: Sandbox | None = None
    model: str | None = None
    autonomy: ClaudeAutonomy | None = None
    max_turns: int | None = Field(default=None, gt=0, description="agentd: --max-turns")
    max_budget_usd: float | None = Field(
        default=None, gt=0, description="agentd: per-attempt spend cap passed to the CLI"
    )
    allowed_tools: list[str] | None = Field(default=None, description="agentd: --allowedTools")


class CodexAdapter(_SubprocessAdapter):
    schema_id = "agent-runtime/adapter.codex/v1"
    kind: Literal["codex"]
    sandbox: Sandbox | None = None
    model: str | None = None
    provider: CodexProvider | None = None
    autonomy: HarnessAutonomy | None = None
    prices: dict[str, TokenPrice] | None = Field(
        default=None, description="agentd: price table by model, codex reports no cost"
    )


class HermesAgentAdapter(_SubprocessAdapter):
    schema_id = "agent-runtime/adapter.hermes-agent/v1"
    kind: Literal["hermes-agent"]
    sandbox: Sandbox | None = None
    model: str | None = None
    autonomy: HarnessAutonomy | None = None
    provider: str | None = Field(default=None, description="agentd: hermes model.provider")
    base_url: str | None = Field(default=None, description="agentd: hermes model.base_url")
    context_length: int | None = Field(default=None, ge=64000, description="agentd")


class OllamaGenerateAdapter(Record):
    schema_id = "agent-runtime/adapter.ollama-generate/v1"
    adapter_id: Identifier
    kind: Literal["ollama-generate"]
    endpoint: str
    model: str
    timeout_ms: int = Field(gt=0)


class ScriptAdapter(_SubprocessAdapter):
    schema_id = "agent-runtime/adapter.script/v1"
    kind: Literal["script"]
    autonomy: ScriptAutonomy | None = None


AdapterConfig = Annotated[
    ClaudeCodeAdapter | CodexAdapter | HermesAgentAdapter | OllamaGenerateAdapter | ScriptAdapter,
    Field(discriminator="kind"),
]
ADAPTER_MODELS: tuple[type[Record], ...] = (
    ClaudeCodeAdapter,
    CodexAdapter,
    HermesAgentAdapter,
    OllamaGenerateAdapter,
    ScriptAdapter,
)


# --- §3 profiles, §4 skills --------------------------------------------------------------------


class ContextPolicy(Record):
    schema_id = "agent-runtime/agent.context-policy/v1"
    max_prompt_chars: int = Field(gt=0)
    include_recent_memory: bool


class ResultPolicy(Record):
    schema_id = "agent-runtime/agent.result-policy/v1"
    allow_follow_up_tasks: bool
    allow_external_messages: bool


class SubagentProfile(Record):
    """seed §3. `integration_policy` is removed: agentd would have nothing to enforce it with."""

    schema_id = "agent-runtime/agent.profile/v1"
    schema_mode = "validation"
    profile_id: Identifier
    style: Literal["claude-like", "codex-like", "hermes-like"]
    role: str
    default_adapter_id: Identifier
    default_model: str | None = None
    prompt_parts: list[str]
    skill_ids: list[Identifier]
    context_policy: ContextPolicy
    result_policy: ResultPolicy


class SkillCommand(Record):
    schema_id = "agent-runtime/skill.command/v1"
    name: Identifier
    command: str | list[str] = Field(description="argv (a string is split like a shell would, but never run by one)")
    description: str | None = None


class SkillManifest(Record):
    schema_id = "agent-runtime/skill.manifest/v1"
    schema_mode = "validation"
    skill_id: Identifier
    description: str
    tags: list[str] | None = None
    instruction_path: str = "SKILL.md"
    subagent_path: str | None = None
    cli_commands: list[SkillCommand] | None = None
    sensor_path: str | None = None
    input_schema_id: str | None = None
    output_schema_id: str | None = None


# --- §6 intents, §5 sensor events ---------------------------------------------------------------


class WorkflowRef(Record):
    schema_id = "agent-runtime/task.workflow-ref/v1"
    workflow_id: int
    state_id: str
    instance_key: str


class RelativeSchedule(Record):
    schema_id = "agent-runtime/task.schedule/v1"
    delay_minutes: float = Field(ge=0, le=525_600)


class EvidenceRequirements(Record):
    schema_id = "agent-runtime/task.evidence-requirements/v1"
    required_artifacts: list[str] | None = None
    require_file_change_verification: bool | None = None
    require_adapter_audit: bool | None = None


class TaskIntent(Record):
    schema_id = "agent-runtime/task.intent/v1"
    schema_mode = "validation"
    task_type: Identifier
    source: str = Field(min_length=1)
    subject: str | None = None
    description: str | None = None
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


class ProposedWorkflow(Record):
    schema_id = "agent-runtime/sensor.proposed-workflow/v1"
    template: Identifier
    instance_key: str = Field(min_length=1)
    state: str | None = None
    context: JsonObject | None = None


class SensorEvent(Record):
    schema_id = "agent-runtime/sensor.event/v1"
    schema_mode = "validation"
    sensor_id: Identifier
    event_id: str = Field(min_length=1)
    observed_at: Timestamp
    source_ref: str
    dedupe_key: str = Field(min_length=1, max_length=512)
    freshness_deadline: Timestamp | None = None
    payload: JsonObject
    proposed_task: TaskIntent | None = None
    proposed_workflow: ProposedWorkflow | None = None


# --- §9 outcome, §7 record, §8 attempt ------------------------------------------------------------


class TaskOutcome(Record):
    schema_id = "agent-runtime/task.outcome/v1"
    schema_mode = "validation"
    status: OutcomeStatus
    machine_status: MachineStatus
    operator_summary: str
    raw_output: str | None = None
    file_changes: list[str] | None = None
    artifact_paths: list[str] | None = None
    workflow_signal: str | None = None
    follow_up_tasks: list[TaskIntent] | None = None
    external_messages: list[JsonObject] | None = None


class TaskRecord(Record):
    """seed §7. task_id is an integer: operators type it (DESIGN §3)."""

    schema_id = "agent-runtime/task.record/v1"
    task_id: int
    task_type: str
    source: str
    subject: str | None
    description: str | None
    priority: Priority
    payload: JsonObject
    requested_profile_id: str
    requested_adapter_id: str | None
    requested_model: str | None
    status: TaskStatus
    max_attempts: int
    attempt_count: int
    available_at: Timestamp
    created_at: Timestamp
    updated_at: Timestamp
    started_at: Timestamp | None
    finished_at: Timestamp | None
    outcome: TaskOutcome | None
    last_error: str | None
    skill_ids: list[str] = Field(description="agentd: skills bundled with the task")
    evidence_requirements: EvidenceRequirements | None = Field(description="agentd: from intent")
    workflow_ref: WorkflowRef | None = Field(description="agentd: the workflow step it serves")
    schedule_id: str | None = Field(description="agentd: the schedule that created it")
    rate_limit_count: int = Field(description="agentd: rate-limited attempts (capped)")
    cancel_requested_at: Timestamp | None = Field(description="agentd: operator cancel pending")


class TaskAttempt(Record):
    """seed §8. exit_status is null while the attempt runs."""

    schema_id = "agent-runtime/task.attempt/v1"
    attempt_id: str
    task_id: int
    attempt_number: int = Field(description="agentd: 1 for the first attempt of the task")
    adapter_id: str
    adapter_kind: str
    model: str | None
    runner_id: str
    started_at: Timestamp
    ended_at: Timestamp | None
    exit_status: Literal["ok", "error", "timeout"] | None
    retry_class: Literal["none", "retryable", "permanent"] | None
    termination_reason: str | None = Field(description="agentd: why the attempt ended")
    bundle_hash: str | None = Field(description="agentd: sha256 of the compiled bundle")
    evidence_dir: str | None = Field(description="agentd: the attempt's evidence directory")
    prompt_path: str | None = None
    stdout_path: str | None = None
    stderr_path: str | None = None
    result_path: str | None = None
    last_message_path: str | None = None
    diagnostics: JsonObject | None = None


# --- §10 workflows, §11b schedules, §12 artifacts, §13 task types --------------------------------


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
    interval_seconds: int = Field(ge=1)
    next_run_at: Timestamp
    last_run_at: Timestamp | None
    task: TaskIntent
    created_at: Timestamp
    updated_at: Timestamp


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
    require_artifacts: bool | None = None
    require_adapter_audit: bool | None = None
    verify_claimed_file_changes: bool | None = None


class TaskTypeSpec(Record):
    schema_id = "agent-runtime/task-type.spec/v1"
    schema_mode = "validation"
    task_type: Identifier
    payload_schema_id: str
    default_profile_id: Identifier | None = None
    default_adapter_id: Identifier | None = None
    default_model: str | None = None
    allowed_skill_ids: list[Identifier] | None = None
    artifact_roles: list[ArtifactRole] | None = None
    success_policy: SuccessPolicy | None = None
    max_attempts: int | None = Field(default=None, ge=1, le=100, description="agentd")
    description: str | None = Field(default=None, description="agentd: for `agentd status`")


# --- §14 events ------------------------------------------------------------------------------------


class RuntimeEvent(Record):
    """seed 000 §14 names in the seed 002 envelope, chained by hash (DESIGN §6)."""

    schema_id = "agent-runtime/runtime.event/v1"
    event_id: str
    type: Literal[EVENT_TYPES]  # type: ignore[valid-type]
    timestamp: Timestamp
    sequence: int
    schema_version: int
    task_id: int | None
    attempt_id: str | None
    workflow_id: int | None
    schedule_id: str | None
    sensor_id: str | None
    payload: JsonObject
    refs: JsonObject
    prev_hash: str
    hash: str


EXPORTED_RECORDS: tuple[type[Record], ...] = (
    AgentIdentity,
    AgentConstitution,
    WalletIdentity,
    *ADAPTER_MODELS,
    SubagentProfile,
    SkillManifest,
    SensorEvent,
    TaskIntent,
    TaskRecord,
    TaskAttempt,
    TaskOutcome,
    WorkflowDefinition,
    WorkflowRecord,
    RecurringScheduleRecord,
    ArtifactRecord,
    TaskTypeSpec,
    RuntimeEvent,
)


def json_schemas() -> dict[str, dict[str, Any]]:
    """Every exported record's JSON Schema (2020-12), keyed by its schema id."""
    from pydantic import TypeAdapter

    schemas: dict[str, dict[str, Any]] = {}
    for model in EXPORTED_RECORDS:
        schemas[model.schema_id] = _with_id(model.schema_id, model.model_json_schema(mode=model.schema_mode))
    union = TypeAdapter(AdapterConfig).json_schema(mode="validation")
    schemas["agent-runtime/adapter.config/v1"] = _with_id("agent-runtime/adapter.config/v1", union)
    return schemas


def _with_id(schema_id: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": schema_id, **schema}
