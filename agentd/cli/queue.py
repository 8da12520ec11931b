"""The task queue from the operator's side: task add/list/show, events, status."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd.cli import task_steer
from agentd.cli.common import (
    add_command,
    attempts,
    count,
    duration,
    full_config,
    input_problems,
    print_fields,
    print_json,
    print_table,
    priority,
    record_id,
    store_command,
    viewed_store,
    wants_json,
)
from agentd.cli.observe import detail
from agentd.clock import SystemClock, age, ago, format_ts
from agentd.edge import TAIL_BYTES, printable, tail_lines
from agentd.errors import InputError
from agentd.outlook.denials import denials_line
from agentd.vocabulary import TASK_STATUSES, counted

if TYPE_CHECKING:
    from agentd.records import TaskIntent, TaskRecord


def register(commands: Any) -> None:
    task = commands.add_parser(
        "task", help="add, list and inspect tasks; steer one (cancel, retry, pause, resume, edit, complete, fail, link)"
    ).add_subparsers(dest="task_command", metavar="SUBCOMMAND", required=True)
    add = add_command(task, "add", cmd_task_add, "validate and enqueue a task")
    what = add.add_mutually_exclusive_group(required=True)
    what.add_argument("--type", dest="task_type", help="a registered task type")
    what.add_argument("--batch", metavar="FILE", help="many tasks: a task intent per JSON line ('-': stdin)")
    add.add_argument("--subject", help="a one-line title people see in lists (default: none)")
    add.add_argument("--description", help="longer text for the agent, added to its prompt")
    add.add_argument("--priority", type=priority, help="1 (most urgent) to 10 (least); default 5")
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
    when.add_argument(
        "--delay",
        type=duration("m"),
        metavar="DURATION",
        help="available after this long: 90s, 15m, 2h, 1d (a bare number is minutes)",
    )
    when.add_argument("--at", metavar="TIMESTAMP", help="available at this UTC time (operator only)")
    add.add_argument(
        "--source", help="where the task came from (default operator:<you>; agentd's own namespaces are refused)"
    )
    add.add_argument(
        "--require-approval", action="store_true", help="hold it until `agentd approve ID` (or `agentd deny`)"
    )

    lst = add_command(task, "list", cmd_task_list, "tasks, newest first")
    lst.add_argument("--status", action="append", choices=TASK_STATUSES, default=[], help="only these (repeatable)")
    lst.add_argument("--limit", type=count, default=50, help="at most this many (default 50)")
    lst.add_argument(
        "--order",
        choices=("newest", "claim"),
        default="newest",
        help="claim: the waiting tasks in the order the dispatcher takes them, each with why it waits",
    )

    show = add_command(task, "show", cmd_task_show, "one task: its record, attempts and events")
    show.add_argument("task_id", type=record_id, metavar="ID", help="the task's id (`agentd task list` shows them)")

    cancel = add_command(
        task, "cancel", cmd_task_cancel, "cancel a task: a waiting one at once, a running one by stopping its adapter"
    )
    cancel.add_argument("task_id", type=record_id, metavar="ID", help="the task to cancel")

    retry = add_command(
        task, "retry", cmd_task_retry, "re-queue a permanently failed, blocked or canceled task; its history stays"
    )
    retry.add_argument("task_id", type=record_id, metavar="ID", help="the task to run again")
    retry.add_argument(
        "--attempts",
        type=attempts,
        default=None,
        metavar="N",
        help="attempts it gets (default: its task type's max_attempts)",
    )
    task_steer.register(task)


def intent_from_args(args: argparse.Namespace) -> TaskIntent:
    from pydantic import ValidationError

    from agentd.cli.fast.commands import intent_fields
    from agentd.records import TaskIntent

    fields = intent_fields(args)
    if args.at is not None:
        fields["available_at"] = args.at
    try:
        return TaskIntent.model_validate(fields)
    except ValidationError as exc:
        raise InputError(input_problems(exc)) from None


def cmd_task_add(args: argparse.Namespace) -> int:
    from agentd.cli.fast import commands as quick

    fast = quick.task_add(args)  # without pydantic, where it answers as the full path would
    if fast is not None:
        return fast
    from agentd import control

    if args.batch is not None:
        from agentd.cli.batch import cmd_task_add_batch

        return cmd_task_add_batch(args)
    intent = intent_from_args(args)
    return store_command(
        args,
        lambda config, store: control.add_task(
            config, store, intent, SystemClock().now(), require_approval=args.require_approval
        ),
        _print_added,
    )


def _print_added(task: TaskRecord) -> None:
    when = "now" if task.available_at <= task.created_at else format_ts(task.available_at)
    held = "; waiting for approval (`agentd approve`)" if task.awaiting_approval else ""
    print(f"task {task.task_id} enqueued ({task.task_type}, priority {task.priority}, available {when}){held}")


def _delegation(task: TaskRecord, chain: list[int]) -> str | None:
    if task.parent_task_id is None:
        return None
    path = " ← ".join(f"task {t}" for t in chain)
    return f"follow-up of task {task.parent_task_id} ({task.delegation_depth} deep: {path})"


def cmd_task_list(args: argparse.Namespace) -> int:
    if args.order == "claim":
        from agentd.cli.claim_order import cmd_claim_order

        return cmd_claim_order(args)
    with viewed_store(args) as (view, store):
        listed = _listed(view, store, tuple(args.status), args.limit)
    if wants_json(args):
        print_json([task for task, _ in listed])  # the records, as `agentd schema export` describes them
    else:
        _print_tasks(listed)
    return 0


def _listed(view: dict[str, Any], store: Any, statuses: tuple[str, ...], limit: int) -> list[tuple[TaskRecord, Any]]:
    """The tasks newest first, each in its state as every view shows it (agentd/outlook/states.py), from one
    read and one clock."""
    from agentd.outlook.states import task_state

    now = SystemClock().now()
    with store.snapshot():
        tasks = store.list_tasks(statuses=statuses, limit=limit)
        ids = [t.task_id for t in tasks]
        facts = state_facts(view, store, now, ids)
        attempts = store.attempts_by_task(ids)
    return [(t, task_state(t, attempts.get(t.task_id, []), facts)) for t in tasks]


def state_facts(view: dict[str, Any], store: Any, now: datetime, task_ids: list[int]) -> Any:
    """agentd/outlook/taskstate.py `state_facts` from the config's view: the whole config is loaded only
    for a budget's hold."""
    from agentd.outlook.states import read_facts

    held: dict[int, str] = {}
    if view["budget_capped"]:
        from agentd.outlook.taskstate import budget_held

        held = budget_held(store, full_config(view), now)
    return read_facts(store.tx, now, task_ids, held)


