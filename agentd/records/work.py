"""Value types the runtime passes between its layers: a task ready to insert, a claim, the end of an
attempt and the side effects it asks for, the dispatch lock's holder. Plain frozen dataclasses:
decided in the pure middle, written as-is by the store."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from agentd import frozen_value
from agentd.records.stored import TaskAttempt, TaskRecord
from agentd.vocabulary import ExitStatus as ExitStatus
from agentd.vocabulary import RetryClass as RetryClass
from agentd.vocabulary import SideEffects as SideEffects
from agentd.vocabulary import TaskStatus

if TYPE_CHECKING:  # pydantic's: these values are built of records judged where they came in
    from agentd.records.tasks import EvidenceRequirements, TaskOutcome, WorkflowRef

OutboxKind = Literal["follow_up_task", "external_message", "workflow_signal", "constitution_proposal"]
OutboxStatus = Literal["pending", "applied", "refused", "awaiting_handler"]
DENIAL_TEXT_CHARS = 300  # each text of a policy_denied event, after redaction


@frozen_value
class NewTask:
    """A validated intent with every default resolved (agentd/work/intake.py); the store inserts it as-is."""

    task_type: str
    source: str
    subject: str | None
    description: str | None
    priority: int
    payload: dict[str, Any]
    requested_profile_id: str
    requested_adapter_id: str | None
    requested_model: str | None
    skill_ids: tuple[str, ...]
    evidence_requirements: EvidenceRequirements | None
    workflow_ref: WorkflowRef | None
    max_attempts: int
    available_at: datetime
    schedule_id: str | None = None
    workflow_iteration: int | None = None
    approval_reason: str | None = None  # held for an operator's approval before its first claim, and why
    parent_task_id: int | None = None  # the task whose outcome asked for this one (a follow-up)
    delegation_depth: int = 0  # how many follow-ups deep (seed 004 bounded delegation)
    root_task_id: int | None = None  # the task at the root of its follow-up tree (None: it is a root)
    delegation_caps: dict[str, int] | None = None  # the stricter of its parent's and its own profile's


@frozen_value
class AttemptPlan:
    """Which adapter and model an attempt runs with (agentd/attempt/prepare.py plan_attempt)."""

    adapter_id: str
    adapter_kind: str
    model: str | None


@frozen_value
class CompiledBundle:
    """What `bundle_compiled` records of an attempt's bundle (agentd/attempt/bundle.py compiles it)."""

    bundle_hash: str
    prompt_path: str
    details: dict[str, Any]


@frozen_value
class Claim:
    task: TaskRecord
    attempt: TaskAttempt | None
    refused: str | None = None  # the config can no longer run this task: it failed permanently


@frozen_value
class ArtifactRow:
    role: str
    relative_path: str
    sha256: str | None
    content_type: str | None = None


@frozen_value
class OutboxEntry:
    """A side effect an outcome asked for: written with the outcome, applied after it, once.

    Written entries carry no ids yet; entries read back for applying carry all three."""

    kind: OutboxKind
    idempotency_key: str
    payload: dict[str, Any]
    status: OutboxStatus = "pending"  # refused when policy decides at commit
    result: dict[str, Any] | None = None
    outbox_id: int | None = None
    task_id: int | None = None
    attempt_id: str | None = None


@frozen_value
class PolicyDenial:
    """A tool call the harness's own permission policy or sandbox refused: what the agent tried and
    was stopped from doing (claude's `permission_denials`, codex's declined commands)."""

    tool: str  # as the harness names it: Bash, Write, command_execution, …
    summary: str  # the input in short: the command, the path, or the input as compact JSON
    reason: str | None = None  # as the harness reported it
    exit_code: int | None = None
    call_id: str | None = None  # the harness's id for the call (claude's tool_use_id, codex's item id)

    def cleaned(self, clean: Callable[[str], str], limit: int = DENIAL_TEXT_CHARS) -> PolicyDenial:
        """Every text `clean`ed (redacted) first and bounded after: cutting first could leave half a
        secret that redaction by value no longer recognises."""

        def bounded(text: str | None) -> str | None:
            if text is None:
                return None
            text = clean(text)
            return text if len(text) <= limit else text[: limit - 1] + "…"

        return PolicyDenial(
            bounded(self.tool) or "",
            bounded(self.summary) or "",
            bounded(self.reason),
            self.exit_code,
            bounded(self.call_id),
        )

    def payload(self) -> dict[str, Any]:
        """The `policy_denied` event's payload: the harness's own permissions refused the call (`refused_by`;
        agentd's policy refusing one is `tool_call_denied`, docs/policy.md "Two layers")."""
        found: dict[str, Any] = {
            "decision": "denied",
            "tool": self.tool,
            "summary": self.summary,
            "refused_by": "harness",
        }
        optional = {"reason": self.reason, "exit_code": self.exit_code, "call_id": self.call_id}
        return found | {k: v for k, v in optional.items() if v is not None}


@frozen_value
class CredentialGroup:
    """The adapters whose model calls use one provider credential (the same upstream, env_file and key variable:
    docs/gateway.md, "Quotas and resets"), and the task types and profiles that run on them by default: what a
    provider's reset holds back. `credential` is a fingerprint of those three, never of the key."""

    credential: str
    adapters: tuple[str, ...]
    task_types: tuple[str, ...] = ()  # task types whose default adapter is one of them
    open_task_types: tuple[str, ...] = ()  # task types with no default adapter: their profile's decides
    profiles: tuple[str, ...] = ()  # profiles whose default adapter is one of them


