"""What the API answers and the console shows, read in one store call each: the status, the running
attempt's live activity and todos, a task with its attempts and evidence, the approvals. Plain JSON
objects, so the API returns them as they are and the templates render the same values."""

from __future__ import annotations

import os
import re
import stat
from datetime import datetime
from pathlib import Path
from typing import Any

from agentd.clock import format_ts
from agentd.config import Config
from agentd.edge import TAIL_BYTES, tail_lines
from agentd.errors import InputError
from agentd.outlook.denials import denials_line
from agentd.outlook.status import held_call_view, snapshot
from agentd.outlook.taskstate import state_facts, task_state
from agentd.process.files import Refused, lstat_beneath, read_tail_beneath
from agentd.records import TaskAttempt, TaskRecord, record_json
from agentd.records.event_names import LIVE_EVENT_TYPES
from agentd.store import Store
from agentd.web.inputs import BadInput
from agentd.web.task_page import attempt_outcome, not_applying, verbs_for
from agentd.web.timeline import read_steps

# The live activity of a running attempt (docs/web.md, "The running attempt"): what its harness did, as
# the dispatcher records it while the attempt runs.
ACTIVITY_TYPES = LIVE_EVENT_TYPES
ACTIVITY_SHOWN = 40  # the newest activity events the overview shows of a running attempt
EVENTS_SHOWN = 200  # of a task, in its page
ATTEMPTS_READ = 1000  # the attempt outcomes a task's page reads (max_attempts is far below it)
ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def jsonable(record: TaskRecord | TaskAttempt) -> dict[str, Any]:
    found: dict[str, Any] = record_json(record)
    return found


def status_view(config: Config, store: Store, now: datetime) -> dict[str, Any]:
    """`agentd status --json`, and the running attempts' activity and todos, and what waits for approval."""
    found = snapshot(config, store, now)
    for running in found["running"]:
        running |= activity_of(store, running["task_id"], running["attempt_id"])
    found["approvals"] = approvals_view(store)
    found["last_sequence"] = store.last_event_sequence()
    return found


def activity_of(store: Store, task_id: int, attempt_id: str) -> dict[str, Any]:
    """The newest activity of an attempt, oldest first, and its latest todo list."""
    activity = store.event_rows(
        task_id=task_id, attempt_id=attempt_id, types=ACTIVITY_TYPES, limit=ACTIVITY_SHOWN, last=True
    )
    todos = store.event_rows(task_id=task_id, attempt_id=attempt_id, types=("todos_updated",), limit=1, last=True)
    listed = todos[0]["payload"].get("todos") if todos else None
    return {"recent_activity": activity, "todos": listed if isinstance(listed, list) else []}


# What each approval scope waits for, in an approver's words (docs/operate.md, "Approvals").
SCOPE_WORDS = {"claim": "before it runs", "side_effects": "before its outcome's side effects apply"}


def approvals_view(store: Store) -> list[dict[str, Any]]:
    """What waits for an operator, with each task's payload: what the approver judges."""
    return [
        {
            "approval_id": p.approval_id,
            "task_id": p.task_id,
            "task_type": p.task_type,
            "subject": p.subject,
            "reason": p.reason,
            "scope": p.scope,
            "scope_words": SCOPE_WORDS.get(p.scope, p.scope),
            "payload": store.get_task_or_raise(p.task_id).payload,
            "requested_at": p.requested_at.isoformat().replace("+00:00", "Z"),
        }
        for p in store.pending_approvals()
    ]


def waiting_on_a_person(store: Store, now: datetime) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What waits for an operator, in one read: the approvals, and the tool calls running attempts hold
    (docs/policy.md), each oldest first."""
    with store.snapshot():
        return approvals_view(store), [held_call_view(call, now) for call in store.pending_calls()]


def call_id_of(text: str) -> str:
    """A held call's id from a path: a ULID, or a 422 naming path.call_id."""
    if not ULID.match(text):
        raise BadInput(422, f"not a call id: {text[:40]!r}", "path.call_id", "a ULID, as `agentd approvals` shows")
    return text


def tasks_view(
    config: Config, store: Store, now: datetime, *, statuses: tuple[str, ...], task_type: str | None, limit: int
) -> list[dict[str, Any]]:
    """Tasks newest first, each with its state as every view shows it (agentd/outlook/states.py), from one read
    and the caller's one clock: the API's list and the console's."""
    with store.snapshot():
        tasks = store.tasks_matching(statuses=statuses, task_type=task_type, limit=limit)
        ids = [t.task_id for t in tasks]
        facts = state_facts(store, config, now, ids)
        attempts = store.attempts_by_task(ids)
    return [jsonable(t) | {"state": task_state(t, attempts.get(t.task_id, []), facts).as_json()} for t in tasks]


