"""An attempt's end (docs/design.md, "Dispatch"): the outcome commit records the attempt closed, the task's
status, outcome and counters, its artifacts, its outbox entries and their events, in one transaction
(`Store.end_attempt`); with a `Follow`, the claim of the next task joins that transaction, so the attempt
boundary costs one fsync (docs/decisions.md, "Group commit")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentd import frozen_value
from agentd.hashing import new_ulid
from agentd.records import TERMINAL_STATUSES, AttemptEnd, Claim
from agentd.store.approvals import request_approval
from agentd.store.base import Tx, dumps, ts
from agentd.store.calls import deny_pending
from agentd.store.claim import OUTCOME_SUMMARY_MAX, Planner
from agentd.store.resets import record_reset


@frozen_value
class Follow:
    """What the claim after an attempt needs: the claim's own arguments, and how the service row says
    the claimed task runs (it returns the chain head that write found)."""

    runner_id: str
    plan: Planner
    evidence_root: Path
    report: Callable[[Any, Claim], tuple[int, str] | None]  # (Store, Claim): the service's row


@frozen_value
class Followed:
    """The task claimed in the same transaction as the last attempt's outcome, and the chain head."""

    claim: Claim
    head: tuple[int, str] | None


@frozen_value
class Ended:
    """An attempt's outcome commit, made: the end it recorded, and the task claimed in the same
    transaction (None: nothing was, and the dispatcher's tick claims as always)."""

    end: AttemptEnd
    next: Followed | None = None


def record_end(tx: Tx, end: AttemptEnd) -> None:
    """Everything the outcome commit writes, in the caller's transaction: the attempt closed, the task's
    new status, denials, artifacts, outbox entries and their events. A fleet task's lease needs confirming
    again before its next attempt (docs/fleet.md)."""
    _close_attempt(tx, end)
    _update_task(tx, end)
    deny_pending(tx, end.attempt_id, "attempt ended", end.ended_at)  # e.g. a dispatcher killed while a call waited
    workflow_id = tx.execute("SELECT workflow_id FROM tasks WHERE id = ?", (end.task_id,)).fetchone()[0]
    ids = {"task_id": end.task_id, "attempt_id": end.attempt_id, "workflow_id": workflow_id}
    _append_denials(tx, end, ids)
    _insert_artifacts(tx, end, ids)
    _insert_outbox(tx, end, ids)
    _append_events_of(tx, end, ids)
    tx.execute("UPDATE fleet_leases SET confirmed_until = NULL WHERE task_id = ? AND state = 'held'", (end.task_id,))
    if end.provider_reset is not None:  # the provider turned it away: its credential rests (docs/gateway.md)
        record_reset(tx, end.provider_reset, end.ended_at)


def _append_denials(tx: Tx, end: AttemptEnd, ids: dict[str, Any]) -> None:
    """What the harness's permission policy refused during the attempt: one event each, then
    one that counts those beyond the cap (redacted and bounded by agentd/attempt/conclude.py, capped
    by agentd/attempt/judge.py)."""
    for denial in end.policy_denials:
        said = {"agentd_decision": "allowed"} if _agentd_allowed(tx, end, denial.call_id) else {}
        tx.event("policy_denied", end.ended_at, **ids, payload=denial.payload() | said)
    if end.policy_denials_dropped:
        counts = {"dropped": end.policy_denials_dropped, "recorded": len(end.policy_denials)}
        dropped = {"decision": "denied", **counts, "refused_by": "harness"}
        tx.event("policy_denied", end.ended_at, **ids, payload=dropped)


def _agentd_allowed(tx: Tx, end: AttemptEnd, call_id: str | None) -> bool:
    """Whether agentd's policy allowed this call before the harness refused it: two layers decided, and the
    event says which refused (docs/policy.md, "Two layers"). The task's events are indexed (events_task); an
    older row's payload may not be JSON."""
    if call_id is None:
        return False
    found = tx.execute(
        """SELECT 1 FROM events WHERE task_id = ? AND attempt_id = ? AND type = 'tool_call_allowed'
           AND CASE WHEN json_valid(payload) THEN json_extract(payload, '$.tool_use_id') END = ? LIMIT 1""",
        (end.task_id, end.attempt_id, call_id),
    ).fetchone()
    return found is not None


