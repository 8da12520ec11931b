"""The operator's control plane and what an outcome asks for after it: the actions `agentd` takes on a
person's behalf, the outbox, external messages and their delivery, constitution proposals.

May import: records, config, gateway, process, store, work, evidence, outlook, adapters, attempt.

May call: accept_constitution_proposal, add_schedule, apply_follow_up, apply_workflow_change, cancel_task,
cancel_workflow, close_task, create_workflow, decide_call, due_deliveries, edit_task, enqueue_task,
finish_delivery_attempt, get_task, get_task_or_raise, get_workflow_or_raise, hand_over_message, link_tasks,
next_delivery_at, outbox_entry, outbox_item, pause_dispatch, pause_task, pending_outbox, record_constitution_proposal,
reject_constitution_proposal, remove_schedule, resolve_approval, resume_dispatch, resume_task, retry_message,
retry_task, settle_outbox, signal_workflow, start_delivery_attempt, state_entries, sweep_deliveries, unblock_workflow,
unlink_tasks, workflow_for_signal.

The operator's control plane: every action `agentd` takes on an agent's queue on a person's
behalf. Each validates the way the runtime itself does, writes through the store in one
transaction, and rings the dispatcher's doorbell so it acts at once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentd.config import Config
from agentd.edge import MAX_KEY_CHARS, check_text, note_text
from agentd.errors import InputError
from agentd.process.privilege import operator_name, operator_source
from agentd.process.wake import poke
from agentd.records import (
    CancelResult,
    Change,
    RecurringScheduleRecord,
    ScheduleSpec,
    TaskIntent,
    TaskOutcome,
    TaskRecord,
    WorkflowRecord,
)
from agentd.store import ApprovalScope, HeldCall, Pause, Store, WorkflowCancel
from agentd.work.intake import admit_task
from agentd.work.intents import first_step_refusal, schedule_spec
from agentd.work.workflows import judge_signal, start_state, state_cap, unblock_move

MAX_ATTEMPTS = 100  # as a task type's max_attempts


def add_task(
    config: Config,
    store: Store,
    intent: TaskIntent,
    now: datetime,
    *,
    require_approval: bool = False,
    by: str | None = None,
    dispatch_context: dict[str, Any] | None = None,
) -> TaskRecord:
    """The operator may give an absolute time (`--at`): a trusted intent (its source from
    `privilege.operator_source`); the event names who added it (`by`: a console's operator, else the OS
    user) and, for a task from a browser or an app, seed 003 §7's dispatch context."""
    new = admit_task(intent, config, now, trusted=True, require_approval=require_approval)
    payload: dict[str, Any] = {"by": by or operator()}
    if dispatch_context is not None:
        payload["dispatch_context"] = dispatch_context
    task = store.enqueue_task(new, now, event_payload=payload)
    poke(config.paths.state_dir)
    return task


def operator() -> str:
    """Who is steering: the OS user running the command, and under sudo who ran sudo (recorded with
    every steering act as `by`)."""
    return operator_name()


def resolve_approval(
    config: Config,
    store: Store,
    task_id: int,
    *,
    approved: bool,
    note: str | None,
    now: datetime,
    by: str | None = None,
    approval_id: str | None = None,
) -> tuple[TaskRecord, ApprovalScope]:
    note = note_text(note, "note" if approved else "reason", required=not approved)  # every surface's rule
    who = by or operator()
    task, scope = store.resolve_approval(
        task_id, approved=approved, by=who, note=note, now=now, approval_id=approval_id
    )
    poke(config.paths.state_dir)
    return task, scope


def resolve_call(
    config: Config,
    store: Store,
    call_id: str,
    *,
    approved: bool,
    note: str | None,
    now: datetime,
    by: str | None = None,
) -> HeldCall:
    """A person's decision on a tool call a running attempt's harness waits on (docs/policy.md)."""
    note = note_text(note, "note" if approved else "reason", required=not approved)  # every surface's rule
    held = store.decide_call(call_id, allowed=approved, by=by or operator(), reason=note, now=now)
    poke(config.paths.state_dir)  # the dispatcher's gate reads it at once
    return held


def pause_dispatch(
    config: Config, store: Store, reason: str | None, now: datetime, *, by: str | None = None
) -> tuple[Pause, bool]:
    paused = store.pause_dispatch(by or operator(), note_text(reason, "reason"), now)
    poke(config.paths.state_dir)  # an idle dispatcher says it is paused at once, not at its next wake
    return paused


def resume_dispatch(config: Config, store: Store, now: datetime, *, by: str | None = None) -> Pause | None:
    ended = store.resume_dispatch(by or operator(), now)
    poke(config.paths.state_dir)
    return ended


