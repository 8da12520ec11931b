"""The outbox from the operator's side: `agentd outbox list` (every side effect an outcome asked for,
a message with its delivery state) and `agentd outbox retry` (a failed message, sent again under its
own key)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from agentd.cli.common import add_command, count, print_table, record_id, store_command
from agentd.clock import SystemClock, ago

if TYPE_CHECKING:
    from agentd.records.messages import OutboxItem

STATES = ("pending", "awaiting_handler", "delivered", "failed", "applied", "refused")


def register(commands: Any) -> None:
    outbox = commands.add_parser("outbox", help="side effects outcomes asked for: follow-ups, messages").add_subparsers(
        dest="outbox_command", metavar="SUBCOMMAND", required=True
    )
    listing = add_command(
        outbox,
        "list",
        cmd_outbox_list,
        "list outbox entries, newest first; an external message shows its delivery "
        "(pending, delivered, failed) or why it was refused",
    )
    listing.add_argument("--state", choices=STATES, help="only entries in this state")
    listing.add_argument("--limit", type=count, default=50, help="at most this many (default 50)")
    retry = add_command(
        outbox,
        "retry",
        cmd_outbox_retry,
        "send a failed external message again: pending now, attempts reset, the same idempotency key",
    )
    retry.add_argument("outbox_id", type=record_id, metavar="ID", help="its id in `agentd outbox list`")


def cmd_outbox_list(args: argparse.Namespace) -> int:
    return store_command(
        args,
        lambda _, store: store.list_outbox(state=args.state, limit=args.limit),
        _print_outbox,
        readonly=True,
        as_json=lambda items: [item.as_dict() for item in items],
    )


def _print_outbox(items: list[OutboxItem]) -> None:
    now = SystemClock().now()
    print_table(
        ["ID", "TASK", "KIND", "STATE", "HANDLER", "TRIES", "WHEN", "KEY", "DETAIL"],
        [
            (
                i.outbox_id,
                i.task_id,
                i.kind,
                i.state,
                i.handler_id or "-",
                i.attempts if i.kind == "external_message" else "-",
                _when(i, now),
                i.idempotency_key,
                (i.last_error if i.state in ("pending", "failed") else i.reason) or "",
            )
            for i in items
        ],
    )


def _when(item: OutboxItem, now: Any) -> str:
    if item.state == "pending" and item.next_attempt_at is not None:
        return "next " + ago(item.next_attempt_at, now)
    return ago(item.settled_at or item.created_at, now)


def cmd_outbox_retry(args: argparse.Namespace) -> int:
    from agentd.control.delivery import (  # here: it brings httpx and the runner, which `list` never needs
        POLL_S,
        retry_message,
    )
    from agentd.process.privilege import operator_name

    def said(item: OutboxItem) -> None:
        print(
            f"message {item.outbox_id} is pending again with {item.handler_id} (attempts reset, key "
            f"{item.idempotency_key}); a running dispatcher sends it within {POLL_S:g}s"
        )

    return store_command(
        args,
        lambda config, store: retry_message(config, store, args.outbox_id, operator_name(), SystemClock().now()),
        said,
        as_json=lambda item: item.as_dict(),
    )
