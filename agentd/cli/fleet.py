"""`agentd fleet …`: the fleet's queue on PostgreSQL (docs/fleet.md): init, submit, status, show,
cancel, and the intake service that feeds this agent from it."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd.cli.common import (
    add_command,
    config_from,
    json_object,
    print_json,
    priority,
    record_id,
    stop_between,
    wants_json,
)
from agentd.clock import SystemClock, format_ts
from agentd.edge import printable
from agentd.errors import InputError
from agentd.vocabulary import MODES, SURFACES

if TYPE_CHECKING:
    from agentd.config import Config
    from agentd.store import FleetQueue, FleetTask, Submission


def register(commands: Any) -> None:
    fleet = commands.add_parser("fleet", help="a fleet's queue on PostgreSQL").add_subparsers(
        dest="fleet_command", metavar="SUBCOMMAND", required=True
    )
    init = add_command(fleet, "init", cmd_init, "create or migrate the fleet's schema in PostgreSQL")
    submit = add_command(fleet, "submit", cmd_submit, "submit a task once: whichever suitable agent is free takes it")
    submit.add_argument("--type", dest="task_type", metavar="TYPE", help="required unless --batch")
    submit.add_argument("--subject", help="a one-line title people see in lists")
    submit.add_argument("--payload", metavar="JSON", help="a JSON object (default {})")
    submit.add_argument(
        "--label",
        dest="labels",
        action="append",
        default=[],
        metavar="LABEL",
        help="only an agent with it takes the task (repeatable)",
    )
    submit.add_argument("--priority", type=priority, metavar="N", help="1 (most urgent) to 10 (default 5)")
    submit.add_argument("--key", metavar="IDEMPOTENCY_KEY", help="a repeated key is the same task")
    submit.add_argument(
        "--origin-surface", choices=SURFACES, default="cli", help="where it was asked for (default cli)"
    )
    submit.add_argument(
        "--origin-product", default="agentd", metavar="PRODUCT", help="the product that asked (default agentd)"
    )
    submit.add_argument(
        "--dispatch-mode", choices=MODES, default="queued", help="how it was asked for (default queued)"
    )
    submit.add_argument(
        "--batch",
        metavar="FILE",
        help="JSON lines (- for stdin), one submission each: task_type, subject, payload, labels, priority, key",
    )
    status = add_command(fleet, "status", cmd_status, "the fleet's tasks by status and who holds leases")
    show = add_command(fleet, "show", cmd_show, "one fleet task: its record, result and history")
    show.add_argument("fleet_id", type=record_id, metavar="ID", help="the fleet task's id (`fleet status`)")
    cancel = add_command(fleet, "cancel", cmd_cancel, "cancel a queued or leased fleet task")
    cancel.add_argument("fleet_id", type=record_id, metavar="ID", help="the fleet task to cancel")
    for parser in (init, submit, status, show, cancel):
        parser.add_argument("--dsn", help="the connection string (else --dsn-file, else [fleet] dsn_file)")
        parser.add_argument(
            "--dsn-file", type=Path, metavar="FILE", help="a file (mode 0600) holding the connection string"
        )


def dsn_of(args: argparse.Namespace, config: Config | None = None) -> str:
    """--dsn, --dsn-file, or the agent's [fleet] dsn_file (`config`'s, when the caller has loaded it): a
    connection string never has to be typed where others can see it (a file of its own, 0600)."""
    if args.dsn:
        from agentd.store.fleet_connect import dsn_parts

        if dsn_parts(args.dsn).get("password"):  # never quoted back: dsn_parts leaves libpq's quotes out
            raise InputError(
                "--dsn: it holds a password, which every user on this machine can read in the process list "
                "(ps, /proc/PID/cmdline): put the string in a file of its own (--dsn-file FILE, mode 0600) "
                "or the password in ~/.pgpass"
            )
        return str(args.dsn)
    path = args.dsn_file
    if path is None:
        path = (config or config_from(args)).fleet.dsn_file
    if path is None:
        raise InputError("--dsn: give the fleet's PostgreSQL (--dsn, --dsn-file FILE or [fleet] dsn_file)")
    return _read_private(Path(path), "--dsn-file" if args.dsn_file is not None else "[fleet] dsn_file")


def _read_private(path: Path, flag: str) -> str:
    """The connection string in `path`, refused by the rule `config check` holds `[fleet] dsn_file` to: a
    regular file only its owner can read (it holds a password, often)."""
    from agentd.config.environment import read_dsn_file, secret_file_problems
    from agentd.edge import UnusableFile

    problems = secret_file_problems(flag, "", path, env_pairs=False)
    if problems and path.is_file():
        raise InputError(f"{flag}: {problems[0].message}")
    try:
        return read_dsn_file(path)
    except UnusableFile as exc:
        raise InputError(f"{flag}: {exc}") from None


def _queue(args: argparse.Namespace, config: Config | None = None, *, schema: bool = True) -> FleetQueue:
    """The fleet's queue; unless `schema` is False (`fleet init` makes it), its schema checked first, so a
    database without it is one line saying to run `agentd fleet init`, never a missing table's traceback."""
    from agentd.store import FleetQueue

    queue = FleetQueue.open(dsn_of(args, config))
    try:
        if schema:
            queue.require_current()
    except BaseException:
        queue.close()
        raise
    return queue


def writing(args: argparse.Namespace) -> Config:
    """The config of a command that writes the fleet's queue, loaded once: the fleet's writes are an
    operator's control verbs too, refused inside an attempt or as the run user before anything is read
    or sent, as store_from refuses a writer of the agent's database (docs/install-and-deploy.md)."""
    from agentd.process.privilege import refuse_inside_attempt

    config = config_from(args)
    refuse_inside_attempt(config.dispatch.run_as, "this command writes to the fleet's queue", config.sensors.run_as)
    return config


