"""Steering a running agent: approvals (`agentd approvals`, `approve`, `deny`) and pausing the
dispatcher (`agentd dispatch pause`, `dispatch resume`). Each act is recorded with the OS user who
ran the command and why (agentd/control/__init__.py)."""

from __future__ import annotations

import argparse
from typing import Any

from agentd.cli.common import (
    CommandError,
    add_command,
    held_input_words,
    note,
    print_json,
    print_table,
    record_id,
    store_command,
    viewed_store,
    wants_json,
)
from agentd.clock import SystemClock, age, format_ts
from agentd.vocabulary import counted


def register(commands: Any) -> None:
    add_command(commands, "approvals", cmd_approvals, "list what waits for an operator's approval, oldest first")
    approve = add_command(
        commands,
        "approve",
        cmd_approve,
        "let a task that waits for approval run, or a held tool call (--call) go ahead",
    )
    approve.add_argument(
        "task_id", type=record_id, metavar="ID", nargs="?", help="the held task's id (`agentd approvals`)"
    )
    approve.add_argument("--call", metavar="CALL_ID", help="a held tool call's id (`agentd approvals` lists them)")
    approve.add_argument("--note", type=note("--note"), help="recorded with the approval")
    deny = add_command(
        commands,
        "deny",
        cmd_deny,
        "refuse a task that waits for approval (it ends operator_canceled), or a held tool call (--call)",
    )
    deny.add_argument(
        "task_id", type=record_id, metavar="ID", nargs="?", help="the held task's id (`agentd approvals`)"
    )
    deny.add_argument("--call", metavar="CALL_ID", help="a held tool call's id (`agentd approvals` lists them)")
    deny.add_argument(
        "--reason",
        required=True,
        type=note("--reason", required=True),
        help="why: recorded, and the task's outcome (or the model, for a call) is told",
    )


def register_dispatch(dispatch: argparse.ArgumentParser) -> None:
    """`agentd dispatch pause|resume`, under the service command."""
    acts = dispatch.add_subparsers(dest="dispatch_command", metavar="[pause|resume]")
    pause = add_command(acts, "pause", cmd_pause, "finish the running attempt, then claim nothing until resumed")
    pause.add_argument("--reason", type=note("--reason"), help="why: shown in status and systemd's STATUS")
    add_command(acts, "resume", cmd_resume, "claim tasks again")
    for parser in (pause, acts.choices["resume"]):
        parser.set_defaults(service=False, log_level=None)


HOLDS = {"claim": "its first claim", "side_effects": "its follow-ups and messages"}


def cmd_approvals(args: argparse.Namespace) -> int:
    with viewed_store(args) as (_, store), store.snapshot():
        waiting = [vars(p) for p in store.pending_approvals()]
        calls = [vars(c) for c in store.pending_calls()]
    now = SystemClock().now()
    if wants_json(args):
        shown = [{**p, "requested_at": format_ts(p["requested_at"])} for p in waiting]
        print_json(shown + [{**c, "scope": "tool_call", "requested_at": format_ts(c["requested_at"])} for c in calls])
        return 0
    rows = [
        (
            p["task_id"],
            p["task_type"],
            HOLDS[p["scope"]],
            age((now - p["requested_at"]).total_seconds()),
            p["reason"] or "",
            p["subject"] or "",
        )
        for p in waiting
    ]
    print_table(["TASK", "TYPE", "HOLDS", "WAITING", "WHY", "SUBJECT"], rows)
    if calls:
        how = "`agentd approve --call ID`, `agentd deny --call ID --reason …`"
        print(f"\n{counted(len(calls), 'tool call')} {'waits' if len(calls) == 1 else 'wait'} for a decision ({how}):")
        held = [
            (c["call_id"], c["task_id"], age((now - c["requested_at"]).total_seconds()), c["summary"], c["rule"])
            for c in calls
        ]
        print_table(["CALL", "TASK", "WAITING", "CALL ASKS FOR", "RULE"], held)
        print("\nwhat each runs if it is allowed, whole (blanks escaped, long runs of them counted: docs/policy.md):")
        for c in calls:
            print(f"{c['call_id']}  {held_input_words(c, whole=True)}")
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    return _resolve(args, approved=True, note=args.note)


def cmd_deny(args: argparse.Namespace) -> int:
    return _resolve(args, approved=False, note=args.reason)


def _resolve(args: argparse.Namespace, *, approved: bool, note: str | None) -> int:
    if (args.call is None) == (args.task_id is None):
        raise CommandError("name a task (ID) or a held tool call (--call CALL_ID), not both", exit_code=2)
    if args.call is not None:
        return _resolve_call(args, approved=approved, note=note)
    from agentd.cli.fast import commands as quick

    if (who := quick.resolve(args, approved=approved, note=note)) is not None:  # as the full path would
        print(_decided(args.task_id, who, approved, "operator_canceled"))
        return 0
    from agentd import control

    def said(result: Any) -> None:
        (task, scope), who = result, control.operator()
        if scope == "side_effects":
            went, decided = ("go ahead", "approved") if approved else ("are refused", "denied")
            print(f"task {task.task_id}'s follow-ups and messages {went} ({decided} by {who})")
        else:
            print(_decided(task.task_id, who, approved, task.status))

    return store_command(
        args,
        lambda config, store: control.resolve_approval(
            config, store, args.task_id, approved=approved, note=note, now=SystemClock().now()
        ),
        said,
        as_json=lambda result: result[0],
    )


def _resolve_call(args: argparse.Namespace, *, approved: bool, note: str | None) -> int:
    """A held tool call (docs/policy.md): the running attempt's hook hears it within a second."""
    from agentd import control

    def said(held: Any) -> None:
        went = "goes ahead" if approved else "is refused"
        print(
            f"call {held.call_id} of task {held.task_id} ({held.summary}; {held_input_words(vars(held))}) {went} "
            f"({held.status} by {held.decided_by})"
        )

    return store_command(
        args,
        lambda config, store: control.resolve_call(
            config, store, args.call, approved=approved, note=note, now=SystemClock().now()
        ),
        said,
        as_json=lambda held: {**vars(held), "requested_at": format_ts(held.requested_at)},
    )


def _decided(task_id: int, who: str, approved: bool, status: str) -> str:
    """What `approve` and `deny` say of a claim approval (a denied task's status: operator_canceled)."""
    if approved:
        return f"task {task_id} approved by {who}; it runs when its turn comes"
    return f"task {task_id} denied by {who}: {status}"


def cmd_pause(args: argparse.Namespace) -> int:
    from agentd import control

    def said(result: Any) -> None:
        pause, made = result
        if made:
            print(f"dispatch {pause.describe()}; a running attempt finishes, nothing more is claimed until resumed")
        else:
            print(f"dispatch was already {pause.describe()}")

    return store_command(
        args,
        lambda config, store: control.pause_dispatch(config, store, args.reason, SystemClock().now()),
        said,
        as_json=lambda result: {
            "paused_at": format_ts(result[0].paused_at),
            "paused_by": result[0].paused_by,
            "reason": result[0].reason,
        },
    )


def cmd_resume(args: argparse.Namespace) -> int:
    from agentd import control

    return store_command(
        args,
        lambda config, store: control.resume_dispatch(config, store, SystemClock().now()),
        lambda ended: print(
            "dispatch was not paused" if ended is None else f"dispatch resumed (it was {ended.describe()})"
        ),
        as_json=lambda ended: {"resumed": ended is not None},
    )
