"""Setting an agent up and looking at it: init, migrate, config check/reference, schema export,
identity show, skills list/show/run."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd.cli.common import (
    add_command,
    check_live_workflows,
    config_from,
    print_fields,
    print_json,
    print_table,
    wants_json,
)
from agentd.clock import SystemClock
from agentd.errors import InputError, NotFound
from agentd.faults import refused_about
from agentd.vocabulary import counted

if TYPE_CHECKING:
    from agentd.config import Config


def register(commands: Any) -> None:
    add_command(commands, "init", cmd_init, "create the state dir (0700), the database (0600) and migrate it")
    add_command(commands, "migrate", cmd_migrate, "apply pending database migrations")

    config = commands.add_parser(
        "config", help="check the identity TOML (config check), or list its every key (config reference)"
    ).add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    add_command(
        config, "check", cmd_config_check, "validate the identity TOML and everything it refers to; write nothing"
    )
    add_command(
        config, "reference", cmd_config_reference, "print every key of the identity TOML (Markdown), from the code"
    )

    schema = commands.add_parser("schema", help="JSON Schemas of agentd's records").add_subparsers(
        dest="schema_command", metavar="SUBCOMMAND", required=True
    )
    export = add_command(schema, "export", cmd_schema_export, "write one JSON Schema file per record into DIR")
    export.add_argument("directory", metavar="DIR", help="the folder to write into (made if missing)")

    identity = commands.add_parser("identity", help="the agent's identity").add_subparsers(
        dest="identity_command", metavar="SUBCOMMAND", required=True
    )
    add_command(identity, "show", cmd_identity_show, "identity, wallets, constitution paths and hashes")

    skills = commands.add_parser("skills", help="the skills this agent has").add_subparsers(
        dest="skills_command", metavar="SUBCOMMAND", required=True
    )
    add_command(skills, "list", cmd_skills_list, "every skill with its description and commands")
    show = add_command(skills, "show", cmd_skills_show, "one skill's manifest and SKILL.md")
    show.add_argument("skill_id", metavar="ID", help="a skill's id (`skills list`)")
    run = add_command(
        skills,
        "run",
        cmd_skills_run,
        "run a command the skill's manifest declares, as argv in the workspace (never through a shell)",
    )
    run.add_argument("skill_id", metavar="ID", help="a skill's id (`skills list`)")
    run.add_argument("command_name", metavar="COMMAND", help="one of the skill's commands (`skills show ID`)")
    run.add_argument("arguments", metavar="ARGS", nargs=argparse.REMAINDER, help="after --, passed on as-is")


def cmd_init(args: argparse.Namespace) -> int:
    from agentd.cli.fast.cache import write_view
    from agentd.store import init_state_dir, migrate, open_store, own_state_dir

    config = config_from(args)
    init_state_dir(config.paths.state_dir, config.paths.workspace)
    own_state_dir(config.paths.state_dir, config.agent.agent_id, bind=True)  # before the database is touched
    applied = migrate(config.db_path, SystemClock())
    store = open_store(config.db_path, SystemClock())
    store.close()
    write_view(config)  # the state dir exists now: the next command's fast path reads the view
    if wants_json(args):
        print_json(
            {
                "database": str(config.db_path),
                "applied": [m.filename for m in applied],
                "schema_version": store.schema_version,
            }
        )
    else:
        print(
            f"initialised {config.paths.state_dir} (database {config.db_path}, schema version {store.schema_version})"
        )
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from agentd.store import init_state_dir, migrate, own_state_dir

    config = config_from(args)
    init_state_dir(config.paths.state_dir)
    own_state_dir(config.paths.state_dir, config.agent.agent_id, bind=True)
    applied = migrate(config.db_path, SystemClock())
    if wants_json(args):
        print_json({"database": str(config.db_path), "applied": [m.filename for m in applied]})
    elif applied:
        print("applied " + ", ".join(m.filename for m in applied))
    else:
        print(f"{config.db_path} is up to date")
    return 0


def cmd_config_reference(args: argparse.Namespace) -> int:
    from agentd.config.reference import render

    print(render(), end="")
    return 0


def cmd_config_check(args: argparse.Namespace) -> int:
    from agentd.cli.policy import policy_line, shown_policies
    from agentd.install.neighbours import refuse_neighbours
    from agentd.install.ports import refuse_shared_ports
    from agentd.process.privilege import BoundaryError, boundary_of
    from agentd.store import open_store, own_state_dir

    config = config_from(args)
    refuse_shared_ports(config.path, config.metrics, config.web)  # another agent in /etc/agentd on the same port
    refuse_neighbours(config)  # or its run user, or its folders over this agent's
    if config.db_path.is_file():  # the config must also fit what is running, and be the same agent's
        own_state_dir(config.paths.state_dir, config.agent.agent_id, bind=False)
        store = open_store(config.db_path, SystemClock(), readonly=True)
        try:
            check_live_workflows(config, store)
        finally:
            store.close()
    # who attempts and sensors run as, and what that costs, on this machine (docs/install-and-deploy.md)
    said = boundary_of(config)
    if said.get("line", "").startswith("no attempt can start"):  # never a plain "ok" (issue 52)
        if not staged(config.path):  # the dispatcher would start and refuse every attempt: refused here
            raise BoundaryError(f"{config.path}: {said['line']}")
        print(  # a tree `install --root` staged: its users are made on the target, not here
            f"agentd: warning: {said['line']}: this is a staged tree (`agentd install --root`), whose users "
            "systemd-sysusers makes on the target; run config check there before `systemctl enable`",
            file=sys.stderr,
        )
    policies = shown_policies(config, sorted(config.profiles))  # the tool policy each profile's attempts meet
    hook = hook_line(config)  # whether the run user can start the tool-call hook (docs/policy.md)
    if wants_json(args):
        shown = {"config": str(config.path), "ok": True, "boundary": said, "tool_policy": policies, "hook": hook}
        print_json(shown)
    else:
        print(
            f"{config.path}: ok (agent {config.agent.agent_id}; {counted(len(config.adapters), 'adapter')}, "
            f"{counted(len(config.profiles), 'profile')}, {counted(len(config.task_types), 'task type')}, "
            f"{counted(len(config.skills), 'skill')}, {counted(len(config.workflows), 'workflow')}, "
            f"{counted(len(config.schedules), 'schedule')}, {counted(len(config.sensor_definitions), 'sensor')})"
        )
        print(f"boundary: {said['line']}")
        for entry in policies:
            print(f"tool policy: {policy_line(entry)}")
        if hook is not None:
            print(f"tool-call hook: {hook}")
    return 0


def staged(path: Path) -> bool:
    """Whether `path` is an agent's TOML in a tree `agentd install --root DIR` laid out (DIR/etc/agentd/NAME.toml,
    DIR not /): a tree for another machine, whose users this one need not have."""
    folder = path.resolve().parent
    return (folder.name, folder.parent.name) == ("agentd", "etc") and folder.parent.parent != Path("/")


def hook_line(config: Config) -> str | None:
    """What `config check` says of the tool-call hook claude and codex run as the run user (docs/policy.md,
    "When the hook cannot start"): checked as that user when this process can become it, said to be
    unchecked when it cannot; None when no attempt runs the hook.

    :raises BoundaryError: the run user cannot start it (the dispatcher would refuse those attempts).
    """
    from agentd.adapters.base import PolicyHook
    from agentd.config.tool_policy import profile_policy
    from agentd.process.hook_check import HARNESS_OF, hook_problem
    from agentd.process.privilege import BoundaryError, can_switch_users, run_user

    harnesses = sorted({HARNESS_OF[a.kind] for a in config.adapters.values() if a.kind in HARNESS_OF})
    if not harnesses or not any(profile_policy(config, profile).enforced for profile in config.profiles):
        return None
    try:
        user = run_user(config.dispatch.run_as)
    except BoundaryError as exc:
        return f"not checked: {exc}"
    if user is not None and not can_switch_users():
        return (
            f"not checked: this process cannot start processes as {user.name} (run `agentd config check` as root "
            "to check that the run user can start it)"
        )
    hook = PolicyHook.of(config.paths.runs / "policy-check", config.policy.ask_timeout_s)
    command = hook.command(harnesses[0])
    if problem := hook_problem(command, user):
        hooked = ", ".join(sorted(a for a, c in config.adapters.items() if c.kind in HARNESS_OF))
        raise BoundaryError(f"the tool-call hook: {problem}; until then the dispatcher refuses {hooked}'s attempts")
    who = f"the run user {user.name}" if user is not None else "this user"
    return f"{who} can start it ({shlex.split(command)[0]})"


def cmd_schema_export(args: argparse.Namespace) -> int:
    from agentd.config.schemas import json_schemas

    target = Path(args.directory)
    written = []
    try:  # DIR is the operator's, not the state dir: whatever the system refuses is said of it
        if os.path.lexists(target) and not os.path.isdir(target):
            raise InputError(f"{target} exists and is not a folder")
        target.mkdir(parents=True, exist_ok=True)
        for schema_id, schema in sorted(json_schemas().items()):
            path = target / (schema_id.removeprefix("agent-runtime/").replace("/", ".") + ".schema.json")
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            os.replace(tmp, path)
            written.append(str(path))
    except OSError as exc:
        raise InputError(f"cannot write the JSON Schemas to {target}: {refused_about(exc, target)}") from None
    if wants_json(args):
        print_json(written)
    else:
        print(f"wrote {len(written)} schemas to {target}")
    return 0


def cmd_identity_show(args: argparse.Namespace) -> int:
    config = config_from(args)
    identity, constitution = config.identity, config.constitution
    if wants_json(args):
        print_json({"identity": identity, "wallets": list(config.wallets), "constitution": constitution})
        return 0
    print_fields(identity.model_dump(mode="json").items())
    print()
    print_fields(
        [
            ("soul_path", constitution.soul_path),
            ("soul_hash", constitution.soul_hash),
            ("purpose_path", constitution.purpose_path),
            ("purpose_hash", constitution.purpose_hash),
            ("version", constitution.version),
            ("revised_at", constitution.model_dump(mode="json")["revised_at"]),
        ]
    )
    if config.wallets:
        print()
        print_table(
            ["CHAIN", "NETWORK", "ADDRESS", "NAME", "ONCHAIN CONTRACT"],
            [(w.chain, w.network, w.address, w.name, w.onchain_identity_contract) for w in config.wallets],
        )
    return 0


def cmd_skills_list(args: argparse.Namespace) -> int:
    config = config_from(args)
    skills = sorted(config.skills.values(), key=lambda s: s.skill_id)
    if wants_json(args):
        print_json([s.manifest for s in skills])
        return 0
    print_table(
        ["ID", "DESCRIPTION", "COMMANDS"],
        [
            (s.skill_id, s.manifest.description, ", ".join(c.name for c in s.manifest.cli_commands or ()))
            for s in skills
        ],
    )
    return 0


def cmd_skills_show(args: argparse.Namespace) -> int:
    config = config_from(args)
    skill = _skill(config.skills, args.skill_id)
    if wants_json(args):
        print_json({"manifest": skill.manifest, "directory": str(skill.directory), "instructions": skill.instructions})
        return 0
    print_fields(
        [
            ("skill_id", skill.skill_id),
            ("description", skill.manifest.description),
            ("directory", str(skill.directory)),
            ("tags", skill.manifest.tags),
        ]
    )
    for command in skill.manifest.cli_commands or ():
        print(f"command     {command.name}: {skill.command_argv(command.name)}  {command.description or ''}".rstrip())
    print()
    print(skill.instructions.rstrip())
    return 0


def cmd_skills_run(args: argparse.Namespace) -> int:
    config = config_from(args)
    skill = _skill(config.skills, args.skill_id)
    argv = skill.command_argv(args.command_name)
    if argv is None:
        declared = ", ".join(c.name for c in skill.manifest.cli_commands or ()) or "none"
        raise InputError(f"skill {skill.skill_id} declares no command {args.command_name!r} (declared: {declared})")
    extra = args.arguments[1:] if args.arguments[:1] == ["--"] else args.arguments
    cwd = config.paths.workspace if config.paths.workspace.is_dir() else Path.cwd()
    from agentd.process.environment import child_environment
    from agentd.process.privilege import require_switch, run_user
    from agentd.process.runner import run_foreground

    # In the workspace, as an attempt runs it: the workspace is the run user's, so what it holds (a
    # Makefile, a module on the import path, a link where the command writes) must never act with the
    # rights of whoever typed this (docs/operate.md, "Commands"). It gets a child's environment, as an
    # attempt's adapter does (none of the operator's own variables), and the terminal it is attached to.
    user = run_user(config.dispatch.run_as)
    if user is None or os.geteuid() == user.uid:
        return run_foreground([*argv, *extra], cwd=cwd)
    require_switch(user)
    terminal = {"TERM": os.environ["TERM"]} if "TERM" in os.environ else {}
    env, _ = child_environment(home=cwd, env={**terminal, "USER": user.name, "LOGNAME": user.name}, agentd={})
    return run_foreground([*argv, *extra], cwd=cwd, env=env, user=user)


def _skill(skills: Any, skill_id: str) -> Any:
    if skill_id not in skills:
        raise NotFound(f"no skill {skill_id!r}; known: {', '.join(sorted(skills)) or 'none'}")
    return skills[skill_id]