def _print_tasks(listed: list[tuple[Any, Any]]) -> None:
    """The tasks, each with its state (agentd/outlook/states.py), which the STATE column says instead of
    agentd's status."""
    print_table(
        ["ID", "STATE", "PRI", "TYPE", "ATTEMPTS", "AVAILABLE", "SUBJECT"],
        [
            (
                t.task_id,
                state.status,
                t.priority,
                t.task_type,
                f"{t.attempt_count}/{t.max_attempts}",
                format_ts(t.available_at)[:19] + "Z",
                t.subject or "",
            )
            for t, state in listed
        ],
    )


def cmd_task_show(args: argparse.Namespace) -> int:
    with viewed_store(args) as (view, store):
        shown = _task_shown(view, store, args.task_id)
    if wants_json(args):
        print_json({key: value for key, value in shown.items() if key != "now"})
    else:
        _print_shown(shown)
    return 0


def delegation_chain(parent: int | None, parent_of: Callable[[int], int | None]) -> list[int]:
    """The task ids whose outcomes led to a task, nearest first (dispatch context, seed 003), from its
    parent; `parent_of` gives a task's parent (None for none, or for a task not there)."""
    chain: list[int] = []
    while parent is not None and parent not in chain and len(chain) < 1000:
        chain.append(parent)
        parent = parent_of(parent)
    return chain


def _parent(store: Any, task_id: int) -> int | None:
    found = store.get_task(task_id)
    return found.parent_task_id if found is not None else None


def _task_shown(view: dict[str, Any], store: Any, task_id: int) -> dict[str, Any]:
    """The task, its attempts, events, delegation chain and (a fleet's task) its lease, as --json prints them."""
    now = SystemClock().now()  # one clock for the state's reason and every time the text says
    with store.snapshot():
        task = store.get_task_or_raise(task_id)
        shown = {
            "task": task,
            "attempts": store.attempts_of(task.task_id),
            "events": store.read_events(task_id=task.task_id, limit=100_000),
            "delegation_chain": delegation_chain(task.parent_task_id, lambda t: _parent(store, t)),
            **_steering(view, store, task, now),
            "now": now,
        }
        fleet = store.fleet_lease_of(task.task_id)
    return {**shown, "fleet": fleet} if fleet else shown