@frozen_value
class ProviderReset:
    """A provider's rate limit, as its answer said, until its reset: nothing on the credential is claimed."""

    group: CredentialGroup
    until: datetime
    reason: str
    fleet_credential: str | None = None  # a digest of the provider's origin and key: the fleet's name for it


@frozen_value
class AttemptEnd:
    """Everything the outcome commit writes, decided before the transaction starts."""

    attempt_id: str
    task_id: int
    ended_at: datetime
    exit_status: ExitStatus
    retry_class: RetryClass
    termination_reason: str
    outcome: TaskOutcome
    status: TaskStatus
    available_at: datetime | None
    last_error: str | None
    free_attempt: bool = False
    rate_limited: bool = False
    crashed: bool = False  # the runtime died during it: counts toward the task's crash_limit
    side_effects: SideEffects = "possible"
    model: str | None = None
    downgrade_reasons: tuple[str, ...] = ()
    artifacts: tuple[ArtifactRow, ...] = ()
    outbox: tuple[OutboxEntry, ...] = ()
    diagnostics: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    paths: dict[str, str | None] = field(default_factory=dict)
    boot_sweep: bool = False
    policy_denials: tuple[PolicyDenial, ...] = ()  # one policy_denied event each (capped: agentd/attempt/judge.py)
    policy_denials_dropped: int = 0  # the attempt's denials beyond those: counted in one more event
    side_effects_held: str | None = None  # why its follow-ups and messages wait for `agentd approve`
    provider_reset: ProviderReset | None = None  # a provider's limit: its credential rests until then

    @property
    def kind(self) -> str:
        """How the attempt ended, as `agentd_attempts_total{outcome}` counts it: the outcome's status
        (completed, retryable_failure, permanent_failure, blocked, operator_canceled), or what
        spent no attempt (rate_limited, interrupted) or was agentd's own fault (crashed_runtime), or a tool call
        that ran without the policy's decision (policy_violation: docs/policy.md)."""
        if self.termination_reason == "policy_violation":
            return "policy_violation"
        if self.rate_limited:
            return "rate_limited"
        if self.termination_reason == "interrupted":
            return "interrupted"
        if self.crashed:
            return "crashed_runtime"
        return self.outcome.status


@frozen_value
class CancelResult:
    task: TaskRecord
    action: Literal["canceled", "requested"]  # it was waiting / the dispatcher will stop its adapter


@frozen_value
class QueueSummary:
    counts: dict[str, int]  # by status
    oldest_pending_at: datetime | None  # the oldest claimable task's available_at
    next_available_at: datetime | None  # when the next task not held for approval falls due
    schema_version: int
    # Why each pending or retryable_failure task waits, one reason each (they sum to both counts):
    claimable: int = 0  # what the dispatcher's claims would take now
    retry_waiting: int = 0  # retryable_failure, its backoff not over
    delayed: int = 0  # pending, available later (--delay, --at)
    approval: int = 0  # held until an operator approves it (whenever it falls due)
    paused: int = 0  # due, but paused by an operator (`agentd task pause`)
    after: int = 0  # due, but linked after a task that has not completed (`agentd task link`)
    budget: int = 0  # due, but held back by [budget] until the next UTC day
    resting: int = 0  # due, but on a credential waiting for its provider's reset (docs/gateway.md)


@frozen_value
class LockHolder:
    holder_id: str
    pid: int
    pid_started: int
    host: str
    boot_id: str
    acquired_at: datetime
    heartbeat_at: datetime


@frozen_value
class LockAttempt:
    acquired: bool
    holder: LockHolder  # ours when acquired, else the live holder
    cleared: LockHolder | None = None


@frozen_value
class RunningAttempt:
    task_id: int
    task_type: str
    attempt_id: str
    adapter_id: str
    model: str | None
    started_at: datetime


@frozen_value
class CostTotal:
    adapter: str
    model: str
    attempts: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    cost_estimated: bool


# The day's spend, and what waits for the next UTC day ([budget]: agentd/config/budget.py decides them; the
# store reads them and holds tasks by them).


@frozen_value
class AdapterSpend:
    total_usd: float = 0.0
    dearest_usd: float = 0.0  # the dearest single attempt
    estimated: bool = False  # some of it was priced by agentd, not reported


@frozen_value
class Spend:
    """What the attempts that ended since `since` cost, per adapter."""

    since: datetime
    by_adapter: Mapping[str, AdapterSpend] = field(default_factory=dict)

    @property
    def total_usd(self) -> float:
        return sum(s.total_usd for s in self.by_adapter.values())

    @property
    def dearest_usd(self) -> float:
        return max((s.dearest_usd for s in self.by_adapter.values()), default=0.0)

    @property
    def estimated(self) -> bool:
        return any(s.estimated for s in self.by_adapter.values())


@frozen_value
class BudgetHold:
    """What waits for the next UTC day: every task less urgent than `urgent_priority` (`everything`,
    the daily cap), or those that would run on a held adapter. A task's adapter is the one it asked
    for, else its task type's default, else its profile's (agentd/attempt/prepare.py plan_attempt), so the
    held tasks are named by those three columns."""

    urgent_priority: int
    until: datetime
    reason: str
    everything: bool = False
    adapters: frozenset[str] = frozenset()
    task_types: frozenset[str] = frozenset()  # task types whose default adapter is held
    open_task_types: frozenset[str] = frozenset()  # task types with no default adapter: the profile's decides
    profiles: frozenset[str] = frozenset()  # profiles whose default adapter is held
