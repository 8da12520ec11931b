"""Loading the whole identity TOML: parsed (agentd/config/__init__.py), then every reference between
sections checked: every id one section names exists in another. Seed 000 §1a (wallet/on-chain
consistency), §3 (every profile field enforced), §10 (workflow states), §13 (task types).

Above config, intake and workflows in the import graph: it checks with their rules.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from pathlib import Path

from pydantic import ValidationError

from agentd.config import Config, parse_config, task_intent_from_schedule
from agentd.config.addresses import exposure_problem
from agentd.config.environment import read_dsn_file, secret_file_problems
from agentd.edge import UnusableFile, quoted
from agentd.errors import ConfigError, InputError, Problem
from agentd.records import (
    AdapterConfig,
    HarnessAdapterConfig,
    HermesAgentAdapterConfig,
    SubagentProfile,
    SubprocessAdapterConfig,
    WorkflowState,
)
from agentd.records.messages import CommandHandler, SpoolHandler, WebhookHandler
from agentd.work.intake import admit_task
from agentd.work.workflows import state_of

# Which adapter kinds a profile style can drive; script and ollama serve any style.
STYLE_KINDS = {
    "claude-like": {"claude-code", "script", "ollama-generate"},
    "codex-like": {"codex", "script", "ollama-generate"},
    "hermes-like": {"hermes-agent", "script", "ollama-generate"},
}


def load_config(path: Path) -> Config:
    """Read, validate and cross-check the identity TOML; ConfigError lists every problem found."""
    config, problems = parse_config(path)
    problems += check_references(config)
    if problems:
        raise ConfigError(problems)
    return config


def check_references(config: Config) -> list[Problem]:
    checks = (
        _agent,
        _adapters,
        _profiles,
        _task_types,
        _sensors,
        _workflows,
        _schedules,
        _message_handlers,
        _budget,
        _boundary,
        _fleet,
        _archive,
        _web,
    )
    return [problem for check in checks for problem in check(config)]


def _agent(config: Config) -> list[Problem]:
    src, agent, problems = str(config.path), config.agent, []
    if agent.agent_id != agent.internal_name:
        problems.append(
            Problem(
                src,
                "agent.agent_id",
                f"expected {agent.internal_name!r} (the internal_name), found {quoted(agent.agent_id)}",
            )
        )
    contract = agent.onchain_identity.contract if agent.onchain_identity else None
    for index, wallet in enumerate(config.wallets):
        if wallet.agent_id != agent.agent_id:
            problems.append(
                Problem(
                    src, f"wallets[{index}].agent_id", f"expected {agent.agent_id!r}, found {quoted(wallet.agent_id)}"
                )
            )
        linked = wallet.onchain_identity_contract
        if linked is not None and linked != contract:
            problems.append(
                Problem(
                    src,
                    f"wallets[{index}].onchain_identity_contract",
                    f"must match agent.onchain_identity.contract ({contract!r}), found {quoted(linked)}",
                )
            )
    if agent.external_name and config.wallets:
        addresses = {w.address for w in config.wallets}
        if agent.external_name.wallet_ref not in addresses:
            problems.append(
                Problem(
                    src,
                    "agent.external_name.wallet_ref",
                    f"expected a wallet address {sorted(addresses)}, found {quoted(agent.external_name.wallet_ref)}",
                )
            )
    return problems


def _adapters(config: Config) -> list[Problem]:
    src, problems = str(config.path), []
    for index, adapter in enumerate(config.adapters.values()):
        key = f"adapters[{index}]"
        if isinstance(adapter, SubprocessAdapterConfig):
            command = Path(adapter.command)
            if "/" in adapter.command and not os.access(command, os.X_OK):
                problems.append(Problem(src, f"{key}.command", f"expected an executable file, found none at {command}"))
            if adapter.env_file is not None:
                problems += secret_file_problems(src, f"{key}.env_file", Path(adapter.env_file))
            if adapter.working_dir is not None and not os.path.isdir(adapter.working_dir):
                problems.append(
                    Problem(src, f"{key}.working_dir", f"expected a folder, found none at {adapter.working_dir}")
                )
        if isinstance(adapter, HarnessAdapterConfig):
            problems += _posture(src, key, adapter)
    return problems


# Flags that drop a harness's permission checks: only with the trusted-vm posture declared.
BYPASS_FLAGS = (
    "--dangerously-skip-permissions",
    "bypassPermissions",
    "--dangerously-bypass-approvals-and-sandbox",
    "danger-full-access",
    "--yolo",
)


def _posture(src: str, key: str, adapter: HarnessAdapterConfig) -> list[Problem]:
    problems = []
    trusted = adapter.autonomy is not None and adapter.autonomy.profile == "trusted-vm"
    if adapter.sandbox == "danger-full-access" and not trusted:
        problems.append(
            Problem(
                src,
                f"{key}.sandbox",
                'danger-full-access needs autonomy.profile = "trusted-vm" declared on this adapter',
            )
        )
    args = [*(adapter.extra_args or []), *((adapter.autonomy.required_args or []) if adapter.autonomy else [])]
    for arg in args:
        if any(flag in arg for flag in BYPASS_FLAGS) and not trusted:
            problems.append(
                Problem(
                    src,
                    f"{key}.extra_args",
                    f"{arg!r} bypasses the harness's permission checks; "
                    'declare autonomy.profile = "trusted-vm" instead of passing it',
                )
            )
    problems += _settings_files(src, key, adapter)
    if isinstance(adapter, HermesAgentAdapterConfig) and adapter.sandbox is not None:
        problems.append(
            Problem(
                src,
                f"{key}.sandbox",
                "hermes -z has no sandbox setting agentd could enforce; "
                "remove it (run hermes adapters in a VM you trust, or not at all)",
            )
        )
    return problems


def _settings_files(src: str, key: str, adapter: HarnessAdapterConfig) -> list[Problem]:
    """autonomy.required_settings_files: each an absolute path to a file that exists (docs/configuration.md)."""
    return [
        Problem(
            src,
            f"{key}.autonomy.required_settings_files[{i}]",
            f"expected an existing file (an absolute path), found {quoted(name)}",
        )
        for i, name in missing_settings_files(adapter)
    ]


def missing_settings_files(adapter: AdapterConfig) -> list[tuple[int, str]]:
    """(place, name) of each of the adapter's autonomy.required_settings_files that is not an absolute path
    to a file that exists: judged when the config loads and again before each attempt (files can go)."""
    autonomy = getattr(adapter, "autonomy", None)
    files = getattr(autonomy, "required_settings_files", None) or []
    return [(i, name) for i, name in enumerate(files) if not os.path.isabs(name) or not os.path.isfile(name)]


def _web(config: Config) -> list[Problem]:
    problem = exposure_problem(config.web.listen, config.web.beyond_loopback)
    return [] if problem is None else [Problem(str(config.path), "web.listen", problem)]


def _fleet(config: Config) -> list[Problem]:
    """[fleet] dsn_file: a file of its own that only its owner can read, and psycopg to use it."""
    path = config.fleet.dsn_file
    if path is None:
        return []
    from agentd.store import FleetUnavailable
    from agentd.store.fleet_connect import installed  # psycopg: only an agent with a fleet

    problems = secret_file_problems(str(config.path), "fleet.dsn_file", path, env_pairs=False)
    if not installed():
        problems.append(
            Problem(str(config.path), "fleet.dsn_file", "the fleet needs psycopg: pip install 'agentd[fleet]'")
        )
    elif not problems:  # a string libpq cannot read would fail every connect, each time saying so
        from agentd.store.fleet_connect import dsn_parts

        try:
            dsn_parts(read_dsn_file(path))
        except (UnusableFile, FleetUnavailable) as exc:
            problems.append(Problem(str(config.path), "fleet.dsn_file", f"{path}: {exc}"))
    return problems


def _archive(config: Config) -> list[Problem]:
    """[archive] credentials_file: a file only its owner can read, with the key pair; and boto3 to use it."""
    path = config.archive.credentials_file
    if not config.archive.enabled or path is None:
        return []
    import importlib.util

    from agentd.config.environment import read_archive_credentials as read_credentials

    problems = []
    try:
        read_credentials(path)
    except ConfigError as exc:
        problems += [Problem(str(config.path), "archive.credentials_file", p.message) for p in exc.problems]
    except OSError as exc:
        problems.append(Problem(str(config.path), "archive.credentials_file", f"cannot read {path}: {exc.strerror}"))
    if importlib.util.find_spec("boto3") is None:
        problems.append(
            Problem(str(config.path), "archive.bucket", "the archive needs boto3: pip install 'agentd[archive]'")
        )
    return problems


def _profiles(config: Config) -> list[Problem]:
    src, problems = str(config.path), []
    for index, profile in enumerate(config.profiles.values()):
        problems += _profile(src, f"profiles[{index}]", profile, config)
    problems += _refs(
        src, [("dispatch.default_profile_id", "profile", config.dispatch.default_profile_id, config.profiles)]
    )
    return problems


def _profile(src: str, key: str, profile: SubagentProfile, config: Config) -> list[Problem]:
    adapter = config.adapters.get(profile.default_adapter_id)
    problems = _refs(src, [(f"{key}.default_adapter_id", "adapter", profile.default_adapter_id, config.adapters)])
    if adapter is not None and adapter.kind not in STYLE_KINDS[profile.style]:
        found = f"{profile.style} cannot drive a {adapter.kind} adapter ({adapter.adapter_id})"
        problems.append(Problem(src, f"{key}.style", found))
    return problems + _refs(src, _skill_refs(f"{key}.skill_ids", profile.skill_ids, config))


def _task_types(config: Config) -> list[Problem]:
    src, problems = str(config.path), []
    for index, spec in enumerate(config.task_types.values()):
        key = f"task_types[{index}]"
        problems += _refs(
            src,
            [
                (f"{key}.payload_schema_id", "payload schema", spec.payload_schema_id, config.payload_schemas),
                (f"{key}.default_profile_id", "profile", spec.default_profile_id, config.profiles),
                (f"{key}.default_adapter_id", "adapter", spec.default_adapter_id, config.adapters),
                *_skill_refs(f"{key}.allowed_skill_ids", spec.allowed_skill_ids, config),
            ],
        )
        if spec.default_profile_id is None and config.dispatch.default_profile_id is None:
            needed = "required: no profile would run this task type (or set dispatch.default_profile_id)"
            problems.append(Problem(src, f"{key}.default_profile_id", needed))
    return problems


def _sensors(config: Config) -> list[Problem]:
    """The profiles and adapters a sensor's proposals may name must exist (its sensor.toml's keys)."""
    problems = []
    for sensor in config.sensor_definitions.values():
        manifest = sensor.manifest
        profiles: list[Reference] = [
            (f"may_request_profiles[{i}]", "profile", found, config.profiles)
            for i, found in enumerate(manifest.may_request_profiles)
        ]
        adapters: list[Reference] = [
            (f"may_request_adapters[{i}]", "adapter", found, config.adapters)
            for i, found in enumerate(manifest.may_request_adapters)
        ]
        problems += _refs(str(sensor.directory / "sensor.toml"), profiles + adapters)
    return problems


Reference = tuple[str, str, str | None, Collection[str]]  # key path, what it names, the id, the known ids


def _refs(src: str, references: list[Reference]) -> list[Problem]:
    """Every id a section names must be one another section declares (None: nothing named)."""
    return [
        _unknown(src, key, noun, found, known)
        for key, noun, found, known in references
        if found is not None and found not in known
    ]


def _skill_refs(key: str, skill_ids: list[str] | None, config: Config) -> list[Reference]:
    return [(f"{key}[{i}]", "skill", skill_id, config.skills) for i, skill_id in enumerate(skill_ids or ())]


def _workflows(config: Config) -> list[Problem]:
    src, problems = str(config.path), []
    for index, definition in enumerate(config.workflows.values()):
        key = f"workflows[{index}]"
        state_ids = [s.state_id for s in definition.states]
        for dup in sorted({s for s in state_ids if state_ids.count(s) > 1}):
            problems.append(Problem(src, f"{key}.states", f"state {dup!r} is declared twice"))
        if definition.initial_state not in state_ids:
            problems.append(_unknown(src, f"{key}.initial_state", "state", definition.initial_state, state_ids))
        for i, state in enumerate(definition.states):
            problems += _state(src, f"{key}.states[{i}]", state, state_ids, config)
    return problems


def _state(src: str, key: str, state: WorkflowState, state_ids: list[str], config: Config) -> list[Problem]:
    problems = _refs(
        src,
        [
            (f"{key}.task_type", "task type", state.task_type, config.task_types),
            (f"{key}.default_profile_id", "profile", state.default_profile_id, config.profiles),
            *_skill_refs(f"{key}.default_skill_ids", state.default_skill_ids, config),
            *[
                (f"{key}.transitions[{j}].next_state", "state", t.next_state, state_ids)
                for j, t in enumerate(state.transitions or ())
            ],
        ],
    )
    if state.emits_task_intent is not None and state.emits_task_intent != (state.task_type is not None):
        found = f"is {state.emits_task_intent} but task_type is {state.task_type!r}"
        problems.append(Problem(src, f"{key}.emits_task_intent", found))
    overlap = {t.signal for t in state.transitions or ()} & set(state.completion_signals or ())
    if overlap:
        problems.append(Problem(src, key, f"signals {sorted(overlap)} are both transitions and completion signals"))
    return problems


def _budget(config: Config) -> list[Problem]:
    caps = config.budget.adapter_daily_usd
    return _refs(str(config.path), [(f"budget.adapter_daily_usd.{a}", "adapter", a, config.adapters) for a in caps])


def _message_handlers(config: Config) -> list[Problem]:
    src, problems = str(config.path), []
    for index, handler in enumerate(config.message_handlers.values()):
        problems += _message_handler(src, f"message_handlers[{index}]", handler)
    default = ("dispatch.default_message_handler", "message handler", config.dispatch.default_message_handler)
    return problems + _refs(src, [(*default, config.message_handlers)])


def _message_handler(src: str, key: str, handler: WebhookHandler | SpoolHandler | CommandHandler) -> list[Problem]:
    """What a handler names exists (secrets 0600), and a webhook's ${NAME} headers have an env_file."""
    problems = []
    if not isinstance(handler, SpoolHandler) and handler.env_file is not None:
        problems += secret_file_problems(src, f"{key}.env_file", Path(handler.env_file))
    if isinstance(handler, WebhookHandler) and handler.secret_names() and handler.env_file is None:
        names = ", ".join(handler.secret_names())
        problems.append(Problem(src, f"{key}.headers", f"name {names} but no env_file says what they are"))
    if isinstance(handler, CommandHandler) and "/" in handler.argv[0] and not os.access(handler.argv[0], os.X_OK):
        found = f"expected an executable file, found none at {handler.argv[0]}"
        problems.append(Problem(src, f"{key}.argv[0]", found))
    if isinstance(handler, SpoolHandler) and os.path.isdir(handler.path):
        found = f"expected a file to append to, found a folder at {handler.path}"
        problems.append(Problem(src, f"{key}.path", found))
    return problems


