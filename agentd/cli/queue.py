"""The task queue from the operator's side: task add/list/show, events, status."""

from __future__ import annotations

import argparse
import time
from typing import Any

from pydantic import ValidationError

from agentd import control
from agentd.cli.common import (
    add_command,
    agent_store,
    config_from,
    count,
    json_object,
    option,
    print_fields,
    print_json,
    print_table,
    record_id,
    store_from,
    wants_json,
)
from agentd.clock import SystemClock, age, format_ts, parse_ts
from agentd.edge import printable
from agentd.errors import InputError
from agentd.records import TASK_STATUSES, TaskIntent, TaskRecord
from agentd.status import snapshot

STALE_STATUS_S = 30.0
MAX_ATTEMPTS = 100  # as a task type's max_attempts  # services refresh their status line every 5 s


def register(commands: Any) -> None:
    task = commands.add_parser("task", help="add, list and inspect tasks").add_subparsers(
        dest="task_command", metavar="SUBCOMMAND", required=True
    )
    add = add_command(task, "add", cmd_task_add, "validate and enqueue a task")
    add.add_argument("--type", dest="task_type", required=True, help="a registered task type")
    add.add_argument("--subject")
    add.add_argument("--description")
    add.add_argument("--priority", type=int, help="1 (most urgent) to 10 (least); default 5")
    add.add_argument("--payload", default="{}", help="JSON object checked against the type's payload schema")
    add.add_argument("--skill", dest="skills", action="append", default=[], help="a skill id (repeatable)")
    add.add_argument("--profile", help="a profile id (default: the task type's)")
    add.add_argument("--adapter", help="an adapter id (default: the task type's, else the profile's)")
    add.add_argument("--model", help="a model the config declares")
    add.add_argument(
        "--require-artifact",
        dest="artifacts",
        action="append",
        default=[],
        metavar="PATH",
        help="a file (relative to the workspace) the attempt must leave behind (repeatable)",
    )
    when = add.add_mutually_exclusive_group()
    when.add_argument("--delay", type=float, metavar="MINUTES", help="available after this many minutes")
    when.add_argument("--at", metavar="TIMESTAMP", help="available at this UTC time (operator only)")
    add.add_argument("--source", default="operator:cli", help="where the task came from")

    lst = add_command(task, "list", cmd_task_list, "tasks, newest first")
    lst.add_argument("--status", action="append", choices=TASK_STATUSES, default=[], help="only these (repeatable)")
    lst.add_argument("--limit", type=count, default=50)

    show = add_command(task, "show", cmd_task_show, "one task: its record, attempts and events")
    show.add_argument("task_id", type=record_id, metavar="ID")

    cancel = add_command(
        task, "cancel", cmd_task_cancel, "cancel a task: a waiting one at once, a running one by stopping its adapter"
    )
    cancel.add_argument("task_id", type=record_id, metavar="ID")

    retry = add_command(
        task, "retry", cmd_task_retry, "re-queue a permanently failed, blocked or canceled task; its history stays"
    )
    retry.add_argument("task_id", type=record_id, metavar="ID")
    retry.add_argument(
        "--attempts",
        type=int,
        default=None,
        metavar="N",
        help="attempts it gets (default: its task type's max_attempts)",
    )

    events = add_command(commands, "events", cmd_events, "the event log, oldest first")
    events.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    events.add_argument("--task", type=record_id, metavar="ID", help="only this task's events")
    events.add_argument("--after", type=count, default=0, metavar="SEQUENCE", help="start after this sequence")
    events.add_argument("--limit", type=count, default=1000)

    add_command(commands, "status", cmd_status, "queue counts, oldest pending age, schema version")


def intent_from_args(args: argparse.Namespace) -> TaskIntent:
    payload = json_object(args.payload, "--payload")
    fields: dict[str, Any] = {
        "task_type": args.task_type,
        "source": args.source,
        "subject": args.subject,
        "description": args.description,
        "priority": args.priority,
        "payload": payload,
        "requested_profile_id": args.profile,
        "requested_adapter_id": args.adapter,
        "requested_model": args.model,
        "skill_ids": args.skills or None,
    }
    if args.delay is not None:
        fields["schedule"] = {"delay_minutes": args.delay}
    if args.at is not None:
        fields["available_at"] = args.at
    if args.artifacts:
        fields["evidence_requirements"] = {"required_artifacts": args.artifacts}
    try:
        return TaskIntent.model_validate(fields)
    except ValidationError as exc:
        raise InputError("; ".join(_intent_error(e) for e in exc.errors())) from None


def _intent_error(err: Any) -> str:
    flag = {
        "task_type": "--type",
        "payload": "--payload",
        "priority": "--priority",
        "available_at": "--at",
        "schedule": "--delay",
        "skill_ids": "--skill",
    }.get(str(err["loc"][0]), str(err["loc"][0]))
    if err["loc"][0] == "priority":
        return f"--priority: expected 1 (most urgent) to 10 (least urgent), found {err.get('input')!r}"
    return f"{flag}: {err['msg']}, found {err.get('input')!r}"


def cmd_task_add(args: argparse.Namespace) -> int:
    intent = intent_from_args(args)
    with agent_store(args) as (config, store):
        task = control.add_task(config, store, intent, SystemClock().now())
    if wants_json(args):
        print_json(task)
    else:
        when = "now" if task.available_at <= task.created_at else format_ts(task.available_at)
        print(f"task {task.task_id} enqueued ({task.task_type}, priority {task.priority}, available {when})")
    return 0


