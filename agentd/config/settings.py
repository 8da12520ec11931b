"""The identity TOML's shape (docs/design.md, "Configuration"): a pydantic model per section, each value checked on its
own, with documented defaults and bounds. Reading the file and the environment into a Config is config/__init__.py's."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentd.config.addresses import HostName, ListenAddress
from agentd.config.archive import ArchiveSection
from agentd.config.backup import BackupSection
from agentd.config.gateway import GatewaySection
from agentd.edge import quoted
from agentd.records import (
    AdapterConfig,
    AgentFields,
    Identifier,
    ScheduleSpec,
    SubagentProfile,
    TaskTypeSpec,
    Timestamp,
    ToolRule,
    WalletIdentity,
    WorkflowDefinition,
)
from agentd.records.messages import MessageHandler

ENV_PREFIX = "AGENTD_"
MIB = 1024 * 1024


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class AgentSection(AgentFields):
    """[agent]: AgentIdentity (seed §1) without soul_ref/purpose_ref, which [constitution] owns."""


class ConstitutionSection(Section):
    soul_path: Path = Field(description="SOUL.md: identity, values, style (hashed into every bundle)")
    purpose_path: Path = Field(description="PURPOSE.md: goals and self-evaluation (hashed into every bundle)")
    version: str = Field(description="the constitution's revision; `constitution accept` moves it on")
    revised_at: Timestamp = Field(description="when it was last revised")


class WalletSection(WalletIdentity):
    """A [[wallets]] entry: a WalletIdentity whose agent_id may be left to the agent's."""

    agent_id: str | None = Field(default=None, description="the agent it belongs to (default: [agent] agent_id)")  # type: ignore[assignment]


class PathsSection(Section):
    state_dir: Path = Field(description="database, attempt evidence, locks (0700; the services' user only)")
    skills_dir: Path = Field(description="one folder per skill (SKILL.md, skill.toml)")
    sensors_dir: Path = Field(description="one folder per sensor (an executable and sensor.toml)")
    workspace: Path = Field(description="where attempts run (their working directory) and artifacts live")
    run_dir: Path | None = Field(
        default=None,
        description="one folder per running attempt: its HOME, TMPDIR and result file (default: "
        "<state_dir>/runs; with dispatch.run_as, a folder outside state_dir the run user can reach)",
    )

    @property
    def runs(self) -> Path:
        return self.run_dir if self.run_dir is not None else self.state_dir / "runs"


DAY_S = 86_400.0
YEAR_S = 31_536_000
# A POSIX user name as useradd and systemd-sysusers take one.
UserName = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[a-z_][a-z0-9_-]*$")]