def _insert_artifacts(tx: Tx, end: AttemptEnd, ids: dict[str, Any]) -> None:
    for artifact in end.artifacts:
        tx.execute(
            """INSERT INTO artifacts (artifact_id, task_id, attempt_id, role, relative_path, content_type,
                   sha256, created_at, verified_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (
                new_ulid(tx.clock),
                end.task_id,
                end.attempt_id,
                artifact.role,
                artifact.relative_path,
                artifact.content_type,
                artifact.sha256,
                ts(end.ended_at),
                ts(end.ended_at),
            ),
        )
        tx.event(
            "artifact_recorded",
            end.ended_at,
            **ids,
            payload={"role": artifact.role, "path": artifact.relative_path},
        )


def _insert_outbox(tx: Tx, end: AttemptEnd, ids: dict[str, Any]) -> None:
    for entry in end.outbox:
        tx.execute(
            """INSERT INTO outbox (task_id, attempt_id, kind, idempotency_key, payload, status, result,
                   created_at, applied_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (
                end.task_id,
                end.attempt_id,
                entry.kind,
                entry.idempotency_key,
                dumps(entry.payload),
                entry.status,
                dumps(entry.result) if entry.result else None,
                ts(end.ended_at),
                ts(end.ended_at) if entry.status == "refused" else None,
            ),
        )
        if entry.status == "refused":
            tx.event("outbox_refused", end.ended_at, **ids, payload={"kind": entry.kind, **(entry.result or {})})
    if end.side_effects_held:
        request_approval(tx, end.task_id, end.side_effects_held, end.ended_at, scope="side_effects")


def _close_attempt(tx: Tx, end: AttemptEnd) -> None:
    usage = end.usage
    cursor = tx.execute(
        """UPDATE task_attempts SET ended_at = ?, exit_status = ?, retry_class = ?, termination_reason = ?,
               side_effects = ?, model = COALESCE(?, model), stdout_path = ?, stderr_path = ?, result_path = ?,
               last_message_path = ?, diagnostics = ?, cost_usd = ?, cost_estimated = ?, input_tokens = ?,
               output_tokens = ?, cache_read_tokens = ?, cache_write_tokens = ?
           WHERE attempt_id = ? AND ended_at IS NULL""",
        (
            ts(end.ended_at),
            end.exit_status,
            end.retry_class,
            end.termination_reason,
            end.side_effects,
            end.model,
            end.paths.get("stdout"),
            end.paths.get("stderr"),
            end.paths.get("result"),
            end.paths.get("last_message"),
            dumps(end.diagnostics),
            usage.get("cost_usd"),
            usage.get("cost_estimated"),
            usage.get("input_tokens"),
            usage.get("output_tokens"),
            usage.get("cache_read_tokens"),
            usage.get("cache_write_tokens"),
            end.attempt_id,
        ),
    )
    if cursor.rowcount != 1:
        raise RuntimeError(f"attempt {end.attempt_id} is not open; it was closed by someone else")


def _update_task(tx: Tx, end: AttemptEnd) -> None:
    outcome = end.outcome.for_task(end.status, end.last_error)  # its status is always the task's
    stored = outcome.model_copy(
        update={"raw_output": None, "operator_summary": outcome.operator_summary[:OUTCOME_SUMMARY_MAX]}
    )
    terminal = end.status in TERMINAL_STATUSES
    cursor = tx.execute(
        """UPDATE tasks SET status = ?, outcome = ?, last_error = ?, updated_at = ?,
               available_at = COALESCE(?, available_at), finished_at = ?,
               free_attempt_count = free_attempt_count + ?, rate_limit_count = rate_limit_count + ?,
               crash_count = CASE WHEN ? THEN crash_count + 1 ELSE 0 END, cancel_requested_at = NULL
           WHERE id = ? AND status = 'running'""",
        (
            end.status,
            dumps(stored.model_dump(mode="json", exclude_none=True)),
            end.last_error,
            ts(end.ended_at),
            ts(end.available_at),
            ts(end.ended_at) if terminal else None,
            int(end.free_attempt),
            int(end.rate_limited),
            int(end.crashed),
            end.task_id,
        ),
    )
    if cursor.rowcount != 1:
        raise RuntimeError(f"task {end.task_id} is not running; its outcome cannot be recorded twice")


def _append_events_of(tx: Tx, end: AttemptEnd, ids: dict[str, Any]) -> None:
    at = end.ended_at
    if end.boot_sweep:
        tx.event(
            "boot_sweep_reclaimed",
            at,
            **ids,
            payload={
                "next_status": end.status,
                "judged": not end.crashed,
                "side_effects": end.side_effects,
                "killed": len(end.diagnostics.get("killed_pids") or []),
            },
        )
    if end.downgrade_reasons:
        tx.event("outcome_downgraded", at, **ids, payload={"reasons": list(end.downgrade_reasons)})
    tx.event(
        "task_attempt_finished",
        at,
        **ids,
        payload={
            "exit_status": end.exit_status,
            "retry_class": end.retry_class,
            "termination_reason": end.termination_reason,
            "outcome": end.outcome.status,
            # the sealed manifest, pinned by the chain: editing it is caught without trusting it
            "manifest_sha256": end.diagnostics.get("manifest_sha256"),
            "artifact_hash": end.diagnostics.get("artifact_hash"),
            # what the exports say of it beyond its outcome (agentd/outlook/runtime_facts.py): why it failed,
            # the signal that ended its process, what it cost
            "failure_type": end.diagnostics.get("failure_type"),
            "signal": end.diagnostics.get("signal"),
            "usage": {k: v for k, v in end.usage.items() if v is not None},
        },
    )
    if end.status == "retryable_failure":
        tx.event(
            "task_retry_scheduled",
            at,
            **ids,
            payload={
                "available_at": ts(end.available_at),
                "rate_limited": end.rate_limited,
                "free_attempt": end.free_attempt,
                "reason": (end.last_error or "")[:200],
            },
        )
    else:
        summary = end.outcome.for_task(end.status, end.last_error).operator_summary
        tx.event("task_finished", at, **ids, payload={"status": end.status, "summary": summary[:200]})