def cmd_task_list(args: argparse.Namespace) -> int:
    with agent_store(args, readonly=True) as (_, store):
        tasks = store.list_tasks(statuses=tuple(args.status), limit=args.limit)
    if wants_json(args):
        print_json(tasks)
        return 0
    print_table(
        ["ID", "STATUS", "PRI", "TYPE", "ATTEMPTS", "AVAILABLE", "SUBJECT"],
        [
            (
                t.task_id,
                t.status,
                t.priority,
                t.task_type,
                f"{t.attempt_count}/{t.max_attempts}",
                format_ts(t.available_at)[:19] + "Z",
                t.subject or "",
            )
            for t in tasks
        ],
    )
    return 0


def cmd_task_show(args: argparse.Namespace) -> int:
    with agent_store(args, readonly=True) as (_, store):
        task = store.get_task_or_raise(args.task_id)
        attempts = store.attempts_of(task.task_id)
        events = store.read_events(task_id=task.task_id)
    if wants_json(args):
        print_json({"task": task, "attempts": attempts, "events": events})
        return 0
    print_task(task)
    if attempts:
        print("\nattempts")
        print_table(
            ["#", "ATTEMPT", "ADAPTER", "MODEL", "EXIT", "RETRY", "REASON", "STARTED", "ENDED"],
            [
                (
                    a.attempt_number,
                    a.attempt_id,
                    a.adapter_id,
                    a.model,
                    a.exit_status,
                    a.retry_class,
                    a.termination_reason,
                    format_ts(a.started_at),
                    format_ts(a.ended_at) if a.ended_at else "",
                )
                for a in attempts
            ],
        )
    print("\nevents")
    print_table(
        ["SEQ", "TIME", "TYPE", "DETAIL"],
        [(e.sequence, format_ts(e.timestamp), e.type, _detail(e.payload)) for e in events],
    )
    return 0


def cmd_task_cancel(args: argparse.Namespace) -> int:
    with agent_store(args) as (config, store):
        result = control.cancel_task(config, store, args.task_id, SystemClock().now())
    if wants_json(args):
        print_json({"task": result.task, "action": result.action})
    elif result.action == "canceled":
        print(f"task {args.task_id} canceled")
    else:
        print(f"task {args.task_id} is running: the dispatcher will stop its adapter and record operator_canceled")
    return 0


def cmd_task_retry(args: argparse.Namespace) -> int:
    with agent_store(args) as (config, store):
        task = control.retry_task(config, store, args.task_id, args.attempts, SystemClock().now())
    if wants_json(args):
        print_json(task)
    else:
        more = task.max_attempts - task.attempt_count + task.free_attempt_count
        print(f"task {task.task_id} re-queued with {more} more attempts (history kept)")
    return 0


def print_task(task: TaskRecord) -> None:
    data = task.model_dump(mode="json")
    outcome = data.pop("outcome")
    print_fields(data.items())
    if outcome:
        print_fields([("outcome", outcome)])


def _detail(payload: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in payload.items() if not isinstance(v, dict | list))[:100]


def cmd_events(args: argparse.Namespace) -> int:
    config = config_from(args)
    store = store_from(config, readonly=True)
    after = args.after
    try:
        while True:
            events = store.read_events(after=after, task_id=args.task, limit=args.limit)
            for event in events:
                if wants_json(args):
                    print(event.model_dump_json(), flush=True)
                else:
                    ids = " ".join(
                        f"{k}={v}"
                        for k, v in (
                            ("task", event.task_id),
                            ("attempt", event.attempt_id),
                            ("workflow", event.workflow_id),
                            ("schedule", event.schedule_id),
                            ("sensor", event.sensor_id),
                        )
                        if v is not None
                    )
                    print(
                        f"{event.sequence:>6}  {format_ts(event.timestamp)}  {event.type}  {printable(ids)}  "
                        f"{printable(_detail(event.payload))}".rstrip(),
                        flush=True,
                    )
                after = event.sequence
            if not option(args, "follow"):
                return 0
            if len(events) < args.limit:
                time.sleep(0.5)  # the follower polls; the database is the only channel
    finally:
        store.close()


def cmd_status(args: argparse.Namespace) -> int:
    with agent_store(args, readonly=True) as (config, store):
        now = SystemClock().now()
        shown = snapshot(config, store, now)
    if wants_json(args):
        print_json(shown)
        return 0
    print(f"agent {shown['agent_id']}  database {shown['database']}  schema version {shown['schema_version']}")
    print("  ".join(f"{status} {count}" for status, count in shown["counts"].items()))
    oldest = shown["oldest_pending_age_s"]
    print(f"oldest pending: {age(oldest) if oldest is not None else 'none waiting'}")
    if shown["next_available_at"]:
        print(f"next delayed task due in {age((parse_ts(shown['next_available_at']) - now).total_seconds())}")
    for service in shown["services"]:
        state = f"stale: no update for {age(service['updated_ago_s'])}" if service["stale"] else "live"
        print(f"{service['service']} (pid {service['pid']}, {state}): {printable(service['status'])}")
    if not shown["services"]:
        print("no service has run against this database yet")
    return 0
