"""`agentd prune`: apply [retention] now (the sensor service does it hourly), or say what it would remove."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from agentd.cli.common import CommandError, add_command, agent_store, moment, print_json, print_table, wants_json
from agentd.clock import format_ts
from agentd.edge import printable

if TYPE_CHECKING:
    from agentd.evidence.retention import RetentionReport


def register(commands: Any) -> None:
    prune = add_command(
        commands,
        "prune",
        cmd_prune,
        "delete what [retention] says is old enough: evidence and tasks finished long ago, stale sensor logs, "
        "the oldest events (behind a checkpoint); never anything of a task still live",
    )
    prune.add_argument("--dry-run", action="store_true", help="say what would be removed; change nothing")
    prune.add_argument(
        "--before",
        type=moment,
        metavar="TIME",
        help="one cutoff for every kind instead of [retention]'s: a UTC time (2026-01-31, 2026-01-31T12:00:00Z) "
        "or an age (30d)",
    )


def cmd_prune(args: argparse.Namespace) -> int:
    from agentd.evidence.retention import Cutoffs, apply_retention

    with agent_store(args, readonly=args.dry_run) as (config, store):
        now = store.clock.now()
        if args.before is not None and args.before > now:
            raise CommandError(f"prune: --before {format_ts(args.before)} is in the future; give a past time")
        cutoffs = Cutoffs.before(args.before) if args.before else Cutoffs.configured(config.retention, now)
        report = apply_retention(store, config, cutoffs, now, dry_run=args.dry_run)
    if wants_json(args):
        print_json(report.as_dict())
        return 0
    _print_report(report)
    return 0


def _print_report(report: RetentionReport) -> None:
    def older(cutoff: Any) -> str:
        return "kept forever" if cutoff is None else format_ts(cutoff)

    cutoffs = report.cutoffs
    through = f" (through sequence {report.events_through})" if report.events else ""
    print_table(
        ["KIND", "WOULD REMOVE" if report.dry_run else "REMOVED", "OLDER THAN"],
        [
            ("evidence", f"{report.evidence_dirs} attempt directories", older(cutoffs.evidence)),
            ("sensor logs", f"{report.sensor_logs} files", older(cutoffs.sensor_logs)),
            ("events", f"{report.events} events{through}", older(cutoffs.events)),
            ("tasks", f"{report.tasks} finished tasks", older(cutoffs.tasks)),
        ],
    )
    for problem in report.evidence_failed:
        print(printable(f"not deleted: {problem}"))
