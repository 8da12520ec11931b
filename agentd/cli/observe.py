"""The agent's history and state from the operator's side: `agentd events`, `agentd status`."""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentd import frozen_value
from agentd.cli.common import (
    add_command,
    agent_store,
    count,
    full_config,
    held_input_words,
    moment,
    option,
    print_json,
    record_id,
    viewed_store,
    wants_json,
)
from agentd.cli.watch import add_watch_option
from agentd.clock import SystemClock, age, ago, format_ts, parse_ts, relative, since
from agentd.edge import printable, visible_json
from agentd.errors import InputError

if TYPE_CHECKING:
    from agentd.records import RuntimeEvent


def register(commands: Any) -> None:
    events = add_command(commands, "events", cmd_events, "the event log, newest first")
    events.add_argument(
        "--follow", "-f", action="store_true", help="keep printing new events (from now, unless --after/--since/--last)"
    )
    events.add_argument("--task", type=record_id, metavar="ID", help="only this task's events")
    events.add_argument(
        "--type",
        dest="types",
        action="append",
        default=[],
        metavar="TYPE",
        help="only events of this type (repeatable)",
    )
    events.add_argument("--after", type=count, default=None, metavar="SEQUENCE", help="start after this sequence")
    events.add_argument(
        "--since",
        type=moment,
        metavar="WHEN",
        help="only events at or after WHEN: a UTC time, or an age like 30m, 2h, 7d",
    )
    events.add_argument(
        "--before",
        type=record_id,
        metavar="SEQUENCE",
        help="page back: the newest --limit events before this sequence (what the last line said to type)",
    )
    events.add_argument(
        "--until", type=moment, metavar="WHEN", help="only events before WHEN: a UTC time, or an age like 30m, 2h"
    )
    events.add_argument("--last", type=count, metavar="N", help="only the newest N (still printed oldest first)")
    events.add_argument("--limit", type=count, default=1000, help="at most this many (default 1000)")
    events.add_argument(
        "--oldest-first",
        action="store_true",
        help="in the log's order, from the start or --after (--json, --follow, --after and --last already are)",
    )
    events.add_argument(
        "--format",
        choices=("text", "json", "agent-runtime"),
        help='agent-runtime: one seed-002 public-core event envelope per line (docs/evidence.md, "Export")',
    )

    status = add_command(
        commands,
        "status",
        cmd_status,
        "what waits and why, what runs, which services are live, the boundary (--watch: redrawn)",
    )
    status.add_argument(
        "--format", choices=("text", "json", "agent-runtime"), help="agent-runtime: a seed-002 session snapshot"
    )
    add_watch_option(status, "status", cmd_status)


DETAIL_CHARS = 160


def detail(payload: dict[str, Any]) -> str:
    """An event's payload on one line: key=value, values as JSON (no Python reprs); a long one is
    cut with a marker saying how much is left (`--json` shows it all)."""
    if isinstance(payload.get("todos"), list):  # todos_updated: where the list stands, not all of it
        from agentd.outlook.activity import todo_counts

        payload = {**payload, "todos": todo_counts(payload["todos"])}
    text = " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}" for k, v in payload.items())
    if len(text) <= DETAIL_CHARS:
        return text
    return f"{text[:DETAIL_CHARS]}… (+{len(text) - DETAIL_CHARS} chars)"


# Every column but the last is as wide as its widest value, so the header lines up with every row: the
# longest event type's length (agentd/records/event_names.py, not imported here: `--help` loads no
# record; tests/test_event_columns.py holds the two equal).
TYPE_WIDTH = 27
EVENT_HEADER = f"{'SEQ':>6}  {'TIME':<20}  {'TYPE':<{TYPE_WIDTH}}  DETAIL"


def cmd_events(args: argparse.Namespace) -> int:
    if option(args, "follow") and option(args, "before") is not None:
        raise InputError("--before pages back through the log; --follow reads on from its end: give one")
    with viewed_store(args) as (view, store):
        if args.task is not None:
            store.get_task_or_raise(args.task)  # a task that does not exist is an error, not an empty log
        args.agent_id = view["agent_id"]
        _events(args, store)
    return 0


@frozen_value
class Order:
    """How `agentd events` reads and prints (docs/operate.md, "Commands"): `newest` reads the newest
    --limit (before --before), `shown_newest_first` prints them newest first."""

    newest: bool
    shown_newest_first: bool


