"""Steering one task on an operator's behalf (docs/operate.md, "Steer one task"): pause, resume, edit,
complete or fail with a reason, link after another. The CLI, the API and the console call these, each
with who (`by`), and each rings the dispatcher's doorbell so a change that frees a task is seen at once."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import ValidationError

from agentd.config import Config
from agentd.edge import note_text
from agentd.errors import InputError
from agentd.process.privilege import operator_name
from agentd.process.wake import poke
from agentd.records import TaskIntent, TaskOutcome, TaskRecord, record_json, without_none
from agentd.store import Store, TaskEdit, TaskLink, TaskPause
from agentd.work.intake import admit_task

Declared = Literal["completed", "permanent_failure"]


def pause_task(
    config: Config, store: Store, task_id: int, reason: str | None, now: datetime, *, by: str | None = None
) -> tuple[TaskRecord, bool]:
    paused = store.pause_task(task_id, by or operator_name(), note_text(reason, "reason"), now)
    poke(config.paths.state_dir)
    return paused


def resume_task(
    config: Config, store: Store, task_id: int, now: datetime, *, by: str | None = None
) -> tuple[TaskRecord, TaskPause]:
    resumed = store.resume_task(task_id, by or operator_name(), now)
    poke(config.paths.state_dir)  # it may be claimable now
    return resumed


def edit_task(
    config: Config,
    store: Store,
    task_id: int,
    now: datetime,
    *,
    priority: int | None = None,
    delay_s: float | None = None,
    at: str | None = None,
    payload: dict[str, Any] | None = None,
    by: str | None = None,
) -> TaskRecord:
    """Judge the task as it would be after the edit the way `task add` judges a new one (its payload
    against its type's schema, a priority of 1 to 10, one of --delay and --at), then change it."""
    if delay_s is not None and at is not None:
        raise InputError("--delay and --at: give one, not both")
    task = store.get_task_or_raise(task_id)
    fields = _intent_fields(task, priority, payload)
    if at is not None:
        fields["available_at"] = at
    try:
        intent = TaskIntent.model_validate(fields)
    except ValidationError as exc:
        raise InputError(_problems(exc)) from None
    admitted = admit_task(intent, config, now, trusted=True)
    when = (
        admitted.available_at if at is not None else now + timedelta(seconds=delay_s) if delay_s is not None else None
    )
    edit = TaskEdit(priority, when, payload)
    edited = store.edit_task(task_id, edit, by or operator_name(), now)
    poke(config.paths.state_dir)
    return edited


FLAGS = {"priority": "--priority", "available_at": "--at", "payload": "--payload"}


def _problems(exc: ValidationError) -> str:
    """Each problem under the flag that gave the value, as `task add` names them."""
    said = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else ""
        message = str(err["msg"]).removeprefix("Value error, ")
        said.append(f"{FLAGS.get(field, field)}: {message}, found {err.get('input')!r}")
    return "; ".join(said)


def _intent_fields(task: TaskRecord, priority: int | None, payload: dict[str, Any] | None) -> dict[str, Any]:
    """The task's own intent, with what the edit changes."""
    return {
        "task_type": task.task_type,
        "source": task.source,
        "subject": task.subject,
        "description": task.description,
        "priority": task.priority if priority is None else priority,
        "payload": task.payload if payload is None else payload,
        "requested_profile_id": task.requested_profile_id,
        "requested_adapter_id": task.requested_adapter_id,
        "requested_model": task.requested_model,
        "skill_ids": list(task.skill_ids) or None,
        "evidence_requirements": without_none(record_json(task.evidence_requirements))
        if task.evidence_requirements
        else None,
    }


def close_task(
    config: Config,
    store: Store,
    task_id: int,
    status: Declared,
    reason: str | None,
    now: datetime,
    *,
    by: str | None = None,
) -> TaskRecord:
    """End a waiting task with the outcome its operator declares; a reason is required."""
    why = note_text(reason, "reason", required=True)
    assert why is not None
    who = by or operator_name()
    word = "completed" if status == "completed" else "failed"
    outcome = TaskOutcome.failure(f"{word} by {who}: {why}", status)
    closed = store.close_task(task_id, outcome, who, why, now)
    poke(config.paths.state_dir)  # what was linked after it may be claimable now
    return closed


def link_tasks(
    config: Config, store: Store, after_id: int, before_id: int, now: datetime, *, by: str | None = None
) -> TaskLink:
    link = store.link_tasks(after_id, before_id, by or operator_name(), now)
    poke(config.paths.state_dir)
    return link


def unlink_tasks(
    config: Config, store: Store, after_id: int, before_id: int, now: datetime, *, by: str | None = None
) -> None:
    store.unlink_tasks(after_id, before_id, by or operator_name(), now)
    poke(config.paths.state_dir)