class DispatchSection(Section):
    # Every duration has an upper bound: each one ends up in a timedelta or a sleep.
    poll_ceiling_s: float = Field(
        description="the longest idle sleep when nothing is due and nobody pokes", default=30.0, gt=0, le=3600
    )
    grace_s: float = Field(default=30.0, ge=0, le=DAY_S, description="SIGTERM: time the attempt may finish")
    kill_grace_s: float = Field(default=5.0, gt=0, le=3600, description="adapter SIGTERM → SIGKILL")
    lock_heartbeat_s: float = Field(
        description="how often the dispatcher refreshes the dispatch lock", default=5.0, gt=0, le=3600
    )
    lock_stale_s: float = Field(description="a lock not refreshed this long is stale", default=60.0, gt=0, le=DAY_S)
    default_max_attempts: int = Field(
        description="attempts of a task whose type sets no max_attempts", default=3, ge=1, le=100
    )
    default_profile_id: Identifier | None = Field(
        default=None, description="the profile of a task whose intent and task type name none"
    )
    default_message_handler: Identifier | None = Field(
        default=None, description="the [[message_handlers]] entry for a message that names none"
    )
    backoff_base_s: float = Field(
        description="retry n waits backoff_base_s * 2^(n-1), capped and jittered", default=30.0, ge=0, le=DAY_S
    )
    backoff_max_s: float = Field(description="the longest wait before a retry", default=3600.0, ge=0, le=30 * DAY_S)
    backoff_jitter: float = Field(description="± this fraction of the wait, at random", default=0.2, ge=0, le=1)
    rate_limit_backoff_s: float = Field(
        description="wait after a rate-limited attempt (which spends no attempt)", default=300.0, ge=0, le=DAY_S
    )
    max_rate_limit_reschedules: int = Field(
        description="rate-limited attempts of one task before it fails", default=5, ge=0, le=1000
    )
    max_reset_wait_s: float = Field(
        description="the longest a provider's reset is waited for (docs/gateway.md)", default=21600.0, ge=0, le=DAY_S
    )
    output_cap_bytes: int = Field(
        description="an attempt's stdout and stderr each keep at most this much: the first and the last half, "
        "the overflow between them counted in a marker",
        default=16 * MIB,
        ge=1024,
        le=1024 * 1024 * MIB,
    )
    max_artifact_bytes: int = Field(
        description="the most agentd reads to hash the files one outcome names, in all; past it one fails the gate",
        default=4 * 1024 * MIB,
        ge=MIB,
        le=1024 * 1024 * MIB,
    )
    workflow_state_cap: int = Field(
        description="entries of one workflow state before the workflow blocks (per workflow: max_state_entries)",
        default=5,
        ge=1,
        le=1000,
    )
    recent_memory_items: int = Field(
        description="outcomes of recent tasks a bundle carries when its profile asks for recent memory",
        default=5,
        ge=0,
        le=100,
    )
    crash_limit: int = Field(
        default=3, ge=1, le=100, description="boot sweeps in a row that end a task crashed_runtime"
    )
    strict_evidence: bool = Field(default=False, description="verify each sealed manifest before a completion counts")
    max_descendants: int = Field(
        default=50,
        ge=1,
        le=100_000,
        description="follow-ups (and theirs) one task's tree may hold in all; past it more are refused (seed 004)",
    )
    run_as: UserName | None = Field(
        default=None,
        description="the user attempts run as (never the services' own): with it, an attempt "
        "cannot read the state dir or act as the operator; without it approvals are advisory",
    )
    boundary: Literal["enforced", "advisory"] = Field(
        default="enforced",
        description="advisory: a dispatcher whose adapters run a model may start without run_as (development; "
        "its attempts can approve their own tasks); enforced refuses that (docs/install-and-deploy.md)",
    )
    max_pids: int = Field(
        default=384,
        ge=0,
        le=4_194_304,
        description="processes and threads one attempt may hold at once, in its own cgroup (0: no limit); keep it "
        "below the dispatcher unit's TasksMax (512) so a fork bomb cannot stall the dispatcher",
    )
    max_memory_mb: int = Field(
        default=4096,
        ge=0,
        le=1024 * 1024 * 1024,
        description="memory one attempt may use, in its own cgroup, in MiB (0: no limit); past it the kernel kills "
        "inside it and the attempt ends memory_limit",
    )


USD_MAX = 1_000_000.0
Usd = Annotated[float, Field(gt=0, le=USD_MAX)]


class BudgetSection(Section):
    """[budget]: what the agent may spend per UTC day (agentd/config/budget.py; docs/operate.md, "Budgets").
    Nothing set: nothing is limited."""

    daily_usd: Usd | None = Field(default=None, description="all adapters together, per UTC day")
    per_attempt_usd: Usd | None = Field(
        default=None, description="the most one attempt may spend; passed to claude as --max-budget-usd"
    )
    adapter_daily_usd: dict[Identifier, Usd] = Field(default={}, description="per adapter id, per UTC day")
    urgent_priority: int = Field(
        default=1, ge=1, le=10, description="past a cap, tasks of this priority and more urgent still run"
    )

    @property
    def capped(self) -> bool:
        return self.daily_usd is not None or bool(self.adapter_daily_usd)


class PolicySection(Section):
    """[policy]: the tool policy every profile's own rules fall back to, and how long a held call waits
    for a person (docs/policy.md)."""

    default: Literal["allow", "deny", "ask"] = Field(
        default="allow", description="what a tool call gets when no rule matches it"
    )
    ask_timeout_s: float = Field(
        default=300.0, ge=1, le=3000, description="how long an `ask` call waits for a person; then it is denied"
    )
    rules: list[ToolRule] = Field(default=[], max_length=200, description="after each profile's own tool_policy")
    max_held_s: float | None = Field(
        default=None,
        ge=1,
        le=6000,
        description="an attempt's calls wait for people this long in all (unset: twice ask_timeout_s)",
    )
    max_recorded_decisions: int = Field(default=1000, ge=1, le=100_000, description="events per attempt; then counted")

    @property
    def held_budget_s(self) -> float:
        return self.max_held_s if self.max_held_s is not None else 2 * self.ask_timeout_s


