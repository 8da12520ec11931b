"""The agent's configuration: the identity TOML parsed into one frozen Config, its settings, the
sensors' and skills' manifests, payload schemas, the environment a service passes on, the budget's
rules and the configuration reference.

May import: records.

The identity TOML (docs/design.md, "Configuration") parsed into one frozen Config: the bottom of agentd's imports.

Environment overrides (`AGENTD_<SECTION>__<KEY>`) are read by config/environment.py and nowhere else,
and laid over the file here. This module parses and checks each value on its own;
agentd/work/validation.py checks the references between sections and is where the whole config is
loaded (`load_config`). Every problem is reported as
`FILE: key.path: expected…, found…`.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentd import frozen_value
from agentd.config.archive import ArchiveSection
from agentd.config.backup import BackupSection
from agentd.config.environment import environment_overrides, overlay
from agentd.config.gateway import GatewaySection
from agentd.config.parsed import UnusableFile, nul_problems, read_toml
from agentd.config.sensors import Sensor, load_sensors
from agentd.config.settings import (
    ENV_PREFIX,
    AgentSection,
    BudgetSection,
    ChaosSection,
    DispatchSection,
    FleetSection,
    MetricsSection,
    PathsSection,
    PolicySection,
    RetentionSection,
    SensorsSection,
    Settings,
    TelemetrySection,
    WebSection,
    needed_keys,
    needed_kind,
    section_model,
)
from agentd.config.skills import Skill, load_skills
from agentd.config.unhooking import hook_problems
from agentd.edge import quoted, read_bounded, utf8_text
from agentd.errors import ConfigError, Problem
from agentd.hashing import sha256_hex
from agentd.records import (
    AdapterConfig,
    AgentConstitution,
    AgentIdentity,
    ClaudeCodeAdapterConfig,
    ScheduleSpec,
    SubagentProfile,
    TaskIntent,
    TaskTypeSpec,
    WalletIdentity,
    WorkflowDefinition,
)
from agentd.records.messages import MessageHandler
from agentd.schema_check import schema_problem

ANY_OBJECT_SCHEMA_ID = "agent-runtime/payload.any-object/v1"
BUILTIN_PAYLOAD_SCHEMAS: dict[str, dict[str, Any]] = {ANY_OBJECT_SCHEMA_ID: {"type": "object"}}
# internal_name is load-bearing (seed §1): nothing may override it, agent_id must match it.
PROTECTED_ENV = ("AGENTD_AGENT", "AGENTD_AGENT__INTERNAL_NAME", "AGENTD_AGENT__AGENT_ID")


@frozen_value
class Config:
    """Everything agentd knows about one agent, validated and cross-checked."""

    path: Path
    agent: AgentSection
    constitution: AgentConstitution
    wallets: tuple[WalletIdentity, ...]
    paths: PathsSection
    dispatch: DispatchSection
    sensors: SensorsSection
    metrics: MetricsSection
    chaos: ChaosSection
    retention: RetentionSection
    adapters: Mapping[str, AdapterConfig]
    profiles: Mapping[str, SubagentProfile]
    task_types: Mapping[str, TaskTypeSpec]
    payload_schemas: Mapping[str, dict[str, Any]]
    workflows: Mapping[str, WorkflowDefinition]
    schedules: tuple[ScheduleSpec, ...]
    skills: Mapping[str, Skill]
    sensor_definitions: Mapping[str, Sensor]
    soul_text: str  # the constitution as hashed at load: bundles use exactly this text
    purpose_text: str
    message_handlers: Mapping[str, MessageHandler] = field(default_factory=dict)  # [[message_handlers]]
    budget: BudgetSection = field(default_factory=BudgetSection)
    policy: PolicySection = field(default_factory=PolicySection)  # [policy]: docs/policy.md
    fleet: FleetSection = field(default_factory=FleetSection)
    web: WebSection = field(default_factory=WebSection)  # [web]: `agentd web` (docs/web.md)
    telemetry: TelemetrySection = field(default_factory=TelemetrySection)  # [telemetry] (docs/telemetry.md)
    gateway: GatewaySection = field(default_factory=GatewaySection)  # [gateway] (docs/gateway.md)
    archive: ArchiveSection = field(default_factory=ArchiveSection)  # [archive] (docs/backup-and-archive.md)
    backup: BackupSection = field(default_factory=BackupSection)  # [backup] (docs/backup-and-archive.md)
    # Where each payload schema was read from: kept so the cached view's key holds every file the load
    # read (agentd/cli/fast/view.py `named_paths` finds each path a Config holds).
    payload_schema_files: Mapping[str, Path] = field(default_factory=dict)

    @property
    def identity(self) -> AgentIdentity:
        return AgentIdentity(
            **self.agent.model_dump(),
            soul_ref=self.constitution.soul_path,
            purpose_ref=self.constitution.purpose_path,
        )

    @property
    def db_path(self) -> Path:
        return self.paths.state_dir / "agentd.db"


def parse_config(path: Path) -> tuple[Config, list[Problem]]:
    """Read and validate the identity TOML into a Config, with the problems found in what it names
    (missing files, bad schemas); ConfigError when no Config can be built at all."""
    path = path.absolute()
    source = str(path)
    try:
        raw = read_toml(path)
    except UnusableFile as exc:
        raise ConfigError([Problem(source, "", str(exc))]) from None
    overrides, problems = environment_overrides(os.environ)
    problems = _protected_env_problems() + environment_problems() + problems
    if problems:  # anything checked after an identity override would be about the wrong agent
        raise ConfigError(problems)
    problems = _duplicates(source, raw) + nul_problems(source, raw)
    if problems:
        raise ConfigError(problems)
    _resolve_relative_paths(raw, path.parent)  # the file's; an override's relative path is the working dir's
    try:
        settings = Settings(**overlay(raw, overrides))
    except ValidationError as exc:
        raise ConfigError(problems + _validation_problems(exc, raw, source)) from None
    try:
        config, found = _assemble(path, settings)
    except ValidationError as exc:  # a record stricter than the section it is built from: still the file's problem
        raise ConfigError(_validation_problems(exc, raw, source)) from None
    return config, problems + found


def _protected_env_problems() -> list[Problem]:
    return [
        Problem(name, "", "agent.internal_name and agent_id are load-bearing and cannot be overridden")
        for name in sorted(os.environ)
        if name.upper() in PROTECTED_ENV  # names are read case-insensitively: so is the refusal
    ]


def environment_problems() -> list[Problem]:
    """Every AGENTD_<SECTION>__<KEY> variable must name a key of a [section] table: a misspelt one
    would otherwise be ignored, and the operator would believe it applied."""
    problems = []
    for name in sorted(os.environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or "__" not in upper or upper in PROTECTED_ENV:
            continue
        section, _, key = upper.removeprefix(ENV_PREFIX).lower().partition("__")
        model = section_model(section)
        if model is None:
            found = f"no [{section}] table can be set from the environment"
            problems.append(Problem(name, "", f"{found}; expected AGENTD_<SECTION>__<KEY> for one of {ENV_SECTIONS}"))
        elif key not in model.model_fields:
            keys = ", ".join(model.model_fields)
            problems.append(Problem(name, "", f"[{section}] has no key {key!r}; expected one of {keys}"))
    return problems


ENV_SECTIONS = ", ".join(name for name in Settings.model_fields if section_model(name) is not None)


def _resolve_relative_paths(raw: dict[str, Any], base: Path) -> None:
    """Relative paths in the file mean: relative to the file (so --config works from anywhere)."""

    def fix(table: Any, key: str, *, only_path_like: bool = False) -> None:
        if not isinstance(table, dict) or not isinstance(table.get(key), str):
            return
        value = table[key]
        if only_path_like and "/" not in value:
            return  # a bare command name is looked up on PATH
        if not Path(value).is_absolute():
            table[key] = os.path.normpath(base / value)

    for key in ("soul_path", "purpose_path"):
        fix(raw.get("constitution"), key)
    fix(raw.get("fleet"), "dsn_file")
    fix(raw.get("archive"), "credentials_file")
    fix(raw.get("backup"), "dest")
    for key in ("state_dir", "skills_dir", "sensors_dir", "workspace", "run_dir"):
        fix(raw.get("paths"), key)
    for handler in raw.get("message_handlers") or []:
        fix(handler, "path")
        fix(handler, "env_file")
        argv = handler.get("argv") if isinstance(handler, dict) else None
        if isinstance(argv, list) and argv:  # argv[0] like an adapter's command: a path, or a name on PATH
            head = {"command": argv[0]}
            fix(head, "command", only_path_like=True)
            argv[0] = head["command"]
    for adapter in raw.get("adapters") or []:
        fix(adapter, "env_file")
        fix(adapter, "working_dir")
        fix(adapter, "command", only_path_like=True)
    schemas = raw.get("payload_schemas")
    if isinstance(schemas, dict):
        for key in list(schemas):
            fix(schemas, key)


def _validation_problems(exc: ValidationError, raw: dict[str, Any], source: str) -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = _format_loc(err["loc"], raw)
        env_name = _env_name(err["loc"])
        where = env_name if env_name in os.environ else source
        if err["type"] == "union_tag_not_found":  # an entry without its `kind`
            problems.append(Problem(where, f"{loc}.kind", f"required, but missing: {needed_kind(err['loc'])}"))
            continue
        if err["type"] == "union_tag_invalid":
            loc = f"{loc}.{err['ctx']['discriminator'].strip(chr(39))}"
        problems.append(Problem(where, loc, _describe(err)))
    return problems


def _format_loc(loc: tuple[int | str, ...], raw: Any) -> str:
    """('adapters', 1, 'script', 'timeout_ms') → 'adapters[1].timeout_ms' (the union tag dropped)."""
    text, node = "", raw
    for part in loc:
        if isinstance(node, dict) and node.get("kind") == part and part not in node:
            continue  # pydantic names the discriminated-union member; the file does not
        if isinstance(part, int):
            text += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
        else:
            text += f".{part}" if text else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return text


def _env_name(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc[:2]]
    return ENV_PREFIX + "__".join(parts).upper()


def _describe(err: Any) -> str:
    kind, found = err["type"], err.get("input")
    if kind == "missing":  # a missing table says all it needs, so one check names every required key
        needed = needed_keys(err["loc"])
        return f"required, but missing: {needed}" if needed else "required, but missing"
    if kind == "extra_forbidden":
        return "unknown key (check its spelling against `agentd config reference`)"
    if kind == "union_tag_invalid":
        return f"expected one of {err['ctx']['expected_tags']}, found {err['ctx']['tag']!r}"
    message = f"{err['msg'][0].lower()}{err['msg'][1:]}"
    if kind == "value_error" and "found" in message:  # our validator already says what it found
        return message.removeprefix("value error, ")
    return f"{err['msg'][0].lower()}{err['msg'][1:]}, found {quoted(found)}"


def _folder_problems(source: str, paths: PathsSection) -> list[Problem]:
    """Each [paths] entry is a folder, or nothing yet (`agentd init` makes the state dir, the workspace
    and the run dir; skills_dir must be there): a file, a device or a pipe there is named as such."""
    problems = []
    for key in ("state_dir", "workspace", "run_dir", "skills_dir", "sensors_dir"):
        folder = getattr(paths, key)
        try:
            mode = folder.stat().st_mode if folder is not None else stat.S_IFDIR
        except FileNotFoundError:
            if key == "skills_dir":
                problems.append(Problem(source, f"paths.{key}", f"expected a folder, found nothing at {folder}"))
            continue
        except PermissionError:
            continue  # cannot look (a parent it may not search): the command that needs it says so
        except OSError as exc:  # a name too long, a parent that is a file, a loop of links: no folder ever
            problems.append(Problem(source, f"paths.{key}", f"cannot be a folder: {folder}: {exc.strerror}"))
            continue
        if not stat.S_ISDIR(mode):
            found = "a file" if stat.S_ISREG(mode) else "a device, pipe or socket"
            problems.append(Problem(source, f"paths.{key}", f"expected a folder, found {found} at {folder}"))
    return problems


def _assemble(path: Path, settings: Settings) -> tuple[Config, list[Problem]]:
    source = str(path)
    problems: list[Problem] = []
    paths = PathsSection(**{k: Path(v).absolute() for k, v in settings.paths.model_dump().items() if v is not None})
    skills, skill_problems = load_skills(paths.skills_dir)
    problems += skill_problems
    sensors, sensor_problems = load_sensors(paths.sensors_dir, skills)
    problems += sensor_problems
    problems += _folder_problems(source, paths)
    constitution, texts, found = _constitution(source, settings)
    problems += found
    schemas, found = _payload_schemas(source, settings.payload_schemas)
    problems += found
    agent_id = settings.agent.agent_id
    wallets = tuple(WalletIdentity(**{**w.model_dump(), "agent_id": w.agent_id or agent_id}) for w in settings.wallets)
    config = Config(
        path=path,
        agent=settings.agent,
        constitution=constitution,
        wallets=wallets,
        paths=paths,
        dispatch=settings.dispatch,
        sensors=settings.sensors,
        metrics=settings.metrics,
        chaos=settings.chaos,
        retention=settings.retention,
        adapters={a.adapter_id: _attempt_capped(a, settings.budget.per_attempt_usd) for a in settings.adapters},
        profiles={p.profile_id: p for p in settings.profiles},
        task_types={t.task_type: t for t in settings.task_types},
        payload_schemas=schemas,
        payload_schema_files={key: Path(file).absolute() for key, file in settings.payload_schemas.items()},
        workflows=_with_builtin_workflows(settings),
        schedules=tuple(settings.schedules),
        message_handlers={h.handler_id: h for h in settings.message_handlers},
        budget=settings.budget,
        policy=settings.policy,
        fleet=settings.fleet,
        web=settings.web,
        telemetry=settings.telemetry,
        gateway=settings.gateway,
        archive=settings.archive,
        backup=settings.backup,
        skills=skills,
        sensor_definitions=sensors,
        soul_text=texts["soul_path"],
        purpose_text=texts["purpose_path"],
    )
    decisions = [settings.policy.default, *(r.decision for r in settings.policy.rules)]
    decisions += [r.decision for p in settings.profiles for r in p.tool_policy]
    problems += [Problem(source, where, what) for where, what in hook_problems(config.adapters, decisions)]
    return config, problems


def _attempt_capped(adapter: AdapterConfig, per_attempt_usd: float | None) -> AdapterConfig:
    """[budget] per_attempt_usd, given to the harnesses that take one (claude's --max-budget-usd):
    the lower of it and the adapter's own cap."""
    if per_attempt_usd is None or not isinstance(adapter, ClaudeCodeAdapterConfig):
        return adapter
    own = adapter.max_budget_usd
    return adapter.model_copy(update={"max_budget_usd": min(own, per_attempt_usd) if own else per_attempt_usd})


# The built-in goal-loop (seed 000 §10): plan → execute → verify; verify's signal decides.
GOAL_LOOP = WorkflowDefinition.model_validate(
    {
        "workflow_type": "goal-loop",
        "initial_state": "plan",
        "states": [
            {"state_id": "plan", "task_type": "plan", "transitions": [{"signal": "ok", "next_state": "execute"}]},
            {"state_id": "execute", "task_type": "execute", "transitions": [{"signal": "ok", "next_state": "verify"}]},
            {
                "state_id": "verify",
                "task_type": "verify",
                "transitions": [
                    {"signal": "continue", "next_state": "execute"},
                    {"signal": "revise_plan", "next_state": "plan"},
                ],
                "completion_signals": ["complete"],
            },
        ],
    }
)
BUILTIN_WORKFLOWS = (GOAL_LOOP,)


def missing_task_types(definition: WorkflowDefinition, task_types: set[str]) -> list[str]:
    return sorted({s.task_type for s in definition.states if s.task_type and s.task_type not in task_types})


def _with_builtin_workflows(settings: Settings) -> dict[str, WorkflowDefinition]:
    """The TOML's workflows, plus each built-in (goal-loop) the TOML does not define and whose
    task types it registers."""
    workflows = {w.workflow_type: w for w in settings.workflows}
    task_types = {t.task_type for t in settings.task_types}
    for builtin in BUILTIN_WORKFLOWS:
        if builtin.workflow_type not in workflows and not missing_task_types(builtin, task_types):
            workflows[builtin.workflow_type] = builtin
    return workflows


def _constitution(source: str, settings: Settings) -> tuple[AgentConstitution, dict[str, str], list[Problem]]:
    problems, hashes, texts = [], {}, {}
    for key in ("soul_path", "purpose_path"):
        file = Path(getattr(settings.constitution, key)).absolute()
        try:
            data = read_bounded(file)
        except OSError:
            data = b""
            problems.append(Problem(source, f"constitution.{key}", f"expected a file, found nothing at {file}"))
        except UnusableFile as exc:
            data = b""
            problems.append(Problem(source, f"constitution.{key}", f"{file}: {exc}"))
        hashes[key], texts[key] = sha256_hex(data) if data else "", data.decode("utf-8", errors="replace")
    constitution = AgentConstitution(
        agent_id=settings.agent.agent_id,
        soul_path=str(Path(settings.constitution.soul_path).absolute()),
        purpose_path=str(Path(settings.constitution.purpose_path).absolute()),
        soul_hash=hashes["soul_path"],
        purpose_hash=hashes["purpose_path"],
        version=settings.constitution.version,
        revised_at=settings.constitution.revised_at,
    )
    return constitution, texts, problems


def _payload_schemas(source: str, declared: Mapping[str, Path]) -> tuple[dict[str, dict[str, Any]], list[Problem]]:
    schemas: dict[str, dict[str, Any]] = dict(BUILTIN_PAYLOAD_SCHEMAS)
    problems: list[Problem] = []
    for schema_id, file in declared.items():
        key = f"payload_schemas.{schema_id!r}" if "." in schema_id else f"payload_schemas.{schema_id}"
        try:
            schema = json.loads(utf8_text(read_bounded(Path(file))))
            invalid = schema_problem(schema)
        except RecursionError:
            problems.append(Problem(source, key, f"{file} is nested too deeply to check as a JSON Schema"))
        except FileNotFoundError:
            problems.append(Problem(source, key, f"expected a JSON Schema file, found nothing at {file}"))
        except OSError as exc:
            problems.append(Problem(source, key, f"expected a JSON Schema file, cannot read {file}: {exc.strerror}"))
        except json.JSONDecodeError as exc:
            problems.append(Problem(source, key, f"{file} is not JSON: {exc}"))
        except UnusableFile as exc:
            problems.append(Problem(source, key, f"{file}: {exc}"))
        else:
            if invalid is None:
                schemas[schema_id] = schema
            else:
                problems.append(Problem(source, key, f"{file} is not a valid JSON Schema: {invalid}"))
    return schemas, problems


ID_KEYS = {
    "adapters": "adapter_id",
    "profiles": "profile_id",
    "task_types": "task_type",
    "workflows": "workflow_type",
    "schedules": "schedule_id",
    "message_handlers": "handler_id",
}


def _duplicates(source: str, raw: dict[str, Any]) -> list[Problem]:
    """Two entries of one table with the same id; checked on the raw file so it is always said."""
    problems = []
    for table, id_key in ID_KEYS.items():
        seen: dict[Any, int] = {}
        entries = raw.get(table)
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            ident = entry.get(id_key) if isinstance(entry, dict) else None
            if not isinstance(ident, str):
                continue  # missing or not text: validation says what it expected
            if ident in seen:
                problems.append(
                    Problem(
                        source, f"{table}[{index}].{id_key}", f"duplicate id {ident!r} (already {table}[{seen[ident]}])"
                    )
                )
            seen.setdefault(ident, index)
    return problems


def task_intent_from_schedule(spec: ScheduleSpec) -> TaskIntent:
    """The TaskIntent a schedule enqueues; raises ValidationError if the table is malformed."""
    return TaskIntent.model_validate({"source": f"schedule:{spec.schedule_id}", "payload": {}, **spec.task})
