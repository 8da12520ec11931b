"""Steering one task from the command line (docs/operate.md, "Steer one task"): `agentd task pause`,
`resume`, `edit`, `complete`, `fail`, `link` and `unlink`. Each is recorded with the OS user who ran it,
and refused inside an attempt (agentd/cli/common.py `store_from`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from agentd.cli.common import add_command, duration, json_object, note, priority, record_id, store_command
from agentd.clock import SystemClock, format_ts

if TYPE_CHECKING:
    from agentd.control.steering import Declared


TASK_ID = "the task's id (`agentd task list` shows them)"


def register(task: Any) -> None:
    """The steering verbs, under `agentd task`."""
    pause = add_command(task, "pause", cmd_pause, "hold one task: it is not claimed until `task resume`")
    pause.add_argument("task_id", type=record_id, metavar="ID", help=TASK_ID)
    pause.add_argument("--reason", type=note("--reason"), help="why: shown in `task show` and status")
    resume = add_command(task, "resume", cmd_resume, "let a paused task be claimed again")
    resume.add_argument("task_id", type=record_id, metavar="ID", help=TASK_ID)

    edit = add_command(task, "edit", cmd_edit, "change a waiting task's priority, availability or payload")
    edit.add_argument("task_id", type=record_id, metavar="ID", help=TASK_ID)
    edit.add_argument("--priority", type=priority, help="1 (most urgent) to 10 (least)")
    when = edit.add_mutually_exclusive_group()
    when.add_argument("--delay", type=duration("m"), metavar="DURATION", help="available this long from now: 15m, 2h")
    when.add_argument("--at", metavar="TIMESTAMP", help="available at this UTC time")
    edit.add_argument("--payload", help="a new payload (JSON), judged against its type's schema; before any attempt")

    for name, verb, said in (
        ("complete", cmd_complete, "close a waiting task as completed, with the reason"),
        ("fail", cmd_fail, "close a waiting task as permanent_failure, with the reason"),
    ):
        closer = add_command(task, name, verb, said)
        closer.add_argument("task_id", type=record_id, metavar="ID", help=TASK_ID)
        closer.add_argument(
            "--reason", required=True, type=note("--reason", required=True), help="why: its outcome says it"
        )

    for name, verb, said in (
        ("link", cmd_link, "run a waiting task only after another has completed"),
        ("unlink", cmd_unlink, "remove a link `task link` made"),
    ):
        linker = add_command(task, name, verb, said)
        linker.add_argument("task_id", type=record_id, metavar="ID", help=TASK_ID)
        linker.add_argument("--after", required=True, type=record_id, metavar="OTHER", help="the task it waits for")


def cmd_pause(args: argparse.Namespace) -> int:
    from agentd.control import steering

    def said(result: Any) -> None:
        task, made = result
        pause = f"task {task.task_id} {'paused' if made else 'was already paused'}"
        running = "; its running attempt finishes, then it is not claimed again" if task.status == "running" else ""
        print(f"{pause}{running} until `agentd task resume {task.task_id}`")

    return store_command(
        args,
        lambda config, store: steering.pause_task(config, store, args.task_id, args.reason, SystemClock().now()),
        said,
        as_json=lambda result: {"task": result[0], "changed": result[1]},
    )


def cmd_resume(args: argparse.Namespace) -> int:
    from agentd.control import steering

    return store_command(
        args,
        lambda config, store: steering.resume_task(config, store, args.task_id, SystemClock().now()),
        lambda result: print(f"task {result[0].task_id} resumed (it was {result[1].describe()})"),
        as_json=lambda result: {"task": result[0], "paused_by": result[1].paused_by},
    )


def cmd_edit(args: argparse.Namespace) -> int:
    from agentd.control import steering

    payload = json_object(args.payload, "--payload") if args.payload is not None else None

    def edit(config: Any, store: Any) -> Any:
        return steering.edit_task(
            config, store, args.task_id, SystemClock().now(), priority=args.priority, delay_s=args.delay,
            at=args.at, payload=payload,
        )  # fmt: skip

    def said(task: Any) -> None:
        print(f"task {task.task_id} edited: priority {task.priority}, available {format_ts(task.available_at)}")

    return store_command(args, edit, said)


def _close(args: argparse.Namespace, status: Declared) -> int:
    from agentd.control import steering

    return store_command(
        args,
        lambda config, store: steering.close_task(
            config, store, args.task_id, status, args.reason, SystemClock().now()
        ),
        lambda task: print(
            f"task {task.task_id} {task.status}: {task.outcome.operator_summary if task.outcome else ''}"
        ),
    )


def cmd_complete(args: argparse.Namespace) -> int:
    return _close(args, "completed")


def cmd_fail(args: argparse.Namespace) -> int:
    return _close(args, "permanent_failure")


def cmd_link(args: argparse.Namespace) -> int:
    from agentd.control import steering

    def said(link: Any) -> None:
        done = "; it has completed, so this waits for nothing" if link.before_status == "completed" else ""
        print(f"task {link.after_id} runs only after task {link.before_id} has completed{done}")

    return store_command(
        args,
        lambda config, store: steering.link_tasks(config, store, args.task_id, args.after, SystemClock().now()),
        said,
        as_json=lambda link: {"after": link.after_id, "before": link.before_id, "before_status": link.before_status},
    )


def cmd_unlink(args: argparse.Namespace) -> int:
    from agentd.control import steering

    return store_command(
        args,
        lambda config, store: steering.unlink_tasks(config, store, args.task_id, args.after, SystemClock().now()),
        lambda _: print(f"task {args.task_id} no longer waits for task {args.after}"),
        as_json=lambda _: {"after": args.task_id, "before": args.after, "linked": False},
    )