class SensorsSection(Section):
    max_concurrent: int = Field(description="sensors running at once", default=4, ge=1, le=64)
    default_timeout_s: float = Field(
        description="a sensor run's hard timeout unless its sensor.toml sets one", default=60.0, gt=0, le=DAY_S
    )
    kill_grace_s: float = Field(description="sensor SIGTERM → SIGKILL", default=5.0, gt=0, le=3600)
    output_cap_bytes: int = Field(
        description="a sensor run's stdout and stderr each keep at most this much",
        default=16 * MIB,
        ge=1024,
        le=1024 * 1024 * MIB,
    )
    tick_s: float = Field(description="how often the sensor service looks for due sensors", default=1.0, gt=0, le=60)
    run_as: UserName | None = Field(
        default=None,
        description="the user sensors run as, each with a folder in its home no attempt reaches; "
        "unset: dispatch.run_as (an attempt can then reach a running sensor)",
    )


class MetricsSection(Section):
    """[metrics]. Each agent on a VM needs its own pair of ports: `agentd install` picks a free pair
    (9478/9479, then 9480/9481, …) and writes it here."""

    enabled: bool = Field(default=True, description="serve /metrics on each service")
    dispatch_listen: ListenAddress = Field(
        default="127.0.0.1:9478",
        description="HOST:PORT of the dispatcher's /metrics (loopback by default; 0 picks a free port)",
    )
    sensors_listen: ListenAddress = Field(
        default="127.0.0.1:9479", description="HOST:PORT of the sensor service's /metrics"
    )

    @model_validator(mode="after")
    def _two_ports(self) -> MetricsSection:
        if self.dispatch_listen == self.sensors_listen and not self.dispatch_listen.endswith(":0"):
            raise ValueError(
                f"dispatch_listen and sensors_listen are both {self.dispatch_listen!r}: give each its own port"
            )
        return self


class TelemetrySection(Section):
    """[telemetry]: traces for an OpenTelemetry stack (docs/telemetry.md). Off unless otlp_endpoint is set; it
    needs the `otel` extra (`pip install 'agentd[otel]'`). A collector that is down or slow never holds up
    dispatch: spans are sent from a thread of their own and dropped, counted, when it cannot keep up."""

    otlp_endpoint: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s/]+(/[^\s]*)?$",
        description="the collector's OTLP/HTTP base URL (http://127.0.0.1:4318); spans go to its /v1/traces path",
    )
    export_timeout_s: float = Field(default=5.0, gt=0, le=60, description="how long one export may take")
    interval_s: float = Field(default=2.0, gt=0, le=300, description="how often finished work is looked for")
    service_name: str = Field(
        default="agentd", min_length=1, max_length=100, description="the spans' service.name resource attribute"
    )


class RetentionSection(Section):
    """[retention]: how long agentd keeps what piles up, in days; 0 keeps that kind forever. The sensor
    service applies it every interval_s (first a minute after it starts); `agentd prune` applies it now.
    Nothing of a task that is not finished is ever removed (docs/operate.md, "Retention")."""

    evidence_days: int = Field(default=90, ge=0, le=36_500, description="attempt evidence of finished tasks")
    sensor_logs_days: int = Field(default=7, ge=0, le=36_500, description="a sensor's last stdout/stderr logs")
    events_days: int = Field(default=365, ge=0, le=36_500, description="the oldest events, as a checkpointed prefix")
    tasks_days: int = Field(default=365, ge=0, le=36_500, description="finished tasks, their events and evidence gone")
    interval_s: int = Field(default=3600, ge=60, le=7 * 86_400, description="how often the sensor service applies it")


