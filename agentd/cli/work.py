"""Workflows, recurring schedules and sensors from the operator's side."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from agentd.cli.common import (
    add_command,
    agent_store,
    config_from,
    count,
    duration,
    input_problems,
    json_object,
    note,
    option,
    print_fields,
    print_json,
    print_table,
    priority,
    record_id,
    store_command,
    store_from,
    wants_json,
)
from agentd.clock import SystemClock, age, format_ts
from agentd.errors import InputError, NotFound

if TYPE_CHECKING:
    from agentd.records import RecurringScheduleRecord, WorkflowRecord


def register(commands: Any) -> None:
    workflow = commands.add_parser("workflow", help="start and inspect workflows").add_subparsers(
        dest="workflow_command", metavar="SUBCOMMAND", required=True
    )
    start = add_command(
        workflow, "start", cmd_workflow_start, "start a workflow; the dispatcher creates its first task"
    )
    start.add_argument("workflow_type", metavar="TYPE", help="a workflow type of the config ([[workflows]])")
    start.add_argument(
        "instance_key", metavar="INSTANCE_KEY", help="names this run; a live workflow of the type with it is refused"
    )
    start.add_argument("--context", default="{}", help="JSON object handed to each step task as its payload")
    start.add_argument("--state", help="start in this state instead of the initial one")
    lst = add_command(workflow, "list", cmd_workflow_list, "workflows, newest first")
    lst.add_argument(
        "--status",
        action="append",
        choices=("active", "completed", "blocked", "canceled"),
        default=[],
        help="only these (repeatable)",
    )
    lst.add_argument("--limit", type=count, default=50, help="at most this many (default 50)")
    show = add_command(workflow, "show", cmd_workflow_show, "a workflow's state history with the task of each step")
    show.add_argument("workflow_id", type=record_id, metavar="ID", help="the workflow's id (`workflow list`)")
    register_steering(workflow)

    schedule = commands.add_parser("schedule", help="recurring schedules").add_subparsers(
        dest="schedule_command", metavar="SUBCOMMAND", required=True
    )
    add = add_command(schedule, "add", cmd_schedule_add, "add a recurring schedule that enqueues a task every interval")
    add.add_argument("schedule_id", metavar="ID", help="a name for the schedule: letters, digits and . _ : -")
    add.add_argument(
        "--every",
        type=duration("s"),
        required=True,
        metavar="DURATION",
        help="interval: 90s, 15m, 2h, 1d (a bare number is seconds)",
    )
    add.add_argument("--type", dest="task_type", required=True, help="the task type to enqueue")
    add.add_argument("--subject", help="each task's subject")
    add.add_argument("--payload", default="{}", help="each task's payload, a JSON object (default {})")
    add.add_argument("--priority", type=priority, help="1 (most urgent) to 10 (least); default 5")
    add.add_argument("--name", help="a label for `schedule list` (default: the id)")
    add.add_argument("--disabled", action="store_true", help="add it switched off")
    add_command(schedule, "list", cmd_schedule_list, "schedules with their next and last runs")
    rm = add_command(schedule, "rm", cmd_schedule_rm, "remove a schedule added with `agentd schedule add`")
    rm.add_argument("schedule_id", metavar="ID", help="the schedule's id (`schedule list`)")

    sensor = commands.add_parser("sensor", help="inspect and run sensors").add_subparsers(
        dest="sensor_command", metavar="SUBCOMMAND", required=True
    )
    add_command(sensor, "list", cmd_sensor_list, "sensors: interval, last run, last result, next due")
    run = add_command(sensor, "run", cmd_sensor_run, "run one sensor now and record what it observed")
    run.add_argument("sensor_id", metavar="ID", help="a sensor of the config (`sensor list`)")
    run.add_argument("--dry-run", action="store_true", help="print what it would create; write nothing")


def register_steering(workflow: Any) -> None:
    """`agentd workflow signal|unblock|cancel`: the operator's steering acts, each recorded with the
    OS user who ran the command and why."""
    signal = add_command(
        workflow, "signal", cmd_workflow_signal, "apply a signal to an active workflow as if its current step gave it"
    )
    signal.add_argument("workflow_id", type=record_id, metavar="ID", help="an active workflow")
    signal.add_argument("signal", metavar="SIGNAL", help="one its current state accepts (`workflow show` lists them)")
    unblock = add_command(
        workflow, "unblock", cmd_workflow_unblock, "make a blocked workflow active again: it re-enters a state"
    )
    unblock.add_argument("workflow_id", type=record_id, metavar="ID", help="a blocked workflow")
    unblock.add_argument("--state", help="enter this state instead of the one it blocked in")
    cancel = add_command(
        workflow, "cancel", cmd_workflow_cancel, "end an active or blocked workflow; its queued step task is canceled"
    )
    cancel.add_argument("workflow_id", type=record_id, metavar="ID", help="an active or blocked workflow")
    for parser in (signal, unblock, cancel):
        parser.add_argument("--reason", type=note("--reason"), help="why: recorded with the act")


def cmd_workflow_start(args: argparse.Namespace) -> int:
    from agentd import control

    context = json_object(args.context, "--context")

    def said(workflow: WorkflowRecord) -> None:
        print(
            f"workflow {workflow.workflow_id} started ({workflow.workflow_type} {workflow.instance_key!r}, "
            f"state {workflow.current_state})"
        )

    return store_command(
        args,
        lambda config, store: control.start_workflow(
            config, store, args.workflow_type, args.instance_key, context, args.state, SystemClock().now()
        ),
        said,
    )


def cmd_workflow_list(args: argparse.Namespace) -> int:
    return store_command(
        args,
        lambda _, store: store.list_workflows(statuses=tuple(args.status), limit=args.limit),
        _print_workflows,
        readonly=True,
    )


def _print_workflows(workflows: list[WorkflowRecord]) -> None:
    print_table(
        ["ID", "TYPE", "INSTANCE", "STATUS", "STATE", "ITERATION", "UPDATED"],
        [
            (
                w.workflow_id,
                w.workflow_type,
                w.instance_key,
                w.status,
                w.current_state,
                w.iteration,
                format_ts(w.updated_at),
            )
            for w in workflows
        ],
    )


def cmd_workflow_show(args: argparse.Namespace) -> int:
    def shown(_: Any, store: Any) -> dict[str, Any]:
        workflow = store.get_workflow_or_raise(args.workflow_id)
        steps = store.workflow_steps(workflow.workflow_id)
        return {"workflow": workflow, "steps": steps, "events": store.read_events(workflow_id=workflow.workflow_id)}

    return store_command(args, shown, _print_workflow, readonly=True)


def _print_workflow(shown: dict[str, Any]) -> None:
    workflow, steps, events = shown["workflow"], shown["steps"], shown["events"]
    print_fields(workflow.model_dump(mode="json").items())
    print("\nsteps")
    print_table(
        ["ITERATION", "STATE", "TASK", "STATUS", "SIGNAL", "SUMMARY"],
        [
            (
                t.workflow_iteration,
                t.workflow_ref.state_id if t.workflow_ref else "",
                t.task_id,
                t.status,
                t.outcome.workflow_signal if t.outcome else "",
                (t.outcome.operator_summary if t.outcome else "")[:60],
            )
            for t in steps
        ],
    )
    print("\nevents")
    print_table(
        ["SEQ", "TIME", "TYPE", "TASK"], [(e.sequence, format_ts(e.timestamp), e.type, e.task_id) for e in events]
    )


def cmd_workflow_signal(args: argparse.Namespace) -> int:
    from agentd import control

    def said(result: Any) -> None:
        workflow, change = result
        if change.kind == "complete":
            print(f"workflow {workflow.workflow_id} completed on signal {args.signal!r} from {control.operator()}")
        else:
            print(
                f"workflow {workflow.workflow_id} moved to {workflow.current_state} (iteration {workflow.iteration}) "
                f"on signal {args.signal!r} from {control.operator()}"
            )

    return store_command(
        args,
        lambda config, store: control.signal_workflow(
            config, store, args.workflow_id, args.signal, args.reason, SystemClock().now()
        ),
        said,
        as_json=lambda result: result[0],
    )


def cmd_workflow_unblock(args: argparse.Namespace) -> int:
    from agentd import control

    def said(workflow: WorkflowRecord) -> None:
        print(
            f"workflow {workflow.workflow_id} unblocked by {control.operator()}: it re-enters "
            f"{workflow.current_state} (iteration {workflow.iteration}); the dispatcher creates its step"
        )

    return store_command(
        args,
        lambda config, store: control.unblock_workflow(
            config, store, args.workflow_id, args.state, args.reason, SystemClock().now()
        ),
        said,
    )


def cmd_workflow_cancel(args: argparse.Namespace) -> int:
    from agentd import control

    def said(canceled: Any) -> None:
        tasks = ", ".join(map(str, canceled.canceled_task_ids))
        print(
            f"workflow {canceled.workflow.workflow_id} canceled by {control.operator()}"
            + (f"; step task {tasks} ended operator_canceled" if tasks else "")
        )
        for task_id in canceled.running_task_ids:
            stop = f"`agentd task cancel {task_id}` stops it"
            print(f"  step task {task_id} is running; its signal will be ignored ({stop})")

    return store_command(
        args,
        lambda config, store: control.cancel_workflow(
            config, store, args.workflow_id, args.reason, SystemClock().now()
        ),
        said,
        as_json=vars,
    )


def cmd_schedule_add(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from agentd import control
    from agentd.config.settings import YEAR_S
    from agentd.records import ScheduleSpec

    every = int(args.every)
    if not 1 <= every <= YEAR_S or every != args.every:
        raise InputError(f"--every: expected whole seconds from 1s to 365d, found {args.every:g}s")
    task: dict[str, Any] = {"task_type": args.task_type, "payload": json_object(args.payload, "--payload")}
    if args.subject:
        task["subject"] = args.subject
    if args.priority is not None:
        task["priority"] = args.priority
    fields = {"schedule_id": args.schedule_id, "name": args.name, "enabled": not args.disabled}
    try:
        spec = ScheduleSpec.model_validate({**fields, "interval_seconds": every, "task": task})
        with agent_store(args) as (config, store):
            schedule = control.add_schedule(config, store, spec, SystemClock().now())
    except ValidationError as exc:
        raise InputError(input_problems(exc)) from None
    if wants_json(args):
        print_json(schedule)
    else:
        print(f"schedule {schedule.schedule_id} added: a {args.task_type} task every {age(every)}, first due now")
    return 0


def cmd_schedule_list(args: argparse.Namespace) -> int:
    return store_command(args, lambda _, store: store.list_schedules(), _print_schedules, readonly=True)


def _print_schedules(schedules: list[RecurringScheduleRecord]) -> None:
    print_table(
        ["ID", "ENABLED", "EVERY", "TASK TYPE", "NEXT RUN", "LAST RUN", "SKIPPED"],
        [
            (
                s.schedule_id,
                "yes" if s.enabled else "no",
                f"{s.interval_seconds}s",
                s.task.task_type,
                format_ts(s.next_run_at),
                format_ts(s.last_run_at) if s.last_run_at else "never",
                _skipped(s),
            )
            for s in schedules
        ],
    )


def _skipped(schedule: RecurringScheduleRecord) -> str:
    """The slots that made no task because the last one was still open (schedule_slot_skipped is
    written only for the first of each run of them)."""
    if schedule.skipped_for_task_id is None:
        return "none"
    latest = f"{schedule.skipped_slots} while task {schedule.skipped_for_task_id} was open"
    earlier = schedule.skipped_slots_total - schedule.skipped_slots
    return latest + (f", {earlier} before" if earlier else "")


def cmd_schedule_rm(args: argparse.Namespace) -> int:
    from agentd import control

    with agent_store(args) as (config, store):
        control.remove_schedule(config, store, args.schedule_id, SystemClock().now())
    if not wants_json(args):
        print(f"schedule {args.schedule_id} removed")
    return 0


def cmd_sensor_list(args: argparse.Namespace) -> int:
    with agent_store(args, readonly=True) as (config, store):
        states = store.sensor_states()
    now = SystemClock().now()
    rows: list[dict[str, Any]] = []
    for sensor in sorted(config.sensor_definitions.values(), key=lambda s: s.sensor_id):
        state = states.get(sensor.sensor_id)
        rows.append(
            {
                "sensor_id": sensor.sensor_id,
                "enabled": sensor.manifest.enabled,
                "interval_seconds": sensor.manifest.interval_seconds,
                "last_run_at": format_ts(state.last_run_at) if state and state.last_run_at else None,
                "last_result": state.last_result if state else None,
                "next_due_at": format_ts(state.next_run_at) if state and state.next_run_at else None,
                "runs": state.runs if state else 0,
            }
        )
    if wants_json(args):
        print_json(rows)
        return 0
    print_table(
        ["ID", "ENABLED", "EVERY", "LAST RUN", "LAST RESULT", "NEXT DUE"],
        [
            (
                r["sensor_id"],
                "yes" if r["enabled"] else "no",
                f"{r['interval_seconds']:g}s",
                r["last_run_at"] or "never",
                r["last_result"] or "",
                _due(r["next_due_at"], now),
            )
            for r in rows
        ],
    )
    return 0


def _due(next_due: str | None, now: Any) -> str:
    from agentd.clock import parse_ts

    if next_due is None:
        return "now"
    seconds = (parse_ts(next_due) - now).total_seconds()
    return "now" if seconds <= 0 else f"in {age(seconds)}"


def cmd_sensor_run(args: argparse.Namespace) -> int:
    # imported here, not at the top: `agentd task add` and `agentd status` must not pay for it
    import anyio

    from agentd.services.sensor_runs import SensorRunner
    from agentd.store import AsyncStore

    config = config_from(args)
    sensor = config.sensor_definitions.get(args.sensor_id)
    if sensor is None:
        raise NotFound(f"no sensor {args.sensor_id!r}; known: {', '.join(sorted(config.sensor_definitions)) or 'none'}")
    db = AsyncStore(store_from(config))
    try:
        runner = SensorRunner(config, db, SystemClock())
        runner.check()
        report = anyio.run(lambda: runner.run(sensor, dry_run=option(args, "dry_run", False)))
        keys = [a.event.dedupe_key for a in report.accepted]
        seen = db.store.seen_dedupe_keys(sensor.sensor_id, keys) if option(args, "dry_run", False) else set()
    finally:
        db.close()
    proposed: list[dict[str, Any]] = [
        {
            "line": a.line,
            "dedupe_key": a.event.dedupe_key,
            "seen": a.event.dedupe_key in seen,
            "stale": a.stale,
            "task": {"task_type": a.task.task_type, "subject": a.task.subject} if a.task else None,
            "workflow": vars(a.workflow) if a.workflow else None,
        }
        for a in report.accepted
    ]
    rejected = [{"line": r.line, "reason": r.reason} for r in report.rejected]
    if wants_json(args):
        print_json(
            {
                "sensor_id": sensor.sensor_id,
                "result": report.result,
                "error": report.error,
                "counts": report.counts.as_dict(),
                "events": proposed,
                "rejected": rejected,
            }
        )
    else:
        print(f"sensor {sensor.sensor_id}: {report.result}" + (f" ({report.error})" if report.error else ""))
        if args.dry_run:
            for item in proposed:
                what = item["task"] or item["workflow"] or ("stale" if item["stale"] else "recorded only")
                if item["seen"]:
                    what = "already seen: nothing to do"
                print(f"  line {item['line']}: {item['dedupe_key']} → {what}")
        else:
            print("  " + "  ".join(f"{k} {v}" for k, v in report.counts.as_dict().items()))
        for item in rejected:
            print(f"  line {item['line']} rejected: {item['reason']}")
    return 0 if report.result == "ok" else 1