def cancel_task(config: Config, store: Store, task_id: int, now: datetime, *, by: str | None = None) -> CancelResult:
    outcome = TaskOutcome.failure("canceled by the operator before it ran", "operator_canceled")
    result = store.cancel_task(task_id, outcome, now, by=by or operator())
    poke(config.paths.state_dir)  # a running task: the dispatcher stops its adapter now
    return result


def retry_task(
    config: Config, store: Store, task_id: int, attempts: int | None, now: datetime, *, by: str | None = None
) -> TaskRecord:
    """Re-queue with `attempts` more (default: its task type's max_attempts, else the dispatch default)."""
    task = store.get_task_or_raise(task_id)
    spec = config.task_types.get(task.task_type)
    more = (
        attempts
        if attempts is not None
        else (spec.max_attempts if spec and spec.max_attempts else config.dispatch.default_max_attempts)
    )
    if not 1 <= more <= MAX_ATTEMPTS:
        raise InputError(f"--attempts: expected 1 to {MAX_ATTEMPTS}, found {more}")
    retried = store.retry_task(task_id, more, now, by=by or operator())
    poke(config.paths.state_dir)
    return retried


def add_schedule(config: Config, store: Store, spec: ScheduleSpec, now: datetime) -> RecurringScheduleRecord:
    """A schedule whose task is refused now would be refused every interval: it is refused now."""
    stored = schedule_spec(spec)
    admit_task(TaskIntent.model_validate(stored.task), config, now, trusted=False)
    schedule = store.add_schedule(stored, now, by=operator())
    poke(config.paths.state_dir)
    return schedule


def remove_schedule(config: Config, store: Store, schedule_id: str, now: datetime) -> None:
    store.remove_schedule(schedule_id, now, by=operator())


def start_workflow(
    config: Config,
    store: Store,
    workflow_type: str,
    instance_key: str,
    context: dict[str, Any],
    state: str | None,
    now: datetime,
) -> WorkflowRecord:
    if not instance_key.strip():
        raise InputError(f"INSTANCE_KEY: expected 1 to {MAX_KEY_CHARS} characters, found nothing")
    check_text(instance_key, "INSTANCE_KEY", MAX_KEY_CHARS)
    chosen = start_state(config.workflows, config.task_types, workflow_type, state)
    refusal = first_step_refusal(config, workflow_type, instance_key, chosen, context, now)
    if refusal:
        raise InputError(f"--context: the {chosen} step could not take it: {refusal}")
    workflow, created = store.create_workflow(workflow_type, instance_key, chosen, context, now, operator_source(None))
    if not created:
        raise InputError(
            f"{workflow_type} {instance_key!r} already exists as workflow {workflow.workflow_id} ({workflow.status})"
        )
    poke(config.paths.state_dir)
    return workflow


def signal_workflow(
    config: Config, store: Store, workflow_id: int, signal: str, reason: str | None, now: datetime
) -> tuple[WorkflowRecord, Change]:
    """Apply SIGNAL as if the workflow's current step had emitted it; InputError (nothing written)
    naming what the state accepts if it does not apply."""
    workflow = store.get_workflow_or_raise(workflow_id)
    decision = judge_signal(config, workflow, store.state_entries(workflow_id), signal, operator(), reason)
    if decision.change.kind == "ignore":
        raise InputError(f"workflow {workflow_id}: {decision.change.reason}; nothing was changed")
    moved = store.signal_workflow(decision, now)
    poke(config.paths.state_dir)
    return moved, decision.change


def unblock_workflow(
    config: Config, store: Store, workflow_id: int, state: str | None, reason: str | None, now: datetime
) -> WorkflowRecord:
    """A blocked workflow re-enters its state (or `state`) as a new step, if the current config's cap
    allows it; InputError saying what to raise otherwise."""
    workflow = store.get_workflow_or_raise(workflow_id)
    definition = config.workflows.get(workflow.workflow_type)
    cap = state_cap(definition, config.dispatch.workflow_state_cap)
    change = unblock_move(definition, workflow, store.state_entries(workflow_id), cap, state)
    unblocked = store.unblock_workflow(workflow, change.next_state or workflow.current_state, operator(), reason, now)
    poke(config.paths.state_dir)
    return unblocked


def cancel_workflow(
    config: Config, store: Store, workflow_id: int, reason: str | None, now: datetime
) -> WorkflowCancel:
    canceled = store.cancel_workflow(workflow_id, operator(), reason, now)
    poke(config.paths.state_dir)
    return canceled
