"""The tool policy from the command line (docs/policy.md): `agentd policy show` and `policy test` judge it
without running anything; `agentd ask` is a script's way to ask from inside its attempt."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from agentd.cli.common import CommandError, add_command, config_from, json_object, print_json, wants_json

ASK_WITHIN_S = 3600.0  # `agentd ask` waits as long as a held call may (the dispatcher denies at ask_timeout_s)


def register(commands: Any) -> None:
    acts = commands.add_parser(
        "policy", help="show or try the tool policy that judges an attempt's tool calls (docs/policy.md)"
    ).add_subparsers(dest="policy_command", metavar="SUBCOMMAND", required=True)
    show = add_command(acts, "show", cmd_show, "the effective rules of each profile, in the order they are tried")
    show.add_argument("profile", nargs="?", metavar="PROFILE", help="one profile (default: every profile)")
    test = add_command(acts, "test", cmd_test, "which rule decides a tool call, without running anything")
    test.add_argument("profile", metavar="PROFILE", help="a profile's id (`agentd policy show` lists them)")
    test.add_argument("--tool", required=True, help="the tool's name as the harness says it: Bash, Write, WebFetch…")
    test.add_argument("--input", default="{}", help='the tool\'s input as JSON, e.g. \'{"command": "git push -f"}\'')
    test.add_argument("--cwd", help="where the call runs (default: the workspace)")
    ask = add_command(
        commands, "ask", cmd_ask, "from inside an attempt: ask the dispatcher whether a tool call may run (exit 0: yes)"
    )
    ask.add_argument("--tool", required=True, help="the tool's name: Bash, Write, WebFetch…")
    ask.add_argument("--input", default="{}", help="the tool's input as JSON")


def cmd_show(args: argparse.Namespace) -> int:
    config = config_from(args)
    profiles = [args.profile] if args.profile else sorted(config.profiles)
    if args.profile and args.profile not in config.profiles:
        raise CommandError(f"PROFILE: no profile {args.profile!r}; configured: {', '.join(sorted(config.profiles))}")
    shown = shown_policies(config, profiles)
    if wants_json(args):
        print_json(shown)
        return 0
    for entry in shown:
        print(policy_line(entry))
        for rule in entry["rules"]:
            print(f"  {rule['place']:>3}. {describe_rule(rule)}")
    return 0


def describe_rule(rule: dict[str, Any]) -> str:
    """`deny Bash command="git push*" — no force pushes ([policy])`."""
    matchers = " ".join(f"{key}={json.dumps(rule[key])}" for key in ("command", "flags", "path", "host") if key in rule)
    reason = f" — {rule['reason']}" if rule.get("reason") else ""
    return f"{rule['decision']:<5} {rule['tool']} {matchers}".rstrip() + f"{reason} ({rule['from']})"


def shown_policies(config: Any, profiles: list[str]) -> list[dict[str, Any]]:
    """Each profile's effective policy as `policy show` and `config check` say it: its rules in the order
    they are tried, the default, and what enforces it for the profile's default adapter."""
    from agentd.config.tool_policy import enforcement, profile_policy

    shown: list[dict[str, Any]] = []
    for profile_id in profiles:
        policy = profile_policy(config, profile_id)
        adapter = config.adapters.get(config.profiles[profile_id].default_adapter_id or "")
        rules = [
            {"place": n, "from": source, **rule.model_dump(exclude_none=True)}
            for n, (rule, source) in enumerate(policy.rules, 1)
        ]
        enforced = enforcement(adapter.kind, policy) if adapter else "no default adapter"
        shown.append({"profile": profile_id, "rules": rules, "default": policy.default, "enforced": enforced})
    return shown


def policy_line(entry: dict[str, Any]) -> str:
    count = f"{len(entry['rules'])} rule(s), then default {entry['default']}"
    return f"profile {entry['profile']}: {count}; {entry['enforced']}"


def cmd_test(args: argparse.Namespace) -> int:
    from agentd.attempt.calls import ruling_for
    from agentd.config.tool_policy import profile_policy

    config = config_from(args)
    if args.profile not in config.profiles:
        raise CommandError(f"PROFILE: no profile {args.profile!r}; configured: {', '.join(sorted(config.profiles))}")
    request = {"tool": args.tool, "input": json_object(args.input, "--input"), "cwd": args.cwd}
    workspace = os.path.realpath(config.paths.workspace)
    _, ruling = ruling_for(profile_policy(config, args.profile), request, workspace, workspace)
    if wants_json(args):
        print_json({"decision": ruling.decision, "rule": ruling.rule, "from": ruling.source, "reason": ruling.reason})
    else:
        print(ruling.describe())
        print(f"  said to the model: {ruling.reason}")
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    """Exit 0 when the call may run, 1 when it is denied (the reason on stderr); any failure is a deny."""
    from agentd.process.hook import Unanswered, ask

    tool_input = json_object(args.input, "--input")
    socket = os.environ.get("AGENTD_POLICY_SOCKET")
    if not socket:
        raise CommandError(
            "AGENTD_POLICY_SOCKET is not set: `agentd ask` runs inside an attempt whose policy can refuse calls"
        )
    request = {"harness": "script", "tool": args.tool, "input": tool_input, "cwd": os.getcwd()}
    try:
        answer = ask(socket, request, ASK_WITHIN_S)
    except Unanswered as exc:
        answer = {"decision": "deny", "reason": f"agentd denied this call: {exc}"}
    if answer["decision"] == "allow":
        print(f"allow: {answer['reason']}")
        return 0
    print(f"deny: {answer['reason']}", file=sys.stderr)
    return 1