def order_of(args: argparse.Namespace) -> Order:
    """Text for a person lists the newest first; reading forward (--after, --last, --follow,
    --oldest-first) and the machine formats (--json, agent-runtime) keep the log's order, as they did.
    --before pages back in either: the newest --limit before it, printed in the format's order."""
    text = option(args, "format") in (None, "text") and not option(args, "json", False)
    forward = option(args, "follow") or args.after is not None or args.last is not None
    oldest_first = forward or bool(option(args, "oldest_first"))
    newest = option(args, "before") is not None or (text and not oldest_first)
    return Order(newest, newest and text and not oldest_first)


def _events(args: argparse.Namespace, store: Any) -> None:
    """Print the chosen events; with --follow keep polling. Following alone starts at the end."""
    from_start = args.after is not None or args.since is not None or args.last is not None
    after = args.after or 0
    if option(args, "follow") and not from_start:
        after = store.last_event_sequence()
    query = {"task_id": args.task, "types": tuple(args.types), "since": args.since, "until": option(args, "until")}
    read = order_of(args)
    events = store.read_events(
        after=after,
        limit=args.last if args.last is not None else args.limit,
        last=args.last is not None,
        before=option(args, "before"),
        newest_first=read.newest,
        **query,
    )
    events = events[::-1] if read.newest and not read.shown_newest_first else events
    if _format(args) == "text" and not option(args, "follow"):
        _print_text(args, events)
        return
    if _format(args) == "text":
        print(EVENT_HEADER, flush=True)
    while True:
        for event in events:
            _print_event(args, event)
            after = event.sequence
        if not option(args, "follow"):
            return
        if len(events) < args.limit:
            time.sleep(0.5)  # the follower polls; the database is the only channel
        store.require_present(reading=True)  # deleted or replaced meanwhile: say so, do not follow nothing
        events = store.read_events(after=after, limit=args.limit, **query)


def _print_text(args: argparse.Namespace, events: list[Any]) -> None:
    """The events as text lines under the header, each run of migration_applied one line (unless asked
    for by --type), and when a newest-first page is full, the command that shows the page before it."""
    print(EVENT_HEADER, flush=True)
    fold = "migration_applied" not in args.types
    for run in _runs(events) if fold else [[event] for event in events]:
        print(event_text(run[0]) if len(run) == 1 else folded_text(run), flush=True)
    limit = args.last if args.last is not None else args.limit
    if order_of(args).shown_newest_first and events and len(events) >= limit:
        print(f"# older: agentd events --before {events[-1].sequence} (with the same filters)", flush=True)


def _runs(events: list[Any]) -> list[list[Any]]:
    """The events in runs: each migration_applied run together, every other event alone."""
    runs: list[list[Any]] = []
    for event in events:
        if event.type == "migration_applied" and runs and runs[-1][0].type == "migration_applied":
            runs[-1].append(event)
        else:
            runs.append([event])
    return runs


def folded_text(run: list[Any]) -> str:
    """A run of migration_applied events as one line: how many, their sequences and versions."""
    ends = sorted((run[0], run[-1]), key=lambda event: event.sequence)
    versions = sorted(v for v in (e.payload.get("version") for e in run) if isinstance(v, int))
    said = f"{len(run)} migrations applied (sequences {ends[0].sequence}-{ends[1].sequence}"
    said += f", versions {versions[0]}-{versions[-1]})" if versions else ")"
    parts = [f"{run[0].sequence:>6}", format_ts(run[0].timestamp)[:19] + "Z", f"{run[0].type:<{TYPE_WIDTH}}", said]
    return printable("  ".join(parts))


def _format(args: argparse.Namespace) -> str:
    return str(option(args, "format") or ("json" if wants_json(args) else "text"))


def _print_event(args: argparse.Namespace, event: RuntimeEvent) -> None:
    if _format(args) == "agent-runtime":
        from agentd.outlook.runtime_facts import runtime_events

        for shown in runtime_events(event, args.agent_id):  # the event, then each further fact it carries
            print(visible_json(json.dumps(shown, ensure_ascii=False)), flush=True)
        return
    if _format(args) == "json":
        from agentd.records import event_json

        print(visible_json(event_json(event)), flush=True)  # a bidi override in a subject stays visible
        return
    print(event_text(event), flush=True)


def event_text(event: Any) -> str:
    """One event as `agentd events` prints it."""
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
    rest = " ".join(part for part in (ids, detail(event.payload)) if part)
    parts = [f"{event.sequence:>6}", format_ts(event.timestamp)[:19] + "Z", f"{event.type:<{TYPE_WIDTH}}", rest]
    return printable("  ".join(parts).rstrip())