class FleetSection(Section):
    """[fleet]: this agent takes work from a fleet's queue on PostgreSQL (docs/fleet.md)."""

    dsn_file: Path | None = Field(
        default=None, description="a file (0600) holding the PostgreSQL connection string; none: no fleet intake"
    )
    labels: list[Identifier] = Field(
        default=[], description="what this agent offers: it claims only tasks whose labels it all has"
    )
    lease_s: float = Field(
        default=60.0, ge=5, le=DAY_S, description="how long a claim holds without renewal (the server's clock)"
    )
    poll_s: float = Field(default=5.0, gt=0, le=3600, description="how often intake looks for work when idle")
    max_local: int = Field(
        default=1, ge=1, le=1000, description="fleet tasks held here at once, waiting or running (each leased)"
    )


class WebSection(Section):
    """[web]: `agentd web`, the HTTP API and operator console (docs/web.md). Its own port: `agentd install`
    gives each agent the first free one from 9578 up (the metrics pairs start at 9478)."""

    enabled: bool = Field(default=True, description="`agentd run` starts the console beside the two services")
    listen: ListenAddress = Field(
        default="127.0.0.1:9578",
        description="HOST:PORT of the API and console (loopback; see beyond_loopback)",
    )
    beyond_loopback: bool = Field(
        default=False,
        description="true: listen may name a non-loopback address (a TLS proxy elsewhere is in front; "
        "otherwise tokens cross the network in clear)",
    )
    host_names: list[HostName] = Field(
        default=[],
        max_length=100,
        description="DNS names the console answers to besides IP addresses and localhost (the Host header a "
        "proxy in front passes on); any other name is refused, as a DNS-rebinding page would send",
    )
    session_hours: float = Field(default=12.0, gt=0, le=24 * 30, description="how long a console login lasts")
    login_failures: int = Field(
        default=5,
        ge=1,
        le=1000,
        description="failed logins one client (a local user, or an address) may make per login_window_s",
    )
    login_window_s: float = Field(default=60.0, gt=0, le=86_400, description="then it waits out the window (429)")
    login_failures_total: int = Field(
        default=50,
        ge=1,
        le=100_000,
        description="failed logins of all clients together per login_window_s; past it, every client waits (429)",
    )
    max_streams: int = Field(default=16, ge=1, le=1000, description="live event streams open at once (429 past it)")
    max_streams_per_token: int = Field(
        default=4, ge=1, le=1000, description="live event streams one token (or its sessions) may hold open at once"
    )
    approval_handler: Identifier | None = Field(
        default=None, description="a webhook [[message_handlers]] each approval request is handed off to, signed"
    )
    approval_secret_key: str = Field(
        default="AGENTD_APPROVAL_SECRET",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the KEY in that handler's env_file whose value signs each hand-off (HMAC-SHA256)",
    )


class ChaosSection(Section):
    """Fault injection for the crash tests and the chaos suite: SIGKILL ourselves at a point."""

    crash_at: Literal["after_claim", "after_outcome_commit"] | None = Field(
        default=None, description="tests only: the dispatcher SIGKILLs itself at this point"
    )


class Settings(Section):
    """The identity TOML's shape, checked once the environment's overrides (config/environment.py) are laid over it."""

    agent: AgentSection
    constitution: ConstitutionSection
    wallets: list[WalletSection] = []
    paths: PathsSection
    dispatch: DispatchSection = DispatchSection()
    sensors: SensorsSection = SensorsSection()
    budget: BudgetSection = BudgetSection()
    policy: PolicySection = PolicySection()
    metrics: MetricsSection = MetricsSection()
    retention: RetentionSection = RetentionSection()
    fleet: FleetSection = FleetSection()
    web: WebSection = WebSection()
    telemetry: TelemetrySection = TelemetrySection()
    gateway: GatewaySection = GatewaySection()
    archive: ArchiveSection = ArchiveSection()
    backup: BackupSection = BackupSection()
    chaos: ChaosSection = ChaosSection()
    adapters: list[AdapterConfig] = Field(min_length=1)
    profiles: list[SubagentProfile] = Field(min_length=1)
    task_types: list[TaskTypeSpec] = Field(min_length=1)
    payload_schemas: dict[str, Path] = {}
    workflows: list[WorkflowDefinition] = []
    schedules: list[ScheduleSpec] = []
    message_handlers: list[MessageHandler] = []

    @model_validator(mode="after")
    def _web_fits(self) -> Settings:
        """The console's port is none of the metrics ports; its approval handler is a webhook that exists."""
        metrics = (self.metrics.dispatch_listen, self.metrics.sensors_listen)
        if self.web.listen in metrics and not self.web.listen.endswith(":0"):
            raise ValueError(f"web.listen: expected a port of its own, found {quoted(self.web.listen)}, a metrics port")
        wanted = self.web.approval_handler
        if wanted is not None:
            handlers = {h.handler_id: h for h in self.message_handlers}
            kind = handlers[wanted].kind if wanted in handlers else None
            if kind != "webhook":
                found = f"a {kind} handler" if kind else "no such handler"
                raise ValueError(f"web.approval_handler: expected a webhook [[message_handlers]] id, found {found}")
            if getattr(handlers[wanted], "env_file", None) is None:  # its secret signs each hand-off
                raise ValueError(f"web.approval_handler: {wanted!r} needs an env_file holding the signing secret")
        return self


