"""Attempts: the claim, an attempt's life from claimed to closed, and what attempts cost.

`finish_attempt` is the outcome commit of docs/design.md, "Dispatch": the attempt closed, the task's status,
outcome and counters, its artifacts, its outbox entries and their events, in one transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from agentd.clock import stored_ts
from agentd.config.budget import BudgetHold
from agentd.errors import InputError, UnreadableRow
from agentd.hashing import new_ulid
from agentd.records import (
    TERMINAL_STATUSES,
    AttemptEnd,
    AttemptPlan,
    Claim,
    CompiledBundle,
    CostTotal,
    RunningAttempt,
    TaskAttempt,
    TaskOutcome,
    TaskRecord,
)
from agentd.store.approvals import request_approval
from agentd.store.base import StoreBase, dumps, loads, parse_optional_ts, ts
from agentd.store.budget import BELIEVED_COST, believed_tokens, claimable_branches, hold_params
from agentd.store.fleet_leases import FleetGate, Gated, check_fleet_gate
from agentd.store.rows import attempt_from_row
from agentd.store.tasks import read_task_or_raise

logger = logging.getLogger(__name__)

OUTCOME_SUMMARY_MAX = 4000


def next_claimable_sql(hold: BudgetHold | None = None) -> str:
    """The next claimable task's id: priority 1 first, then available_at, then id (one index seek per
    priority: store/budget.py claimable_branches). With a budget hold, the tasks it holds are left out."""
    branches = claimable_branches(hold)
    if not branches:
        return "SELECT NULL WHERE 0"
    return "SELECT id FROM (" + " UNION ALL ".join(branches) + ") ORDER BY priority, available_at, id LIMIT 1"


def claim_sql(hold: BudgetHold | None = None) -> str:
    # One statement, inside BEGIN IMMEDIATE: two dispatchers could never both win the same row.
    return f"""UPDATE tasks
    SET status = 'running', attempt_count = attempt_count + 1,
        started_at = :now, updated_at = :now, finished_at = NULL
    WHERE id = ({next_claimable_sql(hold)})
    RETURNING id"""


CLAIM_SQL = claim_sql()

Planner = Callable[[TaskRecord], AttemptPlan]  # pure: the config's choice of adapter and model


class AttemptVerbs(StoreBase):
    # --- claiming -------------------------------------------------------------------------------

    def claim_next_task(
        self,
        now: datetime,
        runner_id: str,
        plan: Planner,
        evidence_root: Path,
        hold: BudgetHold | None = None,
        confirmed: int | None = None,
    ) -> Claim | FleetGate | None:
        """Claim the next task and open its attempt (task_claimed), or None if nothing is due (or
        what is due waits for the budget: `hold`), or the dispatcher is paused.

        `plan` is pure (config lookups only). A task the config can no longer run ends
        permanent_failure with the reason; a row that no longer reads back as a task (edited by
        hand, written by an older agentd) is failed the same way and the claim moves on: no single
        row can block the queue. A fleet task starts only once its lease was confirmed with the fleet
        (`confirmed`: its task id); until then the claim writes nothing and returns its FleetGate."""
        try:
            return self._claim(now, runner_id, plan, evidence_root, hold, confirmed)
        except Gated as gated:
            return gated.gate

    def _claim(
        self,
        now: datetime,
        runner_id: str,
        plan: Planner,
        evidence_root: Path,
        hold: BudgetHold | None,
        confirmed: int | None,
    ) -> Claim | None:
        sql = CLAIM_SQL if hold is None else claim_sql(hold)
        params: dict[str, Any] = {"now": ts(now), **hold_params(hold)}
        with self.transaction():
            if self._conn.execute("SELECT 1 FROM dispatch_control WHERE id = 1").fetchone():
                return None  # paused (`agentd dispatch pause`): checked in the claim's own transaction
            while (row := self._conn.execute(sql, params).fetchone()) is not None:
                check_fleet_gate(self.tx, row["id"], confirmed)
                try:
                    task = read_task_or_raise(self.tx, row["id"])
                except Exception as exc:  # an UnreadableRow (an edit outside agentd) says it all in one line
                    plain = isinstance(exc, UnreadableRow)
                    said = str(exc) if plain else f"{type(exc).__name__}: {exc}"
                    logger.error("task %s cannot be read back; failing it: %s", row["id"], said, exc_info=not plain)
                    self._fail_unreadable(row["id"], f"internal_error: {said}"[:500], now)
                    continue
                try:
                    chosen = plan(task)
                except InputError as exc:
                    return Claim(self._refuse_claimed(task, str(exc), now), None, str(exc))
                return Claim(task, self._open_attempt(task, chosen, runner_id, evidence_root, now))
        return None

    def _open_attempt(
        self, task: TaskRecord, chosen: AttemptPlan, runner_id: str, evidence_root: Path, now: datetime
    ) -> TaskAttempt:
        attempt_id = new_ulid(self.clock)
        self._conn.execute(
            """INSERT INTO task_attempts (attempt_id, task_id, attempt_number, adapter_id, adapter_kind,
                   model, runner_id, started_at, evidence_dir)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (
                attempt_id,
                task.task_id,
                task.attempt_count,
                chosen.adapter_id,
                chosen.adapter_kind,
                chosen.model,
                runner_id,
                ts(now),
                str(evidence_root / str(task.task_id) / attempt_id),
            ),
        )
        self._append_event(
            "task_claimed",
            now,
            task_id=task.task_id,
            attempt_id=attempt_id,
            workflow_id=task.workflow_ref.workflow_id if task.workflow_ref else None,
            payload={
                "attempt_number": task.attempt_count,
                "adapter": chosen.adapter_id,
                "model": chosen.model,
                "priority": task.priority,
            },
        )
        return self._attempt(attempt_id)

    def _refuse_claimed(self, task: TaskRecord, reason: str, now: datetime) -> TaskRecord:
        self._fail_unreadable(task.task_id, reason, now)
        return read_task_or_raise(self.tx, task.task_id)

    def _fail_unreadable(self, task_id: int, reason: str, now: datetime) -> None:
        """The claimed task ends permanent_failure with `reason`, its outcome saying so (not an earlier
        attempt's); the claim spent no attempt."""
        outcome = TaskOutcome.failure(reason[:OUTCOME_SUMMARY_MAX], "permanent_failure")
        self._conn.execute(
            """UPDATE tasks SET status = 'permanent_failure', last_error = ?, outcome = ?, finished_at = ?,
                   updated_at = ?, attempt_count = attempt_count - 1 WHERE id = ?""",
            (reason, dumps(outcome.model_dump(mode="json", exclude_none=True)), ts(now), ts(now), task_id),
        )
        self._append_event(
            "task_finished", now, task_id=task_id, payload={"status": "permanent_failure", "reason": reason}
        )

    def explain_claim(self, now: datetime, *, analyze: bool = False) -> list[str]:
        """The query plan of the claim (tests and `make bench` check it uses tasks_claim)."""
        if analyze:
            self._conn.execute("ANALYZE")
        rows = self._conn.execute(f"EXPLAIN QUERY PLAN {CLAIM_SQL}", {"now": ts(now)}).fetchall()
        return [row[3] for row in rows]

    # --- an attempt's life ----------------------------------------------------------------------

    def _attempt(self, attempt_id: str) -> TaskAttempt:
        row = self._conn.execute("SELECT * FROM task_attempts WHERE attempt_id = ?", (attempt_id,)).fetchone()
        return attempt_from_row(row)

    def record_bundle(self, task_id: int, attempt_id: str, bundle: CompiledBundle, now: datetime) -> None:
        """The bundle of an attempt that never started (its start failed, or agentd did first); a
        started attempt's is recorded with its start. Not durable on its own: the attempt's claim
        already is, and its end commits this too."""
        with self.transaction(durable=False):
            self._insert_bundle(task_id, attempt_id, bundle, now)

    def mark_attempt_started(
        self, task_id: int, attempt_id: str, pid: int | None, now: datetime, bundle: CompiledBundle | None = None
    ) -> None:
        """The adapter runs as the leader of process group `pid` (the boot sweep kills it by that);
        None for an adapter that runs no process (ollama-generate speaks HTTP). Its bundle, when
        given, is recorded first (`bundle_compiled`, then `task_started`): one commit, made while
        the adapter already runs. Not durable on its own (a power cut kills the process with us; the
        boot sweep finds a run by its claim)."""
        with self.transaction(durable=False):
            if bundle is not None:
                self._insert_bundle(task_id, attempt_id, bundle, now)
            self._conn.execute(
                "UPDATE task_attempts SET pid = ?, process_group = ? WHERE attempt_id = ?", (pid, pid, attempt_id)
            )
            self._append_event("task_started", now, task_id=task_id, attempt_id=attempt_id, payload={"pid": pid})

    def _insert_bundle(self, task_id: int, attempt_id: str, bundle: CompiledBundle, now: datetime) -> None:
        self._conn.execute(
            "UPDATE task_attempts SET bundle_hash = ?, prompt_path = ? WHERE attempt_id = ?",
            (bundle.bundle_hash, bundle.prompt_path, attempt_id),
        )
        payload = {"bundle_hash": bundle.bundle_hash, **bundle.details}
        self._append_event("bundle_compiled", now, task_id=task_id, attempt_id=attempt_id, payload=payload)

    def cancel_requested(self, task_id: int) -> bool:
        row = self._conn.execute("SELECT cancel_requested_at FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return row is not None and row[0] is not None

    def running_attempts(self) -> list[tuple[TaskRecord, TaskAttempt]]:
        """Every task left running, with its open attempt: the boot sweep's work list."""
        rows = self._conn.execute(
            """SELECT a.* FROM task_attempts a JOIN tasks t ON t.id = a.task_id
               WHERE t.status = 'running' AND a.ended_at IS NULL ORDER BY a.task_id"""
        ).fetchall()
        return [(read_task_or_raise(self.tx, row["task_id"]), attempt_from_row(row)) for row in rows]

    def running_now(self) -> list[RunningAttempt]:
        """The attempts open right now (the truth `agentd status` shows, not a service's cached line)."""
        rows = self._conn.execute(
            """SELECT a.task_id, t.task_type, a.attempt_id, a.adapter_id, a.model, a.started_at
               FROM task_attempts a JOIN tasks t ON t.id = a.task_id
               WHERE a.ended_at IS NULL AND t.status = 'running' ORDER BY a.started_at"""
        ).fetchall()
        return [RunningAttempt(r[0], r[1], r[2], r[3], r[4], stored_ts(r[5])) for r in rows]

    def finish_attempt(self, end: AttemptEnd) -> TaskRecord:
        """The outcome commit: one transaction, or nothing at all; the task as it left it."""
        self.record_end(end)
        return read_task_or_raise(self.tx, end.task_id)

    def record_end(self, end: AttemptEnd) -> None:
        """The outcome commit, the task not read back (the dispatcher's boundary commit needs nothing of it)."""
        with self.transaction():
            self._close_attempt(end)
            self._update_task(end)
            workflow_id = self._conn.execute("SELECT workflow_id FROM tasks WHERE id = ?", (end.task_id,)).fetchone()[0]
            ids = {"task_id": end.task_id, "attempt_id": end.attempt_id, "workflow_id": workflow_id}
            self._append_denials(end, ids)
            self._insert_artifacts(end, ids)
            self._insert_outbox(end, ids)
            self._append_events_of(end, ids)

    def _append_denials(self, end: AttemptEnd, ids: dict[str, Any]) -> None:
        """What the harness's permission policy refused during the attempt: one event each, then
        one that counts those beyond the cap (redacted and bounded by agentd/attempt/conclude.py, capped
        by agentd/attempt/judge.py)."""
        for denial in end.policy_denials:
            self._append_event("policy_denied", end.ended_at, **ids, payload=denial.payload())
        if end.policy_denials_dropped:
            dropped = {"decision": "denied", "dropped": end.policy_denials_dropped, "recorded": len(end.policy_denials)}
            self._append_event("policy_denied", end.ended_at, **ids, payload=dropped)

    def _insert_artifacts(self, end: AttemptEnd, ids: dict[str, Any]) -> None:
        for artifact in end.artifacts:
            self._conn.execute(
                """INSERT INTO artifacts (artifact_id, task_id, attempt_id, role, relative_path, content_type,
                       sha256, created_at, verified_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    new_ulid(self.clock),
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
            self._append_event(
                "artifact_recorded",
                end.ended_at,
                **ids,
                payload={"role": artifact.role, "path": artifact.relative_path},
            )

    def _insert_outbox(self, end: AttemptEnd, ids: dict[str, Any]) -> None:
        for entry in end.outbox:
            self._conn.execute(
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
                self._append_event(
                    "outbox_refused", end.ended_at, **ids, payload={"kind": entry.kind, **(entry.result or {})}
                )
        if end.side_effects_held:
            request_approval(self.tx, end.task_id, end.side_effects_held, end.ended_at, scope="side_effects")

    def _close_attempt(self, end: AttemptEnd) -> None:
        usage = end.usage
        cursor = self._conn.execute(
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

    def _update_task(self, end: AttemptEnd) -> None:
        outcome = end.outcome.for_task(end.status, end.last_error)  # its status is always the task's
        stored = outcome.model_copy(
            update={"raw_output": None, "operator_summary": outcome.operator_summary[:OUTCOME_SUMMARY_MAX]}
        )
        terminal = end.status in TERMINAL_STATUSES
        cursor = self._conn.execute(
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

    def _append_events_of(self, end: AttemptEnd, ids: dict[str, Any]) -> None:
        at = end.ended_at
        if end.boot_sweep:
            self._append_event(
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
            self._append_event("outcome_downgraded", at, **ids, payload={"reasons": list(end.downgrade_reasons)})
        self._append_event(
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
            },
        )
        if end.status == "retryable_failure":
            self._append_event(
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
            self._append_event("task_finished", at, **ids, payload={"status": end.status, "summary": summary[:200]})

    # --- reading attempts -----------------------------------------------------------------------

    def attempts_of(self, task_id: int) -> list[TaskAttempt]:
        rows = self._conn.execute(
            "SELECT * FROM task_attempts WHERE task_id = ? ORDER BY attempt_number", (task_id,)
        ).fetchall()
        return [attempt_from_row(r) for r in rows]

    def attempts_by_task(self, task_ids: list[int]) -> dict[int, list[TaskAttempt]]:
        """Several tasks' attempts, one query per 500 tasks (not one per task)."""
        found: dict[int, list[TaskAttempt]] = {task_id: [] for task_id in task_ids}
        sql = "SELECT * FROM task_attempts WHERE task_id IN ({marks}) ORDER BY task_id, attempt_number"
        for row in self._rows_in(sql, task_ids):
            found[row["task_id"]].append(attempt_from_row(row))
        return found

    def get_attempt(self, attempt_id: str) -> TaskAttempt | None:
        row = self._conn.execute("SELECT * FROM task_attempts WHERE attempt_id = ?", (attempt_id,)).fetchone()
        return attempt_from_row(row) if row is not None else None

    def attempt_folder_keys(self) -> set[tuple[int, str]]:
        """(task id, attempt id) of every attempt row: the folders under attempts/ the database names."""
        return {(row[0], row[1]) for row in self._conn.execute("SELECT task_id, attempt_id FROM task_attempts")}

    def all_attempts(self) -> list[TaskAttempt]:
        rows = self._conn.execute("SELECT * FROM task_attempts ORDER BY task_id, attempt_number").fetchall()
        return [attempt_from_row(r) for r in rows]

    def failure_summaries(self, task_id: int) -> list[tuple[int, str, str]]:
        """(attempt number, termination reason, summary) of the task's failed attempts: what the
        next bundle re-injects (seed 004)."""
        rows = self._conn.execute(
            """SELECT attempt_number, termination_reason, diagnostics FROM task_attempts
               WHERE task_id = ? AND ended_at IS NOT NULL AND retry_class != 'none' ORDER BY attempt_number""",
            (task_id,),
        ).fetchall()
        return [(r[0], r[1] or "error", str((loads(r[2]) or {}).get("summary", ""))) for r in rows]

    def attempt_usage(
        self, *, task_id: int | None = None, since: datetime | None = None, limit: int = 1000
    ) -> list[TaskAttempt]:
        """Finished attempts, newest first, for cost and token accounting."""
        where, params = _usage_filter(task_id, since)
        rows = self._conn.execute(
            f"SELECT * FROM task_attempts WHERE {where} ORDER BY ended_at DESC LIMIT ?", (*params, limit)
        ).fetchall()
        return [attempt_from_row(r) for r in rows]

    def cost_totals(self, *, task_id: int | None = None, since: datetime | None = None) -> list[CostTotal]:
        """Attempts, tokens and cost per adapter and model (every finished attempt that matches)."""
        where, params = _usage_filter(task_id, since)
        rows = self._conn.execute(
            f"""SELECT adapter_id, COALESCE(model, ''), COUNT(*), TOTAL({believed_tokens("input_tokens")}),
                   TOTAL({believed_tokens("output_tokens")}), SUM({BELIEVED_COST}),
                   COALESCE(MAX(cost_estimated = 1 AND {BELIEVED_COST} IS NOT NULL), 0)
                FROM task_attempts WHERE {where} GROUP BY adapter_id, COALESCE(model, '')
                ORDER BY adapter_id, COALESCE(model, '')""",
            params,
        ).fetchall()
        # TOTAL, not SUM: believed counts may still add up past int64, which SUM refuses
        return [CostTotal(r[0], r[1], r[2], int(r[3]), int(r[4]), r[5], bool(r[6])) for r in rows]

    def last_successful_attempt_at(self) -> datetime | None:
        row = self._conn.execute(
            """SELECT ended_at FROM task_attempts WHERE ended_at IS NOT NULL AND retry_class = 'none'
                   AND exit_status = 'ok' ORDER BY ended_at DESC LIMIT 1"""
        ).fetchone()
        return parse_optional_ts(row[0] if row else None)


def _usage_filter(task_id: int | None, since: datetime | None) -> tuple[str, tuple[Any, ...]]:
    clauses: list[str] = ["ended_at IS NOT NULL"]
    params: list[Any] = []
    if task_id is not None:
        clauses.append("task_id = ?")
        params.append(task_id)
    if since is not None:
        clauses.append("ended_at >= ?")
        params.append(ts(since))
    return " AND ".join(clauses), tuple(params)