def _steering(view: dict[str, Any], store: Any, task: TaskRecord, now: datetime) -> dict[str, Any]:
    """Its state as every view shows it (agentd/outlook/states.py), what it waits for, what waits for it,
    its follow-ups (docs/operate.md, "Steer one task")."""
    from agentd.outlook.states import task_state

    facts = state_facts(view, store, now, [task.task_id])
    links = store.links_of([task.task_id])
    return {
        "state": task_state(task, store.attempts_of(task.task_id), facts).as_json(),
        "after": [{"task_id": x.before_id, "status": x.before_status} for x in links if x.after_id == task.task_id],
        "before": [x.after_id for x in links if x.before_id == task.task_id],
        "follow_ups": store.follow_ups_of([task.task_id]).get(task.task_id, []),
    }


def _print_shown(shown: dict[str, Any]) -> None:
    task, attempts, events, chain = shown["task"], shown["attempts"], shown["events"], shown["delegation_chain"]
    fleet = shown.get("fleet")
    now = shown.get("now") or SystemClock().now()
    print_task(task, now, chain)
    _print_steering(shown)
    if fleet:
        context = fleet["origin"]["dispatch_context"]
        print_fields(
            [
                ("fleet", f"fleet task {fleet['fleet_id']}, token {fleet['token']}, lease {fleet['state']}"),
                ("  lost", fleet.get("lost_reason")),
                (
                    "  from",
                    f"{fleet['origin']['submitted_by']} via {context['originSurface']} "
                    f"({context['originProductId']}, {context['dispatchMode']}) at {context['initiatedAt']}",
                ),
            ]
        )
    outcomes = {e.attempt_id: e.payload.get("outcome") for e in events if e.type == "task_attempt_finished"}
    if attempts:
        print("\nattempts")
        print_table(
            ["#", "ATTEMPT", "ADAPTER", "MODEL", "OUTCOME", "EXIT", "ENDED BY", "STARTED", "TOOK"],
            [
                (
                    a.attempt_number,
                    a.attempt_id,
                    a.adapter_id,
                    a.model or "-",
                    outcomes.get(a.attempt_id) or ("running" if a.ended_at is None else "-"),
                    a.exit_status or "-",
                    a.termination_reason or "-",
                    ago(a.started_at, now),
                    age(((a.ended_at or now) - a.started_at).total_seconds()),
                )
                for a in attempts
            ],
        )
        _print_usage(attempts)
        print("\nevidence")
        for a in attempts:
            pruned = f"  (deleted by retention {ago(a.evidence_pruned_at, now)})" if a.evidence_pruned_at else ""
            print(f"  #{a.attempt_number}  {printable(a.evidence_dir or '(none: the attempt never started)')}{pruned}")
        _print_failure_tails(attempts, outcomes)
    denials = [e.payload for e in events if e.type == "policy_denied"]
    if denials:  # tool calls a harness's permission policy refused; each is a policy_denied event below
        print("\n" + printable(denials_line(denials)))
    print(f"\nevents ({len(events)}; `agentd events --task {task.task_id} --json` has every field)")
    print_table(
        ["SEQ", "TIME", "TYPE", "DETAIL"],
        [(e.sequence, format_ts(e.timestamp)[:19] + "Z", e.type, detail(e.payload)) for e in events],
    )


def _print_usage(attempts: list[Any]) -> None:
    """Each attempt's tokens and cost, where it reported any (docs/connect-a-model.md: where tokens are shown)."""
    lines = [(a.attempt_number, line) for a in attempts if (line := usage_line(a.usage or {}))]
    if lines:
        print("\ntokens")
        print("\n".join(f"  #{number}  {line}" for number, line in lines))


def usage_line(usage: dict[str, Any]) -> str | None:
    """`11 in, 7 out, 5 cache read; $0.0001 (estimated)`: the counts an attempt has, its cost if known."""
    names = {"input_tokens": "in", "output_tokens": "out", "cache_read_tokens": "cache read",
             "cache_write_tokens": "cache write"}  # fmt: skip
    counts = ", ".join(f"{usage[key]:,} {name}" for key, name in names.items() if usage.get(key) is not None)
    cost = usage.get("cost_usd")
    priced = None if cost is None else f"${cost:.4f}" + (" (estimated)" if usage.get("cost_estimated") else "")
    return "; ".join(part for part in (counts, priced) if part) or None


def _print_steering(shown: dict[str, Any]) -> None:
    """The state, where it says more than the status (agentd/outlook/states.py), and the task's links and
    follow-ups."""
    from agentd.outlook.states import NATIVE

    state, task = shown["state"], shown["task"]
    said = state["reason"] and not task.awaiting_approval  # its `approval` row says why
    plain = state["status"] == NATIVE.get(task.status)  # the header's status says it already
    print_fields(
        [
            ("state", f"{state['status']}: {state['reason']}" if said else None if plain else state["status"]),
            ("after", ", ".join(f"task {x['task_id']} ({x['status']})" for x in shown.get("after", [])) or None),
            ("before", ", ".join(f"task {t}" for t in shown.get("before", [])) or None),
            ("follow-ups", ", ".join(f"task {t}" for t in shown.get("follow_ups", [])) or None),
        ]
    )