def _schedules(config: Config) -> list[Problem]:
    src, problems = str(config.path), []
    for index, spec in enumerate(config.schedules):
        key = f"schedules[{index}].task"
        try:
            intent = task_intent_from_schedule(spec)
            admit_task(intent, config, config.constitution.revised_at, trusted=False)
        except ValidationError as exc:
            for err in exc.errors():
                problems.append(Problem(src, f"{key}." + ".".join(str(p) for p in err["loc"]), err["msg"]))
        except InputError as exc:
            problems.append(Problem(src, key, str(exc)))
    return problems


def _unknown(src: str, key: str, noun: str, found: str, known: object) -> Problem:
    names = sorted(known) if not isinstance(known, list) else sorted(set(known))  # type: ignore[call-overload]
    return Problem(src, key, f"expected a known {noun} ({', '.join(names) or 'none declared'}), found {quoted(found)}")


def stranded_workflows(config: Config, live: list[tuple[int, str, str, str]]) -> list[Problem]:
    """Live workflows whose type or current state the config no longer has (seed 000 §10)."""
    problems = []
    for workflow_id, workflow_type, instance_key, state in live:
        definition = config.workflows.get(workflow_type)
        if definition is None:
            problems.append(
                Problem(
                    str(config.path),
                    "workflows",
                    f"live workflow {workflow_id} ({workflow_type} "
                    f"{instance_key!r}) needs workflow type {workflow_type!r}, which is gone",
                )
            )
        elif state_of(definition, state) is None:
            problems.append(
                Problem(
                    str(config.path),
                    "workflows",
                    f"live workflow {workflow_id} ({workflow_type} "
                    f"{instance_key!r}) is in state {state!r}, which {workflow_type} no longer has",
                )
            )
    return problems