def task_view(config: Config, store: Store, task_id: int, now: datetime | None = None) -> dict[str, Any]:
    """A task, its attempts (each with the files of its evidence folder and their links), its events and
    the dispatch context it was submitted with; its state's reason says ages from `now` (the page's clock)."""
    task = store.get_task_or_raise(task_id)
    finished = store.event_rows(task_id=task_id, types=("task_attempt_finished",), limit=ATTEMPTS_READ, last=True)
    outcomes = {e["attempt_id"]: e["payload"].get("outcome") for e in finished}
    denied: dict[str, list[dict[str, Any]]] = {}  # what each attempt's harness refused (docs/policy.md, "Two layers")
    for event in store.event_rows(task_id=task_id, types=("policy_denied",), limit=ATTEMPTS_READ, last=True):
        denied.setdefault(event["attempt_id"], []).append(event["payload"])
    attempts = []
    for attempt in store.attempts_of(task_id):
        files = evidence_files(config, task_id, attempt.attempt_id)
        links = [{"name": name, "href": evidence_href(task_id, attempt.attempt_id, name)} for name in files]
        row = jsonable(attempt)
        shown = {
            "evidence": links,
            "stderr_tail": failure_tail(config, attempt),
            "timeline": timeline_of(config, attempt),
            "outcome_words": attempt_outcome(row, outcomes.get(attempt.attempt_id)),
            "denials": denials_line(denied[attempt.attempt_id]) if attempt.attempt_id in denied else None,
        }
        attempts.append(row | shown)
    events = store.event_rows(task_id=task_id, limit=EVENTS_SHOWN, last=True)
    enqueued = next((e for e in store.event_rows(task_id=task_id, types=("task_enqueued",), limit=1)), None)
    payload = enqueued["payload"] if enqueued else None
    context = payload.get("dispatch_context") if isinstance(payload, dict) else None  # an edited one: none
    shown = {"task": jsonable(task), "attempts": attempts, "events": events, "dispatch_context": context}
    return shown | steering_view(config, store, task, now or store.clock.now())


def steering_view(config: Config, store: Store, task: TaskRecord, now: datetime) -> dict[str, Any]:
    """The task's state as every view shows it (agentd/outlook/taskstate.py), its pause, what it waits for,
    what waits for it, and its follow-ups."""
    facts = state_facts(store, config, now, [task.task_id])
    pause = facts.pauses.get(task.task_id)
    links = store.links_of([task.task_id])
    return {
        "state": task_state(task, store.attempts_of(task.task_id), facts).as_json(),
        "approval_scope": approval_scope(store, task.task_id),
        "pause": None
        if pause is None
        else {"since": format_ts(pause.paused_at), "by": pause.paused_by, "reason": pause.reason},
        "after": [{"task_id": x.before_id, "status": x.before_status} for x in links if x.after_id == task.task_id],
        "before": [x.after_id for x in links if x.before_id == task.task_id],
        "follow_ups": store.follow_ups_of([task.task_id]).get(task.task_id, []),
    }


def approval_scope(store: Store, task_id: int) -> str | None:
    """The scope of the task's pending approval (`claim`, `side_effects`), or None: none waits."""
    return next((p.scope for p in store.pending_approvals() if p.task_id == task_id), None)


def refuse_unless_applies(config: Config, store: Store, task_id: int, verb: str) -> None:
    """A console POST of a verb the task's page offers no button for (agentd/web/task_page.py `verbs_for`):
    a 409 saying why, on a page with the navigation, and nothing done."""
    task = store.get_task_or_raise(task_id)
    approval = approval_scope(store, task_id) is not None
    if verb in verbs_for(jsonable(task), store.task_pause(task_id) is not None, approval):
        return
    state = steering_view(config, store, task, store.clock.now())["state"]["status"]
    expected = "a verb the task's page offers a button for"
    raise BadInput(409, not_applying(verb, jsonable(task), state), "path.task_id", expected)


def failure_tail(config: Config, attempt: TaskAttempt) -> list[str]:
    """The last lines a failed attempt wrote to stderr, as sealed in its evidence (redacted, bounded:
    agentd/edge.py `tail_lines`); nothing for one that completed, runs, or left no stderr."""
    failed = attempt.ended_at is not None and (attempt.exit_status != "ok" or attempt.retry_class != "none")
    if not failed or not ULID.fullmatch(attempt.attempt_id):
        return []
    found = read_tail_beneath(evidence_root(config), f"{attempt.task_id}/{attempt.attempt_id}/stderr.log", TAIL_BYTES)
    return tail_lines(found[0], cut=found[1]) if found else []


def timeline_of(config: Config, attempt: TaskAttempt) -> dict[str, Any]:
    """The attempt's tool calls from its sealed action trace (agentd/web/timeline.py); none while it runs."""
    if attempt.ended_at is None or not ULID.fullmatch(attempt.attempt_id):
        return {"steps": [], "total": 0, "problem": None}
    return read_steps(evidence_root(config), f"{attempt.task_id}/{attempt.attempt_id}")


def evidence_href(task_id: int, attempt_id: str, name: str) -> str:
    return f"/evidence/{task_id}/{attempt_id}/{name}"


def evidence_root(config: Config) -> Path:
    return config.paths.state_dir / "attempts"


def evidence_files(config: Config, task_id: int, attempt_id: str) -> list[str]:
    """The regular files of an attempt's evidence folder, by name; links and anything else are left out
    (agentd/process/files.py: nothing is reached through a link)."""
    if not ULID.fullmatch(attempt_id):
        return []
    folder = f"{task_id}/{attempt_id}"
    try:
        if not stat.S_ISDIR(lstat_beneath(evidence_root(config), folder).st_mode):
            return []
        names = sorted(os.listdir(evidence_root(config) / folder))
    except (Refused, OSError):
        return []
    return [name for name in names if FILE_NAME.fullmatch(name) and _regular(config, f"{folder}/{name}")]


def _regular(config: Config, relative: str) -> bool:
    try:
        return stat.S_ISREG(lstat_beneath(evidence_root(config), relative).st_mode)
    except OSError:
        return False


def evidence_path(task_id: int, attempt_id: str, name: str) -> str:
    """The path below the evidence root of one file, or InputError for a name no evidence file has."""
    if not ULID.fullmatch(attempt_id):
        raise InputError(f"attempt_id: expected an attempt id (a ULID), found {attempt_id[:40]!r}")
    if not FILE_NAME.fullmatch(name):
        raise InputError(f"name: expected a file name of the evidence folder, found {name[:40]!r}")
    return f"{task_id}/{attempt_id}/{name}"
