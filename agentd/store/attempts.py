"""Attempts between their claim (store/claim.py) and their end (store/ending.py): the bundle, the start, a
cancel asked for, what runs now, and what attempts cost."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentd import frozen_value
from agentd.clock import stored_ts
from agentd.records import CompiledBundle, CostTotal, RunningAttempt, Spend, TaskAttempt, TaskRecord
from agentd.store.base import StoreBase, loads, parse_optional_ts, ts
from agentd.store.budget import BELIEVED_COST, believed_tokens
from agentd.store.rows import attempt_from_row
from agentd.store.tasks import read_task_or_raise

if TYPE_CHECKING:  # pydantic's: judged where they come in
    from agentd.records import WorkflowRecord


@frozen_value
class BundleHistory:
    """What an attempt's bundle reads of the past (Store.bundle_history)."""

    prior: list[tuple[int, str, str, tuple[str, ...]]]  # (number, termination, summary, gates failed)
    failed_calls: list[tuple[int, str, str, str]]  # (attempt number, tool, summary, error), newest first
    recent: list[tuple[int, str, str, str]]
    workflow: WorkflowRecord | None = None
    spend: Spend | None = None  # the day's, when asked


class AttemptVerbs(StoreBase):
    # --- an attempt's life ----------------------------------------------------------------------

    def _attempt(self, attempt_id: str) -> TaskAttempt:
        row = self.tx.execute("SELECT * FROM task_attempts WHERE attempt_id = ?", (attempt_id,)).fetchone()
        return attempt_from_row(row)

    def record_bundle(self, task_id: int, attempt_id: str, bundle: CompiledBundle, now: datetime) -> None:
        """The bundle of an attempt that never started (its start failed, or agentd did first); a
        started attempt's is recorded with its start. Not durable on its own: the attempt's claim
        already is, and its end commits this too."""
        with self.transaction(durable=False):
            self._insert_bundle(task_id, attempt_id, bundle, now)

    def mark_attempt_started(
        self,
        task_id: int,
        attempt_id: str,
        pid: int | None,
        now: datetime,
        bundle: CompiledBundle | None = None,
        session: dict[str, Any] | None = None,
    ) -> None:
        """The adapter runs as the leader of process group `pid` (the boot sweep kills it by that);
        None for an adapter that runs no process (ollama-generate speaks HTTP). Its bundle, when
        given, is recorded first (`bundle_compiled`, then `task_started`): one commit, made while
        the adapter already runs. Not durable on its own (a power cut kills the process with us; the
        boot sweep finds a run by its claim). `session` is the harness session it runs; one it resumes
        is said first (`harness_session_resumed`: docs/reliability.md, "Resume, not restart"), as is a kept one
        it does not resume, and why (`harness_session_discarded`)."""
        with self.transaction(durable=False):
            if bundle is not None:
                self._insert_bundle(task_id, attempt_id, bundle, now)
            self.tx.execute(
                "UPDATE task_attempts SET pid = ?, process_group = ? WHERE attempt_id = ?", (pid, pid, attempt_id)
            )
            ids: dict[str, Any] = {"task_id": task_id, "attempt_id": attempt_id}
            if session and session.get("resumed_from"):
                self.tx.event("harness_session_resumed", now, **ids, payload=session)
            if session and isinstance(discarded := session.get("discarded"), dict):
                self.tx.event("harness_session_discarded", now, **ids, payload=discarded)
            named = session.get("session_id") if session else None  # a new codex thread's: not yet named
            started = {"pid": pid, **({"harness_session_id": named} if named else {})}
            self.tx.event("task_started", now, **ids, payload=started)

    def _insert_bundle(self, task_id: int, attempt_id: str, bundle: CompiledBundle, now: datetime) -> None:
        self.tx.execute(
            "UPDATE task_attempts SET bundle_hash = ?, prompt_path = ? WHERE attempt_id = ?",
            (bundle.bundle_hash, bundle.prompt_path, attempt_id),
        )
        payload = {"bundle_hash": bundle.bundle_hash, **bundle.details}
        self.tx.event("bundle_compiled", now, task_id=task_id, attempt_id=attempt_id, payload=payload)

    def cancel_requested(self, task_id: int) -> bool:
        row = self.tx.execute("SELECT cancel_requested_at FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return row is not None and row[0] is not None

    def running_attempts(self) -> list[tuple[TaskRecord, TaskAttempt]]:
        """Every task left running, with its open attempt: the boot sweep's work list."""
        rows = self.tx.execute(
            """SELECT a.* FROM task_attempts a JOIN tasks t ON t.id = a.task_id
               WHERE t.status = 'running' AND a.ended_at IS NULL ORDER BY a.task_id"""
        ).fetchall()
        return [(read_task_or_raise(self.tx, row["task_id"]), attempt_from_row(row)) for row in rows]

    def running_now(self) -> list[RunningAttempt]:
        """The attempts open right now (the truth `agentd status` shows, not a service's cached line)."""
        rows = self.tx.execute(
            """SELECT a.task_id, t.task_type, a.attempt_id, a.adapter_id, a.model, a.started_at
               FROM task_attempts a JOIN tasks t ON t.id = a.task_id
               WHERE a.ended_at IS NULL AND t.status = 'running' ORDER BY a.started_at"""
        ).fetchall()
        return [RunningAttempt(r[0], r[1], r[2], r[3], r[4], stored_ts(r[5])) for r in rows]

    # --- reading attempts -----------------------------------------------------------------------

    def attempts_of(self, task_id: int) -> list[TaskAttempt]:
        rows = self.tx.execute(
            "SELECT * FROM task_attempts WHERE task_id = ? ORDER BY attempt_number", (task_id,)
        ).fetchall()
        return [attempt_from_row(r) for r in rows]

    def attempts_by_task(self, task_ids: list[int]) -> dict[int, list[TaskAttempt]]:
        """Several tasks' attempts, one query per 500 tasks (not one per task)."""
        found: dict[int, list[TaskAttempt]] = {task_id: [] for task_id in task_ids}
        sql = "SELECT * FROM task_attempts WHERE task_id IN ({marks}) ORDER BY task_id, attempt_number"
        for row in self.tx.rows_in(sql, task_ids):
            found[row["task_id"]].append(attempt_from_row(row))
        return found

    def recent_violations(self, since: datetime, limit: int = 10) -> list[tuple[int, str, datetime, str | None]]:
        """(task, attempt, ended at, the task's last error) of the attempts ended as a policy violation since
        `since`, newest first (docs/policy.md, "Every call accounted for")."""
        rows = self.tx.execute(
            """SELECT a.task_id, a.attempt_id, a.ended_at, t.last_error FROM task_attempts a
               JOIN tasks t ON t.id = a.task_id
               WHERE a.termination_reason = 'policy_violation' AND a.ended_at >= ?
               ORDER BY a.ended_at DESC LIMIT ?""",
            (ts(since), limit),
        ).fetchall()
        return [(task_id, attempt_id, stored_ts(ended), error) for task_id, attempt_id, ended, error in rows]

    def get_attempt(self, attempt_id: str) -> TaskAttempt | None:
        row = self.tx.execute("SELECT * FROM task_attempts WHERE attempt_id = ?", (attempt_id,)).fetchone()
        return attempt_from_row(row) if row is not None else None

    def attempt_folder_keys(self) -> set[tuple[int, str]]:
        """(task id, attempt id) of every attempt row: the folders under attempts/ the database names."""
        return {(row[0], row[1]) for row in self.tx.execute("SELECT task_id, attempt_id FROM task_attempts")}

    def all_attempts(self) -> list[TaskAttempt]:
        rows = self.tx.execute("SELECT * FROM task_attempts ORDER BY task_id, attempt_number").fetchall()
        return [attempt_from_row(r) for r in rows]

    def failure_summaries(self, task_id: int) -> list[tuple[int, str, str, tuple[str, ...]]]:
        """(attempt number, termination reason, summary, the gates it failed) of the task's failed attempts:
        what the next bundle re-injects (seed 004)."""
        rows = self.tx.execute(
            """SELECT attempt_number, termination_reason, diagnostics FROM task_attempts
               WHERE task_id = ? AND ended_at IS NOT NULL AND retry_class != 'none' ORDER BY attempt_number""",
            (task_id,),
        ).fetchall()
        found = []
        for number, reason, diagnostics in rows:
            given = loads(diagnostics) or {}
            gates = given.get("gate_failures")
            listed = tuple(map(str, gates)) if isinstance(gates, list) else ()
            found.append((number, reason or "error", str(given.get("summary", "")), listed))
        return found

    def failed_calls(self, task_id: int, limit: int) -> list[tuple[int, str, str, str]]:
        """(attempt number, tool, its input's summary, what went wrong) of the task's tool calls that failed
        or were refused, newest first, at most `limit`: a harness's call that failed (tool_finished, not ok;
        its input from its tool_started), one agentd's policy or a person denied (tool_call_denied), one the
        harness's own permissions refused (policy_denied). What the next bundle re-injects (seed audit D15)."""
        rows = self.tx.execute(
            """SELECT a.attempt_number, e.type, e.payload, s.payload FROM events e
               JOIN task_attempts a ON a.attempt_id = e.attempt_id
               LEFT JOIN events s ON e.type = 'tool_finished' AND s.task_id = e.task_id
                    AND s.attempt_id = e.attempt_id AND s.type = 'tool_started'
                    AND json_extract(s.payload, '$.call_id') = json_extract(e.payload, '$.call_id')
               WHERE e.task_id = ? AND e.type IN ('tool_finished', 'tool_call_denied', 'policy_denied')
                 AND (e.type != 'tool_finished' OR json_extract(e.payload, '$.ok') = 0)
               ORDER BY e.sequence DESC LIMIT ?""",
            (task_id, limit),
        ).fetchall()
        return [
            _failed_call(number, kind, loads(payload) or {}, loads(started) or {})
            for number, kind, payload, started in rows
        ]

    def attempt_usage(
        self, *, task_id: int | None = None, since: datetime | None = None, limit: int = 1000
    ) -> list[TaskAttempt]:
        """Finished attempts, newest first, for cost and token accounting."""
        where, params = _usage_filter(task_id, since)
        rows = self.tx.execute(
            f"SELECT * FROM task_attempts WHERE {where} ORDER BY ended_at DESC LIMIT ?", (*params, limit)
        ).fetchall()
        return [attempt_from_row(r) for r in rows]

    def cost_totals(self, *, task_id: int | None = None, since: datetime | None = None) -> list[CostTotal]:
        """Attempts, tokens and cost per adapter and model (every finished attempt that matches)."""
        where, params = _usage_filter(task_id, since)
        rows = self.tx.execute(
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
        row = self.tx.execute(
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


def _failed_call(number: int, kind: str, payload: dict[str, Any], started: dict[str, Any]) -> tuple[int, str, str, str]:
    tool, summary, reason = (str(payload.get(key) or "") for key in ("tool", "summary", "reason"))
    if kind == "tool_finished":  # its summary is the result's: the input was the call's start's
        return number, tool or "?", str(started.get("summary") or ""), f"failed: {summary}"
    summary = summary.removeprefix(f"{tool}: ")  # the policy's summaries name the tool first
    if kind == "tool_call_denied":
        by = str(payload.get("decided_by") or "policy")
        return number, tool or "?", summary, f"denied by agentd ({by}){': ' + reason if reason else ''}"
    return number, tool or "?", summary, f"refused by the harness's own permissions{': ' + reason if reason else ''}"