def _boundary(config: Config) -> list[Problem]:
    """With a run user, what it must reach (the workspace, the run dirs) lies outside the state dir,
    which it must never reach (docs/install-and-deploy.md, "The boundary")."""
    src, paths = str(config.path), config.paths
    problems = [
        Problem(src, key, "expected an unprivileged user, found 'root'")
        for key, name in (("dispatch.run_as", config.dispatch.run_as), ("sensors.run_as", config.sensors.run_as))
        if name == "root"
    ]
    if config.dispatch.run_as is None:
        return problems
    if paths.run_dir is None:
        problems.append(
            Problem(src, "paths.run_dir", "required with dispatch.run_as: a folder outside state_dir for the run user")
        )
    for key, path in (("workspace", paths.workspace), ("run_dir", paths.run_dir)):
        if path is not None and (path == paths.state_dir or path.is_relative_to(paths.state_dir)):
            found = f"{path}, inside state_dir, which the run user ({config.dispatch.run_as}) must never reach"
            problems.append(Problem(src, f"paths.{key}", f"expected a folder outside state_dir, found {found}"))
    areas = [(key, area) for key, area in (("workspace", paths.workspace), ("run_dir", paths.run_dir)) if area]
    for key, path in operator_paths(config):
        for area_key, area in areas:
            if key != f"paths.{area_key}" and within(path, area):
                problems.append(
                    Problem(
                        src,
                        key,
                        f"expected a path outside paths.{area_key} ({area}), found {path}: the run user "
                        f"({config.dispatch.run_as}) may change what is there, and it is the operator's",
                    )
                )
    return problems