def section_model(section: str) -> type[BaseModel] | None:
    """The model of a [section] table (dispatch, paths, …); None for a list or a dict (adapters, …)."""
    field = Settings.model_fields.get(section)
    annotation = field.annotation if field else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def needed_keys(loc: tuple[int | str, ...]) -> str | None:
    """What a missing table at `loc` needs, said in one go so `config check` names every required key
    at once: `a table with agent_id, internal_name, display_name`, or for a list of tables
    `at least one [[profiles]] table with …`. None when `loc` is not a table."""
    annotation = _annotation_at(loc)
    if annotation is None:
        return None
    many = get_origin(annotation) is list
    element = _unwrap(get_args(annotation)[0]) if many else annotation
    members = [_unwrap(m) for m in get_args(element)] if get_origin(element) in (Union, types.UnionType) else [element]
    if not all(isinstance(m, type) and issubclass(m, BaseModel) for m in members):
        return None
    if len(members) == 1:
        keys = ", ".join(_required_keys(members[0]))
    else:  # a union by `kind`: the kind decides the rest
        kinds = _kinds(members)
        common = [k for k in _required_keys(members[0]) if k != "kind" and all(k in m.model_fields for m in members)]
        keys = (
            ", ".join([*common, f"kind (one of {kinds})"]) + " and the keys its kind needs (`agentd config reference`)"
        )
    table = f"at least one [[{loc[-1]}]] table" if many else "a table"
    return f"{table} with {keys}"


def needed_kind(loc: tuple[int | str, ...]) -> str | None:
    """For an entry of a union by `kind` (an adapter, a message handler) that has none: the kinds."""
    union = _annotation_at(loc)
    members = [_unwrap(m) for m in get_args(union)] if get_origin(union) in (Union, types.UnionType) else []
    return f"one of {_kinds(members)} (it decides the other keys)" if members else None


def _kinds(members: list[Any]) -> str:
    return ", ".join(repr(get_args(m.model_fields["kind"].annotation)[0]) for m in members)


def _required_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, info in model.model_fields.items():
        if not info.is_required():
            continue
        nested = _unwrap(info.annotation)
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            keys += _required_keys(nested, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def _annotation_at(loc: tuple[int | str, ...]) -> Any:
    """The type the identity TOML holds at `loc` (('profiles', 0, 'context_policy') → ContextPolicy)."""
    annotation: Any = Settings
    for part in loc:
        annotation = _unwrap(annotation)
        if isinstance(part, int):
            if get_origin(annotation) is not list:
                return None
            annotation = get_args(annotation)[0]
            continue
        members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
        fields = [
            m.model_fields[part]
            for m in members
            if isinstance(m, type) and issubclass(m, BaseModel) and part in m.model_fields
        ]
        if not fields:
            return None
        annotation = fields[0].annotation
    return _unwrap(annotation)


def _unwrap(annotation: Any) -> Any:
    """`X | None` → X, `Annotated[X, …]` → X."""
    while True:
        if get_origin(annotation) is Annotated:
            annotation = get_args(annotation)[0]
            continue
        if get_origin(annotation) in (Union, types.UnionType):
            members = [a for a in get_args(annotation) if a is not type(None)]
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation
