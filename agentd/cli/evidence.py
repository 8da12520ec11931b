"""`agentd evidence verify`: the auditor's check, offline and read-only (agentd/audit.py)."""

from __future__ import annotations

import argparse
from typing import Any

from agentd.cli.common import add_command, agent_store, print_json, record_id, wants_json


def register(commands: Any) -> None:
    evidence = commands.add_parser("evidence", help="verify the evidence a state dir holds").add_subparsers(
        dest="evidence_command", metavar="SUBCOMMAND", required=True
    )
    check = add_command(
        evidence,
        "verify",
        cmd_evidence_verify,
        "walk the event chain and every attempt's evidence; exit 0 clean, 1 on findings, 2 on bad input",
    )
    which = check.add_mutually_exclusive_group()
    which.add_argument("--task", type=record_id, metavar="ID", help="only this task's attempts (the chain is whole)")
    which.add_argument("--all", action="store_true", help="every attempt (the default)")
    check.add_argument(
        "--expect-head",
        type=head,
        metavar="SEQ:HASH",
        help="a chain head recorded elsewhere (the journal's chain_head line): cutting the tail is then caught",
    )


def head(text: str) -> tuple[int, str]:
    from agentd.audit import parse_head

    try:
        return parse_head(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_evidence_verify(args: argparse.Namespace) -> int:
    from agentd.audit import verify

    with agent_store(args, readonly=True) as (config, store):
        if args.task is not None:
            store.get_task_or_raise(args.task)
        result = verify(store, config.paths.state_dir, task_id=args.task, expect_head=args.expect_head)
    if wants_json(args):
        print_json(result.as_dict())
    else:
        for finding in result.findings:
            print(str(finding))
        head_text = f"head {result.head[0]}:{result.head[1]}" if result.head else "no events"
        verdict = "clean" if not result.findings else f"{len(result.findings)} finding(s)"
        print(f"{verdict}: {result.events} events, {result.attempts} attempts checked; {head_text}")
    return 0 if not result.findings else 1
