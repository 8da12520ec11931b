"""`agentd task list --order claim`: the queue as the dispatcher takes it (seed 002's queue_snapshot). The
tasks it would claim now, numbered in the order it claims them (priority, then available_at, then id:
agentd/store/claim.py), then every other waiting task by when it falls due, each with why it waits
(agentd/outlook/taskstate.py)."""

from __future__ import annotations

import argparse
from typing import Any

from agentd.cli.common import print_table, store_command
from agentd.clock import SystemClock, format_ts


def claim_order(config: Any, store: Any, limit: int) -> list[dict[str, Any]]:
    """Each waiting task in claim order: its position (None: not claimable now), the record, its state."""
    from agentd.config.budget import budget_hold, day_start
    from agentd.outlook.taskstate import state_facts, task_state

    now = SystemClock().now()
    with store.snapshot():
        hold = budget_hold(config, store.spend_since(day_start(now)), now) if config.budget.capped else None
        tasks, claimable = store.claim_order(now, hold, limit)
        ids = [t.task_id for t in tasks]
        facts = state_facts(store, config, now, ids)
        attempts = store.attempts_by_task(ids)
        states = [task_state(t, attempts[t.task_id], facts) for t in tasks]
    return [
        {"position": index + 1 if index < claimable else None, "task": task, "state": state.as_json()}
        for index, (task, state) in enumerate(zip(tasks, states, strict=True))
    ]


def cmd_claim_order(args: argparse.Namespace) -> int:
    if args.status:
        from agentd.errors import InputError

        raise InputError("--order claim lists the waiting tasks (pending, retryable_failure): give no --status")
    return store_command(args, lambda config, store: claim_order(config, store, args.limit), _print, readonly=True)


def _print(rows: list[dict[str, Any]]) -> None:
    print_table(
        ["#", "ID", "STATE", "PRI", "TYPE", "AVAILABLE", "WHY", "SUBJECT"],
        [
            (
                row["position"] or "-",
                row["task"].task_id,
                row["state"]["status"],
                row["task"].priority,
                row["task"].task_type,
                format_ts(row["task"].available_at)[:19] + "Z",
                row["state"]["reason"] or ("claimable now" if row["position"] else "not due yet"),
                row["task"].subject or "",
            )
            for row in rows
        ],
    )