def cmd_init(args: argparse.Namespace) -> int:
    queue = _queue(args, writing(args), schema=False)
    try:
        applied = queue.migrate()
    finally:
        queue.close()
    if wants_json(args):
        print_json({"applied": [m.filename for m in applied]})
    else:
        print(
            f"fleet schema: applied {', '.join(m.filename for m in applied)}" if applied else "fleet schema: up to date"
        )
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    """One task from the flags, or (--batch) one per JSON line: each judged as `agentd task add` judges a
    task (agentd/cli/fleet_submit.py) before anything reaches PostgreSQL."""
    from agentd.cli import fleet_submit

    config, now = writing(args), SystemClock().now()
    with stop_between() as stop:  # a signal while the lines are read ends the command at once
        submissions = _submissions(args, config, now)
        origin = fleet_submit.origin_of(args, now)
        queue = _queue(args, config)
        try:
            sent, failed = fleet_submit.send(queue, submissions, origin, stop.writes())
        finally:
            queue.close()
    if failed is not None:
        if args.batch is not None:
            print(f"agentd: {fleet_submit.resume_note(sent, len(submissions))}", file=sys.stderr)
        raise failed
    if args.batch is not None:
        fleet_submit.report(args, sent)
        return 0
    [(_, task, new)] = sent
    if wants_json(args):
        print_json({**task.as_dict(), "new": new})
    else:
        labels = f", labels {','.join(task.labels)}" if task.labels else ""
        said = "submitted" if new else f"already submitted with key {args.key!r}"
        print(f"fleet task {task.fleet_id} {said} ({task.task_type}, priority {task.priority}{labels}, {task.status})")
    return 0


def _submissions(args: argparse.Namespace, config: Config, now: datetime) -> list[tuple[int, Submission]]:
    """The lines of --batch, or the one task of the flags, each judged (agentd/cli/fleet_submit.py)."""
    from agentd.cli import fleet_submit

    if args.batch is not None:
        return fleet_submit.judge_batch(args, config, now)
    if args.task_type is None:
        raise InputError("--type: required (or --batch FILE for many tasks)")
    fields = fleet_submit.given_fields(args)
    fields["payload"] = json_object(args.payload or "{}", "--payload")
    return [(0, fleet_submit.judge(fields, config, now, flags=True))]


def cmd_status(args: argparse.Namespace) -> int:
    queue = _queue(args)
    try:
        counts = queue.counts()
    finally:
        queue.close()
    if wants_json(args):
        print_json(counts)
        return 0
    print("fleet    " + "  ".join(f"{status} {n}" for status, n in counts["tasks"].items()))
    age = counts["oldest_queued_age_s"]
    print(f"oldest queued task: waiting {age:.0f}s" if age is not None else "oldest queued task: none")
    for agent, held in sorted(counts["leases"].items()):
        print(f"leases   {printable(agent)}: {held}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    queue = _queue(args)
    try:
        task, events = queue.get(args.fleet_id), queue.events(args.fleet_id)
    finally:
        queue.close()
    if wants_json(args):
        print_json({**task.as_dict(), "events": events})
        return 0
    _print_task(task)
    for event in events:
        token = f" token {event['token']}" if event["token"] is not None else ""
        agent = f" {printable(event['agent'])}" if event["agent"] else ""
        print(f"  {_when(event['at'])}  {event['type']}{agent}{token}")
    return 0


def _print_task(task: FleetTask) -> None:
    """A fleet row as text: anyone with the DSN can write one, so every value is made printable."""
    print(
        f"fleet task {task.fleet_id}: {printable(task.task_type)} ({task.status}), priority {task.priority}, "
        f"claims {task.claims}"
    )
    if task.subject:
        print(f"subject  {printable(task.subject)}")
    if task.lease_agent:
        until = f", until {format_ts(task.lease_expires_at)}" if task.lease_expires_at else ""
        print(f"lease    {printable(task.lease_agent)}, token {task.lease_token}{until}")
    if task.payload is not None:
        print(f"payload  {_json_text(task.payload)}")
    if task.result:
        shown = ", ".join(f"{key} {_value_text(value)}" for key, value in task.result.items() if value is not None)
        print(f"result   {shown}")
    if task.origin is not None:
        print(f"origin   {_json_text(task.origin)}")
    for column, why in task.unreadable.items():  # what agentd cannot hold (agentd/store/fleet_rows.py)
        print(f"{column:<8} unreadable: {printable(why)}")


def _json_text(value: object) -> str:
    """A value from the fleet's JSON columns as JSON on one line, printable whatever it holds."""
    return printable(json.dumps(value, ensure_ascii=False))


def _value_text(value: object) -> str:
    """A result's value: text as itself, anything else as JSON (never Python's notation for it)."""
    return printable(value) if isinstance(value, str) else _json_text(value)


def _when(at: str | None) -> str:
    """An event's time as people read it, to the second in UTC (`fleet show --json` keeps it whole)."""
    return f"{at[:10]}T{at[11:19]}Z" if at and len(at) >= 19 else (at or "unknown time")


def cmd_cancel(args: argparse.Namespace) -> int:
    from agentd.process.privilege import operator_name

    queue = _queue(args, writing(args))
    try:
        task = queue.cancel(args.fleet_id, by=operator_name())
    finally:
        queue.close()
    if wants_json(args):
        print_json(task.as_dict())
    else:
        print(f"fleet task {task.fleet_id} canceled")
    return 0
