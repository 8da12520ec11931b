"""The hot commands without pydantic: `agentd task add`, `approve` and `deny` from the config's cached view
(agentd/cli/fast/cache.py) and plain rows (agentd/store/plain.py). `status`, `events`, `task list`, `task show`
and `approvals` have one path already (agentd/cli/common.py `viewed_store`).

Each function here answers only where it is sure to answer as the full path would, and returns None
everywhere else (no view, a budget, --json of a record, anything refused): the command then runs the
full path, which says what is wrong in its own words. Nothing is written before that choice is made.
Tests hold both paths to the same output on the same database (tests/test_fast_cli.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from agentd.cli.common import config_path_from, json_object, wants_json
from agentd.clock import SystemClock, format_ts
from agentd.edge import Refused, check_json_size, check_value
from agentd.schema_check import compile_check

DEFAULT_PRIORITY = 5  # agentd/work/intake.py


def cached_view(args: argparse.Namespace) -> dict[str, Any] | None:
    """The config's cached view, if it is still exactly what a full load would give."""
    from agentd.cli.fast.cache import read_view

    return read_view(config_path_from(args))


@contextmanager
def plain_store(view: dict[str, Any], *, readonly: bool = True) -> Iterator[Any | None]:
    """The agent's database opened without the records (agentd/store/plain.py), closed after the
    block; None where there is none to open (the full path then says why)."""
    from agentd.store.plain import open_plain

    store = open_plain(Path(view["database"]), SystemClock(), readonly=readonly)
    try:
        yield store
    finally:
        if store is not None:
            store.close()


@contextmanager
def plain_reader(args: argparse.Namespace) -> Iterator[tuple[dict[str, Any], Any] | None]:
    """The config's cached view and the database opened read-only without the records; None where the
    full path must answer (no view that is still exact, no database to open)."""
    view = cached_view(args)
    if view is None:
        yield None
        return
    with plain_store(view) as store:
        yield None if store is None else (view, store)


# --- agentd task add ------------------------------------------------------------------------------


def task_add(args: argparse.Namespace) -> int | None:
    """Enqueue the task as agentd/control `add_task` would, for an intent the full path would accept
    as it is: no --at (a time pydantic parses), no approval, no --json (that prints the record)."""
    if args.at is not None or args.require_approval or wants_json(args):
        return None
    view = cached_view(args)
    if view is None:
        return None
    now = SystemClock().now()
    new = admitted(view["intake"], intent_fields(args), now)
    if new is None:
        return None
    return _enqueue(view, new, now)


def intent_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The intent's fields as `task add`'s flags give them (--at aside: a time pydantic parses), before
    pydantic: what agentd/cli/queue.py `intent_from_args` validates, refusing a --payload that is no
    JSON object and a reserved --source."""
    from agentd.process.privilege import operator_source

    payload = json_object(args.payload, "--payload")
    fields: dict[str, Any] = {
        "task_type": args.task_type,
        "source": operator_source(args.source),
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
        fields["schedule"] = {"delay_minutes": args.delay / 60}
    if args.artifacts:
        fields["evidence_requirements"] = {"required_artifacts": args.artifacts}
    return fields


def admitted(intake: dict[str, Any], fields: dict[str, Any], now: datetime) -> dict[str, Any] | None:
    """The task agentd/work/intake.py `admit_task` would make of this intent, or None wherever the full
    path could answer otherwise (a refusal, an approval, anything the compiled checks do not settle)."""
    check = compile_check(intake["intent_schema"])  # TaskIntent's own JSON Schema, from the view
    spec = intake["task_types"].get(fields["task_type"])
    if check is None or not check(fields) or spec is None or spec["requires_approval"]:
        return None
    try:
        check_value(fields["payload"], "value")  # the record's own edge checks (agentd/records/base.py)
        check_json_size(fields["payload"], "payload")
    except Refused:
        return None
    payload_check = compile_check(intake["payload_schemas"][spec["payload_schema_id"]])
    if payload_check is None or not payload_check(fields["payload"]) or not _known(intake, fields, spec):
        return None
    try:
        available_at = now + timedelta(minutes=fields["schedule"]["delay_minutes"]) if "schedule" in fields else now
    except OverflowError:
        return None
    return _new_task(intake, fields, spec, available_at)


def _known(intake: dict[str, Any], fields: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Every id the intent names is one the config declares, each skill allowed, each artifact inside."""
    from pathlib import PurePosixPath

    for key, known in (("requested_profile_id", "profiles"), ("requested_adapter_id", "adapters")):
        if fields[key] is not None and fields[key] not in intake[known]:
            return False
    if fields["requested_model"] is not None and fields["requested_model"] not in intake["models"]:
        return False
    allowed = spec["allowed_skill_ids"]
    for skill in fields["skill_ids"] or ():
        if skill not in intake["skills"] or (allowed is not None and skill not in allowed):
            return False
    artifacts = fields.get("evidence_requirements", {}).get("required_artifacts") or ()
    return not any(PurePosixPath(p).is_absolute() or ".." in PurePosixPath(p).parts for p in artifacts)


def _new_task(
    intake: dict[str, Any], fields: dict[str, Any], spec: dict[str, Any], available: datetime
) -> dict[str, Any]:
    return {
        "task_type": fields["task_type"],
        "source": fields["source"],
        "subject": fields["subject"],
        "description": fields["description"],
        "priority": fields["priority"] if fields["priority"] is not None else DEFAULT_PRIORITY,
        "payload": fields["payload"],
        "requested_profile_id": fields["requested_profile_id"]
        or spec["default_profile_id"]
        or intake["default_profile_id"],
        "requested_adapter_id": fields["requested_adapter_id"],
        "requested_model": fields["requested_model"],
        "skill_ids": tuple(fields["skill_ids"] or ()),
        "evidence_requirements": fields.get("evidence_requirements"),
        "max_attempts": spec["max_attempts"] or intake["default_max_attempts"],
        "available_at": available,
    }


def _enqueue(view: dict[str, Any], new: dict[str, Any], now: datetime) -> int | None:
    from agentd.process.privilege import operator_name, refuse_inside_attempt
    from agentd.process.wake import poke
    from agentd.store.plain import enqueue_plain

    refuse_inside_attempt(view["run_as"], "this command writes to the agent's database", view["sensors_run_as"])
    with plain_store(view, readonly=False) as store:
        if store is None:
            return None
        task_id = enqueue_plain(store, new, now, {"by": operator_name()})
    poke(Path(view["state_dir"]))
    when = "now" if format_ts(new["available_at"]) <= format_ts(now) else format_ts(new["available_at"])
    print(f"task {task_id} enqueued ({new['task_type']}, priority {new['priority']}, available {when})")
    return 0


# --- agentd approvals, approve --------------------------------------------------------------------


def resolve(args: argparse.Namespace, *, approved: bool, note: str | None) -> str | None:
    """Approve or deny a task held before its first claim as agentd/control `resolve_approval` does; who
    decided, or None (nothing written) wherever the full path must answer: --json, any other approval,
    none."""
    if wants_json(args):
        return None
    view = cached_view(args)
    if view is None:
        return None
    from agentd.process.privilege import operator_name, refuse_inside_attempt
    from agentd.process.wake import poke
    from agentd.store.plain import resolve_claim

    refuse_inside_attempt(view["run_as"], "this command writes to the agent's database", view["sensors_run_as"])
    with plain_store(view, readonly=False) as store:
        if store is None:
            return None
        who = operator_name()
        done = resolve_claim(store, args.task_id, who, note, SystemClock().now(), approved=approved)
    if not done:
        return None
    poke(Path(view["state_dir"]))
    return who
