"""Cost and tokens from the operator's side: `agentd cost`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from agentd.cli.common import (
    add_command,
    config_from,
    count,
    print_json,
    print_table,
    record_id,
    store_from,
    wants_json,
)
from agentd.clock import format_ts, parse_ts
from agentd.errors import InputError

if TYPE_CHECKING:
    from agentd.records import TaskAttempt


def register(commands: Any) -> None:
    cost = add_command(commands, "cost", cmd_cost, "cost and tokens per attempt, with totals by adapter and model")
    cost.add_argument("--task", type=record_id, metavar="ID", help="only this task's attempts")
    cost.add_argument("--since", metavar="TIMESTAMP", help="only attempts that ended at or after this UTC time")
    cost.add_argument("--limit", type=count, default=50, help="attempts to list (totals cover them all)")


def cmd_cost(args: argparse.Namespace) -> int:
    config = config_from(args)
    try:
        since = parse_ts(args.since) if args.since else None
    except ValueError as exc:
        raise InputError(f"--since: {exc}") from None
    store = store_from(config, readonly=True)
    try:
        attempts = store.attempt_usage(task_id=args.task, since=since, limit=args.limit)
        totals = [vars(t) for t in store.cost_totals(task_id=args.task, since=since)]
    finally:
        store.close()
    if wants_json(args):
        print_json({"attempts": [_cost_row(a) for a in attempts], "totals": totals})
        return 0
    print_table(
        ["TASK", "ATTEMPT", "ADAPTER", "MODEL", "IN", "OUT", "CACHE R/W", "COST USD", "ENDED"],
        [_cost_cells(a) for a in attempts],
    )
    print()
    print_table(
        ["ADAPTER", "MODEL", "ATTEMPTS", "IN", "OUT", "COST USD"],
        [
            (
                t["adapter"],
                t["model"],
                t["attempts"],
                t["input_tokens"],
                t["output_tokens"],
                _usd(t["cost_usd"], t["cost_estimated"]),
            )
            for t in totals
        ],
    )
    return 0


def _cost_row(attempt: TaskAttempt) -> dict[str, Any]:
    return {
        "task_id": attempt.task_id,
        "attempt_id": attempt.attempt_id,
        "adapter_id": attempt.adapter_id,
        "model": attempt.model,
        "ended_at": format_ts(attempt.ended_at) if attempt.ended_at else None,
        **(attempt.usage or {}),
    }


def _cost_cells(attempt: TaskAttempt) -> list[Any]:
    usage = attempt.usage or {}
    cache = f"{usage.get('cache_read_tokens', '')}/{usage.get('cache_write_tokens', '')}" if usage else ""
    return [
        attempt.task_id,
        attempt.attempt_id,
        attempt.adapter_id,
        attempt.model or "",
        usage.get("input_tokens", ""),
        usage.get("output_tokens", ""),
        cache.strip("/"),
        _usd(usage.get("cost_usd"), usage.get("cost_estimated", False)),
        format_ts(attempt.ended_at) if attempt.ended_at else "",
    ]


def _usd(cost: float | None, estimated: bool) -> str:
    if cost is None:
        return "-"
    return f"{cost:.6f}" + (" (est.)" if estimated else "")
