"""Judging an attempt from what it left: the same gates for a live attempt, one the boot sweep
found after the runtime died, and one agentd itself failed (seed 000 §9, seed 004).

`judge` takes facts gathered (and redacted) beforehand and returns the verdict: the outcome after
the completion gates, the task's next state, and why the attempt ended.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from agentd.adapters.base import AdapterRun
from agentd.outcome import (
    CompletionChecks,
    Decision,
    Extracted,
    Gated,
    RetryPolicy,
    decide,
    extract_outcome,
    failure_outcome,
    gate,
)
from agentd.records import TaskAttempt, TaskRecord

Stopped = Literal["interrupted", "operator_canceled"]


@dataclass(frozen=True)
class AttemptFacts:
    """Everything judging needs, gathered before it. Text in here is already redacted."""

    task: TaskRecord
    attempt: TaskAttempt
    checks: CompletionChecks
    workspace: Path
    timeout_s: float
    run: AdapterRun | None = None  # None: it never ran to an end we saw
    stopped: Stopped | None = None  # stopped from outside: a service stop, or the operator
    result_text: str | None = None  # what the adapter left in $AGENTD_RESULT_PATH
    result_problem: str | None = None  # why result_text is missing although a file was there
    stdout_bytes: int = 0
    swept: bool = False  # the boot sweep closed it: the runtime died during it, its exit is unknown
    internal_error: str | None = None  # agentd itself failed during the attempt, and how

    @property
    def crashed(self) -> bool:
        """The runtime died during the attempt and it left nothing to judge."""
        return self.swept and self.result_text is None


@dataclass(frozen=True)
class Verdict:
    extracted: Extracted
    gated: Gated
    decision: Decision
    termination_reason: str
    failure_type: str | None
    exit_status: Literal["ok", "error", "timeout", "unknown"]


def judge(facts: AttemptFacts, *, now: datetime, policy: RetryPolicy, rng: random.Random) -> Verdict:
    """The attempt's outcome (after the completion gates), the task's next state, and why it ended."""
    run = facts.run
    final_message = run.final_message if run is not None else None
    extracted = extract_outcome(facts.result_text, final_message, facts.result_problem)
    gated, termination, failure_type = _gated(facts, extracted)
    decision = decide(
        facts.task,
        facts.task.free_attempt_count,
        gated.outcome,
        now=now,
        policy=policy,
        rng=rng,
        rate_limited=bool(run and run.rate_limited and facts.stopped is None),
        interrupted=facts.stopped == "interrupted",
        crashed=facts.crashed,
    )
    if decision.crashed and decision.status == "permanent_failure":
        termination = "crashed_runtime"
    return Verdict(extracted, gated, decision, termination, failure_type, _exit_status(facts))


def _exit_status(facts: AttemptFacts) -> Literal["ok", "error", "timeout", "unknown"]:
    if facts.swept:
        return "unknown"
    return facts.run.exit_status if facts.run is not None else "error"


def _gated(facts: AttemptFacts, extracted: Extracted) -> tuple[Gated, str, str | None]:
    """(gated outcome, termination_reason, failure_type)."""
    if facts.internal_error is not None:
        return Gated(failure_outcome(facts.internal_error)), "internal_error", "internal_error"
    if facts.stopped == "operator_canceled":
        summary = "canceled by the operator while running; the adapter was stopped"
        return Gated(failure_outcome(summary, "operator_canceled")), "operator_canceled", "operator_canceled"
    if facts.crashed:
        summary = "the runtime died during this attempt; the boot sweep reclaimed it"
        return Gated(failure_outcome(summary)), "boot_sweep", "crashed_runtime"
    if facts.swept:
        return _gate(facts, extracted, adapter_ok=None, adapter_failure=None, termination="boot_sweep")
    run = facts.run
    if facts.stopped == "interrupted" or run is None:
        summary = "interrupted: the dispatcher was stopping and the grace period ran out"
        return Gated(failure_outcome(summary)), "interrupted", "interrupted"
    process = run.process
    if process is not None and process.start_error:
        return Gated(failure_outcome(process.start_error)), "start_failed", "start_error"
    if run.exit_status == "timeout":
        summary = f"timed out after {facts.timeout_s:g}s; the process group was killed"
        return Gated(failure_outcome(summary)), "timeout", "timeout"
    if run.rate_limited:
        summary = f"rate limited: {run.failure or 'the provider said slow down'}"
        return Gated(failure_outcome(summary)), "exited", "rate_limited"
    return _gate(facts, extracted, adapter_ok=run.ok, adapter_failure=run.failure, termination="exited")


def _gate(
    facts: AttemptFacts, extracted: Extracted, *, adapter_ok: bool | None, adapter_failure: str | None, termination: str
) -> tuple[Gated, str, str | None]:
    gated = gate(
        extracted,
        adapter_ok=adapter_ok,
        adapter_failure=adapter_failure,
        workspace=facts.workspace,
        attempt_started=facts.attempt.started_at,
        checks=facts.checks,
        audit_bytes=facts.stdout_bytes,
    )
    if gated.outcome.status == "completed":
        return gated, termination, None
    if extracted.outcome is None:
        return gated, termination, "adapter_error" if adapter_ok is False else "no_outcome"
    return gated, termination, "gate_failed" if gated.downgraded else "model_reported_failure"
