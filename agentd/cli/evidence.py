"""`agentd evidence verify`: the auditor's check, offline and read-only (agentd/evidence/verify.py);
`agentd evidence export`: the evidence for other projects' tools (agentd/evidence/export.py);
`agentd evidence accept-rollback`: go on from a database older than the evidence (agentd/evidence/rollback.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agentd.cli.common import add_command, agent_store, note, print_json, record_id, wants_json
from agentd.clock import SystemClock, format_ts
from agentd.edge import printable
from agentd.vocabulary import counted


def register(commands: Any) -> None:
    evidence = commands.add_parser(
        "evidence", help="verify the event chain and each attempt's evidence, export it, accept a rollback"
    ).add_subparsers(dest="evidence_command", metavar="SUBCOMMAND", required=True)
    check = add_command(
        evidence,
        "verify",
        cmd_evidence_verify,
        "walk the event chain and every attempt's evidence; exit 0 clean, 1 on findings, 2 on bad input",
    )
    which_attempts(check, "only this task's attempts (the chain is whole)", "every attempt (the default)")
    check.add_argument(
        "--expect-head",
        type=head,
        metavar="SEQ:HASH",
        help="a chain head recorded elsewhere (the journal's chain_head line): cutting the tail is then caught",
    )
    add_archive_options(check)

    export = add_command(
        evidence,
        "export",
        cmd_evidence_export,
        "write a task's attempts as TraceCore run artifacts, or its whole evidence as one .tar.gz",
    )
    export.add_argument("--format", required=True, choices=("tracecore", "bundle"), help="what to write")
    accept = add_command(
        evidence,
        "accept-rollback",
        cmd_accept_rollback,
        "after looking, go on from a database older than what happened (a restored backup, a lost -wal): "
        "recorded, the attempt folders it does not name moved aside, the published chain head re-based",
    )
    accept.add_argument(
        "--reason", required=True, type=note("--reason", required=True), metavar="TEXT", help="why (recorded)"
    )
    which_attempts(export, "this task's attempts", "every task's attempts", required=True)
    export.add_argument(
        "--out",
        type=Path,
        metavar="PATH",
        help="a path that does not exist yet: a directory (tracecore) or a .tar.gz file (bundle); "
        "default tracecore-<task> / agentd-evidence-<task>.tar.gz in the current directory",
    )


def add_archive_options(check: argparse.ArgumentParser) -> None:
    """The witnessed head (docs/backup-and-archive.md, "Witnessed head"): compare with an archive or the fleet, or
    audit an agent from its archive alone."""
    check.add_argument(
        "--against",
        nargs="?",
        const="",
        type=archive_url,
        metavar="ARCHIVE",
        help="compare the local chain with the latest head witnessed in the archive ([archive], or s3://BUCKET/PREFIX/):"
        " a chain shorter than it, or forking from it, is a rollback",
    )
    check.add_argument(
        "--against-fleet", action="store_true", help="compare with the heads the fleet's PostgreSQL witnessed"
    )
    check.add_argument(
        "--archive",
        type=archive_url,
        metavar="URL",
        help="audit an agent from its archive alone (s3://BUCKET/PREFIX/, with --agent NAME: its agent_id; no config "
        "is read): its chain and every folder",
    )
    check.add_argument(
        "--endpoint-url", metavar="URL", help="the S3-compatible service of an s3:// URL (default: AWS S3)"
    )
    check.add_argument("--region", default="us-east-1", metavar="NAME", help="the bucket's region (us-east-1)")
    check.add_argument(
        "--credentials-file",
        type=Path,
        metavar="FILE",
        help="a 0600 file of AWS_ACCESS_KEY_ID=… and AWS_SECRET_ACCESS_KEY=… for an s3:// URL "
        "(default: boto3's own: AWS_* variables, ~/.aws)",
    )


def archive_url(text: str) -> str:
    """An s3:// URL, checked when the option is read ('' for --against alone: the agent's [archive])."""
    if text:
        from agentd.archive.location import parse_archive_url

        try:
            parse_archive_url(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def which_attempts(parser: argparse.ArgumentParser, task_help: str, all_help: str, *, required: bool = False) -> None:
    which = parser.add_mutually_exclusive_group(required=required)
    which.add_argument("--task", type=record_id, metavar="ID", help=task_help)
    which.add_argument("--all", action="store_true", help=all_help)


def head(text: str) -> tuple[int, str]:
    from agentd.evidence.verify import parse_head

    try:
        return parse_head(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_evidence_verify(args: argparse.Namespace) -> int:
    from agentd.evidence.verify import verify

    if args.archive is not None:
        from agentd.cli.archive import audit_command

        return audit_command(args)
    with agent_store(args, readonly=True) as (config, store):
        if args.task is not None:
            store.get_task_or_raise(args.task)
        result = verify(store, config.paths.state_dir, task_id=args.task, expect_head=args.expect_head)
        witness = None
        if args.against is not None or args.against_fleet or config.archive.enabled or config.fleet.dsn_file:
            from agentd.cli.archive import compare_with_witness

            witness = compare_with_witness(args, config, store)
            result.findings += witness.findings
    if wants_json(args):
        print_json(result.as_dict() | ({"witnessed": witness.as_dict()} if witness is not None else {}))
    else:
        for finding in result.findings:
            print(printable(str(finding)))  # a planted file's name is text someone else chose
        head_text = f"head {result.head[0]}:{result.head[1]}" if result.head else "no events"
        verdict = "clean" if not result.findings else counted(len(result.findings), "finding")
        print(
            f"{verdict}: {counted(result.events, 'event')}, {counted(result.attempts, 'attempt')} checked; {head_text}"
        )
        if witness is not None:
            print(printable(witness.line()))
    return 0 if not result.findings else 1


def cmd_evidence_export(args: argparse.Namespace) -> int:
    from agentd.evidence.export import export_bundle, export_tracecore

    which = f"task-{args.task}" if args.task is not None else "all"
    default = f"tracecore-{which}" if args.format == "tracecore" else f"agentd-evidence-{which}.tar.gz"
    out: Path = (args.out or Path(default)).absolute()
    with agent_store(args, readonly=True) as (config, store):
        task_ids = [store.get_task_or_raise(args.task).task_id] if args.task is not None else store.all_task_ids()
        if args.format == "tracecore":
            exported = export_tracecore(store, config.paths.state_dir, task_ids, out)
        else:
            exported = export_bundle(store, config.paths.state_dir, task_ids, out, now=format_ts(SystemClock().now()))
    for left_out in exported.skipped:
        print(printable(f"agentd: not exported: {left_out['attempt_id']}: {left_out['why']}"), file=sys.stderr)
    if wants_json(args):
        shown = {"out": str(out), "attempts": exported.attempts, "skipped": exported.skipped, "pruned": exported.pruned}
        print_json(shown)
    else:
        pruned = f", {len(exported.pruned)} pruned by retention" if exported.pruned else ""
        skipped = f", {len(exported.skipped)} skipped (above)" if exported.skipped else ""
        print(printable(f"{out}: {len(exported.attempts)} attempt(s){skipped}{pruned}"))
    return 1 if exported.skipped else 0  # an export that left an attempt out is not a pass


def cmd_accept_rollback(args: argparse.Namespace) -> int:
    from agentd.control import operator
    from agentd.evidence.rollback import accept_rollback

    with agent_store(args) as (config, store):
        state_dir = config.paths.state_dir
        done = accept_rollback(store, state_dir, by=operator(), reason=args.reason, now=SystemClock().now())
    head = f"{done.head[0]}:{done.head[1]}" if done.head else "none"
    if wants_json(args):
        found = {"folders": [str(f) for f in done.behind.folders], "head_problem": done.behind.head}
        print_json({"accepted": bool(done.behind), **found, "moved_to": str(done.moved_to or ""), "head": head})
        return 0
    if not done.behind:
        print(
            "nothing to accept: no attempt folder the database does not name, and its chain reaches the published head"
        )
        return 0
    print(printable(f"accepted: {done.behind.describe()}"))
    if done.moved_to is not None:
        print(printable(f"moved {len(done.behind.folders)} attempt folder(s) to {state_dir / done.moved_to} (kept)"))
    print(f"published head is now {head}; the services start again on this database")
    return 0