def _budget_line(budget: dict[str, Any]) -> str:
    """Today's spend against the caps; `~` marks a total some of which agentd estimated (codex)."""
    from agentd.config.budget import usd

    total = usd(budget["spent_usd"], budget["estimated"])
    caps = [f"{total} of ${budget['daily_usd']:g} today" if budget["daily_usd"] else f"{total} today"]
    caps += [
        f"{a} {usd(s['spent_usd'], s['estimated'])}" + (f" of ${s['daily_usd']:g}" if s["daily_usd"] else "")
        for a, s in budget["adapters"].items()
    ]
    line = "budget   " + ", ".join(caps) + " (UTC day; ~ = estimated by agentd from the adapter's prices)"
    holding = budget["holding"]
    if holding:
        line += (
            f"\nBUDGET   {holding['waiting']} task(s) wait until {holding['until']}: {holding['reason']} "
            f"(priority {budget['urgent_priority']} and more urgent still run)"
        )
    return line


def cmd_status(args: argparse.Namespace) -> int:
    found = _status(args)
    if found is None:  # agent-runtime: printed already
        return 0
    shown, now = found
    if _format(args) == "json":
        print_json(shown)
        return 0
    print(f"agent {shown['agent_id']}  database {shown['database']}  schema version {shown['schema_version']}")
    print(f"boundary {shown['boundary']['line']}")
    print(f"limits   {shown['limits']['line']}")
    print(printable(f"network  {shown['network']['line']}"))
    for line in shown["governance"]:
        print(printable(f"policy   {line}"))
    print("tasks    " + "  ".join(f"{status} {n}" for status, n in shown["counts"].items()))
    waiting = shown["waiting"]
    print(
        f"waiting  {waiting['claimable']} claimable now, {waiting['retry_waiting']} waiting to retry, "
        f"{waiting['delayed']} delayed, {waiting['approval']} waiting for approval, {waiting['paused']} paused, "
        f"{waiting['after']} after another task, {waiting['budget']} for the budget"
        + (f", {waiting['resting']} for a provider's reset" if waiting.get("resting") else "")
    )
    for reset in shown.get("provider_resets", []):
        print(
            printable(
                f"RESET    adapter(s) {', '.join(reset['adapters'])}: waiting for the provider's reset at "
                f"{reset['until']} ({relative(parse_ts(reset['until']), now)}): {reset['reason']}"
            )
        )
    if shown["budget"]:
        print(_budget_line(shown["budget"]))
    if shown["messages"]["failed"]:
        print(
            f"MESSAGES {shown['messages']['failed']} external message(s) failed for good: "
            "`agentd outbox list --state failed` shows them, `agentd outbox retry ID` sends one again"
        )
    _print_waiting_on_a_person(shown, now)
    _print_violations(shown, now)
    if shown["paused"]:
        paused = shown["paused"]
        why = f": {paused['reason']}" if paused["reason"] else ""
        print(printable(f"PAUSED   since {paused['since']} by {paused['by']}{why} (`agentd dispatch resume`)"))
    oldest = shown["oldest_pending_age_s"]
    print(f"oldest claimable task: waiting {age(oldest)}" if oldest is not None else "oldest claimable task: none")
    if shown["next_available_at"]:
        print(f"next waiting task due: {ago(parse_ts(shown['next_available_at']), now)}")
    _print_archive(shown.get("archive"))
    for run in shown["running"]:
        _print_running(run, now)
    for service in shown["services"]:
        print(printable(_service_line(service)))
    if not shown["services"]:
        print("no service has run against this database yet")
    _print_backup(shown.get("backup"), now)
    return 0


def _print_backup(backup: dict[str, Any] | None, now: datetime) -> None:
    """The last good backup (docs/backup-and-archive.md); shouted once it is older than twice its schedule."""
    if backup is None:
        return
    when = relative(parse_ts(backup["at"]), now)
    line = f"backup   last good {when}, {backup['bytes']:,} bytes, in {backup['dest']}"
    if backup["overdue"]:
        line = (
            f"BACKUP   the last good backup is {age(backup['age_s'])} old, more than twice its schedule "
            f"({age(backup['every_s'])}): {backup['dest']} (`journalctl -u agentd-backup@NAME.service`)"
        )
    print(printable(line))