def operator_paths(config: Config) -> Iterator[tuple[str, Path]]:
    """What the operator decides and the run user must not be able to change (docs/install-and-deploy.md,
    "The boundary"): the state dir and the config with every file it names that agentd reads or runs
    as the services' user, and the run dir (the services make each attempt's folder in it)."""
    paths = config.paths
    yield "the identity TOML", config.path
    for key in ("state_dir", "skills_dir", "sensors_dir"):
        yield f"paths.{key}", getattr(paths, key)
    if paths.run_dir is not None:
        yield "paths.run_dir", paths.run_dir
    yield "constitution.soul_path", Path(config.constitution.soul_path)
    yield "constitution.purpose_path", Path(config.constitution.purpose_path)
    if config.fleet.dsn_file is not None:
        yield "fleet.dsn_file", config.fleet.dsn_file
    for adapter_id, adapter in config.adapters.items():
        for field in ("env_file", "command"):
            value = getattr(adapter, field, None)
            if isinstance(value, str) and value.startswith("/"):
                yield f"adapters.{adapter_id}.{field}", Path(value)
    for handler_id, handler in config.message_handlers.items():
        for field in ("env_file", "path"):
            value = getattr(handler, field, None)
            if isinstance(value, str) and value.startswith("/"):
                yield f"message_handlers.{handler_id}.{field}", Path(value)
        for n, arg in enumerate(getattr(handler, "argv", None) or ()):
            if arg.startswith("/"):  # the command, or a script an interpreter runs: as the services' user
                yield f"message_handlers.{handler_id}.argv[{n}]", Path(arg)


def within(path: Path, area: Path) -> bool:
    """`path` is `area` or inside it, as the file system resolves both (a link into the area counts)."""
    real, real_area = Path(os.path.realpath(path)), Path(os.path.realpath(area))
    return real == real_area or real.is_relative_to(real_area)