def _print_failure_tails(attempts: list[Any], outcomes: dict[str, Any]) -> None:
    """The last lines each failed attempt wrote to stderr, as sealed in its evidence (redacted): where the
    cause of a failure usually is (docs/operate.md, "When an attempt fails")."""
    for a in attempts:
        failed = a.ended_at is not None and outcomes.get(a.attempt_id) not in (None, "completed")
        lines = stderr_tail(a.evidence_dir) if failed and a.evidence_dir else []
        if lines:
            print(f"\nstderr of attempt {a.attempt_number} (its last lines)")
            print("\n".join(f"  {line}" for line in lines))


def stderr_tail(evidence_dir: str) -> list[str]:
    """The end of an attempt's stderr.log (agentd/edge.py `tail_lines`), or nothing where there is none."""
    from agentd.process.files import read_tail_beneath

    found = read_tail_beneath(Path(evidence_dir), "stderr.log", TAIL_BYTES)
    return tail_lines(found[0], cut=found[1]) if found else []


def cmd_task_cancel(args: argparse.Namespace) -> int:
    from agentd import control

    def said(result: Any) -> None:
        if result.action == "canceled":
            print(f"task {args.task_id} canceled")
        else:
            print(f"task {args.task_id} is running: the dispatcher will stop its adapter and record operator_canceled")

    return store_command(
        args,
        lambda config, store: control.cancel_task(config, store, args.task_id, SystemClock().now()),
        said,
        as_json=lambda result: {"task": result.task, "action": result.action},
    )


def cmd_task_retry(args: argparse.Namespace) -> int:
    from agentd import control

    def said(task: TaskRecord) -> None:
        more = task.max_attempts - task.attempt_count + task.free_attempt_count
        print(f"task {task.task_id} re-queued with {counted(more, 'more attempt', 'more attempts')} (history kept)")

    return store_command(
        args,
        lambda config, store: control.retry_task(config, store, args.task_id, args.attempts, SystemClock().now()),
        said,
    )


def print_task(task: TaskRecord, now: datetime, chain: list[int] | None = None) -> None:
    print(f"task {task.task_id}  {task.status}  ({task.task_type}, priority {task.priority})")
    used = f"{task.attempt_count} of {task.max_attempts}"
    rows: list[tuple[str, Any]] = [
        ("subject", task.subject),
        ("description", task.description),
        ("source", task.source),
        ("delegated", _delegation(task, chain or [])),
        ("approval", "waiting (`agentd approve` / `agentd deny`)" if task.awaiting_approval else None),
        ("created", ago(task.created_at, now)),
        ("available", ago(task.available_at, now) if task.status in ("pending", "retryable_failure") else None),
        ("started", ago(task.started_at, now) if task.started_at else None),
        ("finished", ago(task.finished_at, now) if task.finished_at else None),
        ("attempts", used + (f" (+{task.free_attempt_count} not counted)" if task.free_attempt_count else "")),
        ("profile", task.requested_profile_id),
        ("adapter", task.requested_adapter_id),
        ("model", task.requested_model),
        ("skills", ", ".join(task.skill_ids) or None),
        ("workflow", _workflow(task)),
        ("schedule", task.schedule_id),
        ("cancel", f"requested {ago(task.cancel_requested_at, now)}" if task.cancel_requested_at else None),
        ("payload", task.payload or None),
        ("last error", task.last_error),
    ]
    print_fields(rows)
    if task.outcome:
        outcome = task.outcome
        print(f"\noutcome  {outcome.status} ({outcome.machine_status})")
        print_fields(
            [
                ("  summary", outcome.operator_summary),
                ("  artifacts", ", ".join(outcome.artifact_paths or []) or None),
                ("  changed", ", ".join(outcome.file_changes or []) or None),
                ("  signal", outcome.workflow_signal),
                ("  follow-ups", len(outcome.follow_up_tasks or []) or None),
                ("  messages", len(outcome.external_messages or []) or None),
            ]
        )


def _workflow(task: TaskRecord) -> str | None:
    ref = task.workflow_ref
    if ref is None:
        return None
    return f"{ref.workflow_id} ({ref.instance_key}), step {ref.state_id} #{task.workflow_iteration}"