def _print_archive(archive: dict[str, Any] | None) -> None:
    """The archive's queue (docs/backup-and-archive.md, "Archive"): sealed folders not yet in the bucket."""
    if not archive:
        return
    oldest = f", the oldest sealed {age(archive['oldest_age_s'])} ago" if archive["oldest_age_s"] is not None else ""
    off = "" if archive["enabled"] else " (archiving is off: [archive] bucket is not set)"
    print(f"archive  {archive['queued']} sealed attempt folder(s) not yet in the bucket{oldest}{off}")


def _print_violations(shown: dict[str, Any], now: datetime) -> None:
    """The attempts of the last day ended because a tool call ran without the policy's decision (docs/policy.md)."""
    for violated in shown.get("policy_violations", []):
        print(
            printable(
                f"VIOLATION task {violated['task_id']}: attempt {violated['attempt_id']} was ended "
                f"{relative(parse_ts(violated['ended_at']), now)}, a tool call ran without the policy's decision: "
                f"{violated['error']} "
                f"(`agentd task show {violated['task_id']}`; docs/policy.md)"
            )
        )


def _print_waiting_on_a_person(shown: dict[str, Any], now: datetime) -> None:
    """The approvals and the tool calls held for a person (docs/policy.md), the oldest request first; every age
    from the exact times and the one `now` (issue 52)."""
    if shown["oldest_approval_age_s"] is not None:
        print(f"oldest approval request: waiting {age(shown['oldest_approval_age_s'])} (`agentd approvals`)")
    for call in shown["held_calls"]:
        print(
            printable(
                f"WAITING  tool call {call['call_id']} of task {call['task_id']} for "
                f"{since(parse_ts(call['requested_at']), now)}: "
                f"{call['summary']} [{held_input_words(call)}; `agentd approvals` shows it whole] "
                "(`agentd approve --call ID` or `agentd deny --call ID --reason R`)"
            )
        )


def _print_running(run: dict[str, Any], now: datetime) -> None:
    """A running task, or a LOST one: its attempt is open and no live dispatcher runs it (one rule for every
    view: agentd/outlook/liveness.py `lost_reason`)."""
    attempt = f"attempt {run['attempt_id']} on {run['adapter_id']}"
    if run.get("lost"):
        print(
            f"LOST     task {run['task_id']}: {run['lost']} ({run['task_type']}, {attempt}, claimed "
            f"{relative(parse_ts(run['started_at']), now)}); starting the dispatcher reclaims it (the boot sweep)"
        )
    else:
        state = run.get("state") or {}
        shown = f" [{state['status']}: {state['reason']}]" if state.get("status") not in (None, "running") else ""
        took = since(parse_ts(run["started_at"]), now)
        print(printable(f"running  task {run['task_id']} ({run['task_type']}), {attempt} for {took}{shown}"))
    if run.get("waiting_for"):
        print(printable(f"  waiting for a decision on {run['waiting_for']}"))
    if run.get("activity"):  # a lost task's too: what it was last seen doing
        from agentd.outlook.activity import activity_lines  # only when something runs: it loads the records

        for line in activity_lines(run["activity"]):
            print(f"  {line}")


SERVICE_WORDS = {
    "live": "live",
    "stale": "STALE: running, but silent for {quiet}",
    "down": "DOWN: its process is gone; last heard from {quiet} ago",
    "stopped": "stopped {quiet} ago",
    "unknown": "unknown: another host wrote this row ({quiet} ago)",
}


def _status(args: argparse.Namespace) -> tuple[dict[str, Any], datetime] | None:
    """The snapshot `status` prints (agentd/outlook/snapshot.py), from the config's view and one read; the
    agent-runtime format, which reads the whole config, prints its own."""
    if _format(args) != "agent-runtime":
        from agentd.outlook.snapshot import AgentView, agent_snapshot

        with viewed_store(args) as (view, store):
            now = SystemClock().now()
            return agent_snapshot(AgentView.of(view), store, now, lambda: full_config(view)), now
    from agentd.outlook.status import snapshot

    with agent_store(args, readonly=True) as (config, store):
        now = SystemClock().now()
        shown = snapshot(config, store, now)
        if _format(args) == "agent-runtime":
            from agentd.outlook.agent_runtime import session_snapshot

            print_json(session_snapshot(config, store, shown, now))
            return None
    return shown, now


def _service_line(service: dict[str, Any]) -> str:
    state = SERVICE_WORDS[service["liveness"]].format(quiet=age(service["updated_ago_s"]))
    said = "" if service["liveness"] in ("down", "stopped") else f": {service['status']}"
    return f"{service['service']:<8} pid {service['pid']}, {state}{said}"
