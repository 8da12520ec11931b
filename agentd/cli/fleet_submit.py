"""`agentd fleet submit`: one task from its flags, or many from JSON lines (`--batch FILE|-`), each judged by
the one rule below before anything reaches PostgreSQL (docs/fleet.md, "Submitting many")."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentd.cli.common import input_problems, print_json, wants_json
from agentd.clock import format_ts
from agentd.edge import quoted
from agentd.errors import AgentdError, InputError, Interrupted

if TYPE_CHECKING:
    from agentd.config import Config
    from agentd.store import FleetQueue, FleetTask, Submission

CHUNK = 500  # submissions per transaction, as `task add --batch` writes (docs/operate.md, "Many tasks at once")
# What a line may hold, and the flag each field is for one task.
FIELDS = {
    "task_type": "--type",
    "subject": "--subject",
    "payload": "--payload",
    "labels": "--label",
    "priority": "--priority",
    "key": "--key",
}
LABEL_RULE = "letters, digits and . _ : - (starting with a letter or digit, at most 128)"


def judge(fields: dict[str, Any], config: Config, now: datetime, *, flags: bool) -> Submission:
    """One submission as `agentd task add` judges a task (the task type, its payload schema, the intent
    record), plus what the fleet's rows hold (labels, priority 1..10, no U+0000). `flags`: name what is
    wrong by the command's flags (one task) or by the line's fields (--batch)."""
    from pydantic import TypeAdapter, ValidationError

    from agentd.records import TaskIntent
    from agentd.records.base import Identifier
    from agentd.store import Submission
    from agentd.work.batch import field_problems
    from agentd.work.intake import admit_task

    def name(field_name: str) -> str:
        return FIELDS[field_name] if flags else field_name

    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise InputError(f"{unknown[0]}: not a field of a fleet submission (expected {', '.join(FIELDS)})")
    priority = fields.get("priority", 5)
    if type(priority) is not int or not 1 <= priority <= 10:
        raise InputError(f"{name('priority')}: expected 1 (most urgent) to 10 (least urgent), found {quoted(priority)}")
    payload = fields.get("payload", {})
    if not isinstance(payload, dict):
        raise InputError(f"{name('payload')}: expected a JSON object, found {type(payload).__name__}")
    key = fields.get("key")
    if key is not None and not isinstance(key, str):
        raise InputError(f"{name('key')}: expected a string, found {quoted(key)}")
    labels = fields.get("labels", [])
    if not isinstance(labels, list):
        raise InputError(f"{name('labels')}: expected a list of labels, found {quoted(labels)}")
    label_rule: TypeAdapter[str] = TypeAdapter(Identifier)  # what [fleet] labels may name
    for index, label in enumerate(labels):
        try:
            label_rule.validate_python(label, strict=True)
        except ValidationError:
            where = name("labels") if flags else f"labels[{index}]"
            raise InputError(f"{where}: expected {LABEL_RULE}, found {quoted(label)}") from None
    subject = fields.get("subject")
    try:
        intent = TaskIntent.model_validate(
            {"task_type": fields.get("task_type"), "source": "fleet", "subject": subject, "payload": payload}
        )
    except ValidationError as exc:
        raise InputError(input_problems(exc) if flags else field_problems(exc)) from None
    admit_task(intent, config, now, trusted=False)
    new = Submission(intent.task_type, subject, payload, tuple(labels), priority, key)
    new.check(FIELDS if flags else None)
    return new


def origin_of(args: argparse.Namespace, now: datetime) -> dict[str, Any]:
    """Who submitted, from where: the same for every task of one command."""
    from pydantic import ValidationError

    from agentd.process.privilege import operator_name
    from agentd.records.fleet import FleetOrigin

    try:
        return FleetOrigin.model_validate(
            {
                "submitted_by": operator_name(),
                "dispatch_context": {
                    "originSurface": args.origin_surface,
                    "originProductId": args.origin_product,
                    "dispatchMode": args.dispatch_mode,
                    "initiatedAt": format_ts(now),
                },
            }
        ).model_dump()
    except ValidationError as exc:
        raise InputError(f"--origin-product: {exc.errors()[0]['msg']}") from None


# --- many -------------------------------------------------------------------------------------------------


def given_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The per-task flags given on the command line, by field name (an unset flag is absent)."""
    given = {name: getattr(args, name) for name in FIELDS}
    return {name: value for name, value in given.items() if value is not None and value != []}


def judge_batch(args: argparse.Namespace, config: Config, now: datetime) -> list[tuple[int, Submission]]:
    """Every line of --batch judged; one bad line and nothing is sent (InputError naming each by number)."""
    from agentd.cli.common import opened_input
    from agentd.work import batch

    given = given_fields(args)
    if given:
        flags = ", ".join(FIELDS[name] for name in given)
        raise InputError(f"{flags}: not with --batch; each line gives its own task's fields")

    def judge_one(raw: bytes) -> Submission:
        return judge(batch.line_object(raw, "a fleet submission"), config, now, flags=False)

    with opened_input(args.batch, "--batch") as stream:
        judged = batch.judge_each(batch.read_lines(stream), judge_one)
    if judged.bad:
        raise batch.refusal(judged)
    return judged.tasks


Sent = list[tuple[int, "FleetTask", bool]]  # (line, task, new)


def send(
    queue: FleetQueue,
    submissions: list[tuple[int, Submission]],
    origin: dict[str, Any],
    stop: Callable[[], str | None] = lambda: None,
) -> tuple[Sent, AgentdError | None]:
    """CHUNK submissions per transaction, in line order; a failed transaction ends it (those before are in),
    as does a signal (`stop`, asked before each transaction: cli/common.py stop_between)."""
    sent: Sent = []
    try:
        queue.require_current()
        for start in range(0, len(submissions), CHUNK):
            if (signal_name := stop()) is not None:
                return sent, Interrupted(signal_name)
            chunk = submissions[start : start + CHUNK]
            done = queue.submit_many([new for _, new in chunk], origin=origin)
            sent += [(number, task, fresh) for (number, _), (task, fresh) in zip(chunk, done, strict=True)]
    except AgentdError as exc:
        return sent, exc
    return sent, None


def resume_note(sent: Sent, total: int) -> str:
    if not sent:
        return "nothing of the batch was sent"
    last = sent[-1][0]
    return (
        f"lines 1–{last} were submitted ({len(sent):,} of {total:,}); the lines after {last} were not: resume "
        f"from line {last + 1} (a line with a key is the same task however often it is sent)"
    )


def report(args: argparse.Namespace, sent: Sent) -> None:
    from agentd.cli.common import input_name
    from agentd.work.batch import id_ranges

    if wants_json(args):
        print_json([{"line": number, "fleet_id": task.fleet_id, "new": fresh} for number, task, fresh in sent])
        return
    if not sent:
        print(f"no submissions in {input_name(args.batch)} (only blank lines)")
        return
    fresh = [task.fleet_id for _, task, new in sent if new]
    again = len(sent) - len(fresh)
    repeated = f"; {again:,} already submitted with their keys" if again else ""
    ids = id_ranges(sorted({task.fleet_id for _, task, _ in sent}))
    print(f"{len(fresh):,} fleet tasks submitted from {input_name(args.batch)}{repeated}: fleet ids {ids}")
