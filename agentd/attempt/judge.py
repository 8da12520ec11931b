"""Judging an attempt from what it left: the same gates for a live attempt, one the boot sweep found
after the runtime died, and one agentd itself failed (seed 000 §9, seed 004).

Pure. `judge` takes facts gathered (and redacted) beforehand — the adapter's run, the result text,
what the workspace holds at every path the outcome names — and returns the whole AttemptEnd the
outcome commit writes: outcome after the completion gates, the task's next state, artifacts,
outbox entries, diagnostics and usage. Sealing the evidence is agentd/evidence/__init__.py's job.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from agentd import frozen_value
from agentd.adapters.base import AdapterRun
from agentd.attempt.guards import ended_by_a_guard, provider_reset, provider_reset_of
from agentd.attempt.outcome import (
    CompletionChecks,
    Extracted,
    FileFact,
    Gated,
    RetryPolicy,
    artifact_role,
    decide,
    downgrade,
    extract_outcome,
    gate,
)
from agentd.clock import format_ts
from agentd.hashing import sha256_hex
from agentd.records import (
    ArtifactRow,
    AttemptEnd,
    CredentialGroup,
    ExitStatus,
    OutboxEntry,
    OutboxKind,
    SideEffects,
    TaskAttempt,
    TaskOutcome,
    TaskRecord,
)
from agentd.records.tasks import ConstitutionProposal
from agentd.usage import Usage, bounded, judge_usage, rejudged

Stopped = Literal["interrupted", "operator_canceled"]
MAX_DENIAL_EVENTS = 50  # policy_denied events per attempt; one more event counts the rest


@frozen_value
class OutboxPolicy:
    """The profile's result_policy, as judging needs it."""

    allow_follow_ups: bool = False
    allow_messages: bool = False
    max_depth: int = 3  # result_policy.max_follow_up_depth
    max_per_outcome: int = 10  # result_policy.max_follow_ups_per_outcome
    hold_side_effects: bool = False  # result_policy.require_approval_for_side_effects
    agent: str = ""  # whose outbox: in every key, so two agents sending to one receiver never share a key


@frozen_value
class ProposalFact:
    """The file an outcome's constitution_proposal names, read from the workspace before judging
    (seed 000 §1b): its text, or why it cannot be a proposal."""

    document: str  # soul | purpose
    path: str
    reason: str
    base_sha256: str  # the document's hash in the attempt's bundle: what the agent proposed against
    text: str | None = None  # redacted, like every text judging sees
    sha256: str | None = None  # of `text`: what accepting it would make the document's hash
    problem: str | None = None


@frozen_value
class AttemptFacts:
    """Everything judging needs, gathered before it. Text in here is already redacted."""

    task: TaskRecord
    attempt: TaskAttempt
    checks: CompletionChecks
    timeout_s: float
    run: AdapterRun | None = None  # None: it never ran to an end we saw
    stopped: Stopped | None = None  # stopped from outside: a service stop, or the operator
    result_text: str | None = None  # what the adapter left in $AGENTD_RESULT_PATH
    result_problem: str | None = None  # why result_text is missing although a file was there
    extracted: Extracted | None = None  # the outcome found in the result text / final message
    files: Mapping[str, FileFact] = field(default_factory=dict)  # every workspace path the outcome names
    stdout_bytes: int = 0
    audit: ArtifactRow | None = None  # stdout as the adapter-audit artifact, when a task asks for one
    evidence: Mapping[str, str | None] = field(default_factory=dict)  # stdout/stderr/result/last_message paths
    swept: bool = False  # the boot sweep closed it: the runtime died during it, its exit is unknown
    internal_error: str | None = None  # agentd itself failed during the attempt, and how
    started: bool = True  # the adapter began: side effects may have happened
    outbox_policy: OutboxPolicy = OutboxPolicy()
    notes: Mapping[str, Any] = field(default_factory=dict)  # for the diagnostics (killed pids, …)
    redactions: int = 0
    evidence_problems: tuple[str, ...] = ()  # strict_evidence: what the sealed evidence failed
    proposal: ProposalFact | None = None  # the outcome's constitution_proposal, read from the workspace
    credential: CredentialGroup | None = None  # who shares its provider credential (a reset holds them back)

    @property
    def crashed(self) -> bool:
        """The runtime died during the attempt and it left nothing to judge."""
        return self.swept and self.result_text is None


def extracted_of(facts: AttemptFacts) -> Extracted:
    """The outcome the facts carry (found from the result text or the final message)."""
    if facts.extracted is not None:
        return facts.extracted
    final = facts.run.final_message if facts.run is not None else None
    return extract_outcome(facts.result_text, final, facts.result_problem, kind=facts.attempt.adapter_kind)


def judge(facts: AttemptFacts, *, now: datetime, policy: RetryPolicy, rng: random.Random) -> AttemptEnd:
    """The attempt's end, decided from its facts: what the outcome commit writes."""
    run, task, attempt = facts.run, facts.task, facts.attempt
    extracted = extracted_of(facts)
    gated, termination, failure_type = _gated(facts, extracted)
    if facts.evidence_problems and gated.outcome.status == "completed":
        reason = "its evidence did not verify: " + "; ".join(facts.evidence_problems)[:2000]
        gated, failure_type = Gated(downgrade(gated.outcome, reason), (reason,)), "evidence_unverified"
    decision = decide(
        task,
        task.free_attempt_count,
        gated.outcome,
        now=now,
        policy=policy,
        rng=rng,
        rate_limited=bool(run and run.rate_limited and facts.stopped is None),
        interrupted=facts.stopped == "interrupted",
        crashed=facts.crashed,
        reset_at=provider_reset(run),
    )
    if decision.crashed and decision.status == "permanent_failure":
        termination = "crashed_runtime"
    usage, usage_problems = judged_usage(facts, extracted)
    diagnostics = _diagnostics(facts, extracted, gated, failure_type)
    if usage_problems:
        diagnostics["usage_problems"] = usage_problems
    denials = run.denials if run else ()
    outbox = outbox_entries(
        task,
        attempt.attempt_id,
        gated.outcome,
        decision.status,
        facts.outbox_policy,
        facts.proposal,
        key=outbox_key(facts.outbox_policy.agent, task, attempt.attempt_number),
    )
    return AttemptEnd(
        attempt_id=attempt.attempt_id,
        task_id=task.task_id,
        ended_at=now,
        exit_status=_exit_status(facts),
        retry_class=decision.retry_class,
        termination_reason=termination,
        outcome=gated.outcome,
        status=decision.status,
        available_at=decision.available_at,
        last_error=decision.last_error,
        free_attempt=decision.free_attempt,
        rate_limited=decision.rate_limited,
        crashed=decision.crashed,
        side_effects=side_effects(facts),
        model=run.model if run else None,
        downgrade_reasons=gated.reasons,
        artifacts=_artifacts(facts, gated),
        outbox=outbox,
        side_effects_held=side_effects_hold(outbox, facts.outbox_policy, task),
        provider_reset=provider_reset_of(facts.run, facts.credential, decision.rate_limited),
        diagnostics=diagnostics,
        usage=_usage(usage),
        paths=dict(facts.evidence),
        boot_sweep=facts.swept,
        policy_denials=denials[:MAX_DENIAL_EVENTS],
        policy_denials_dropped=max(len(denials) - MAX_DENIAL_EVENTS, 0),
    )


def side_effects(facts: AttemptFacts) -> SideEffects:
    process = facts.run.process if facts.run else None
    never_ran = not facts.started or (process is not None and process.start_error is not None)
    return "none" if never_ran else "possible"


def _exit_status(facts: AttemptFacts) -> ExitStatus:
    if facts.swept:  # its exit was never seen: error, and its diagnostics say exit_seen false (migration 0017)
        return "error"
    return facts.run.exit_status if facts.run is not None else "error"


def _gated(facts: AttemptFacts, extracted: Extracted) -> tuple[Gated, str, str | None]:
    """(gated outcome, termination_reason, failure_type)."""
    if facts.internal_error is not None:
        return Gated(TaskOutcome.failure(facts.internal_error)), "internal_error", "internal_error"
    if facts.stopped == "operator_canceled":
        summary = "canceled by the operator while running; the adapter was stopped"
        return Gated(TaskOutcome.failure(summary, "operator_canceled")), "operator_canceled", "operator_canceled"
    if facts.crashed:
        summary = "the runtime died during this attempt; the boot sweep reclaimed it"
        return Gated(TaskOutcome.failure(summary)), "boot_sweep", "crashed_runtime"
    if facts.swept:
        return _gate(facts, extracted, adapter_ok=None, adapter_failure=None, termination="boot_sweep")
    run = facts.run
    if facts.stopped == "interrupted" or run is None:
        summary = "interrupted: the dispatcher was stopping and the grace period ran out"
        return Gated(TaskOutcome.failure(summary)), "interrupted", "interrupted"
    process = run.process
    if process is not None and process.start_error:
        return Gated(TaskOutcome.failure(process.start_error)), "start_failed", "start_error"
    if (ended := ended_by_a_guard(run)) is not None:
        return ended
    if run.exit_status == "timeout":
        summary = f"timed out after {facts.timeout_s:g}s; the process group was killed"
        return Gated(TaskOutcome.failure(summary)), "timeout", "timeout"
    if run.diagnostics.get("max_turns_reached") is True:  # the harness's turn budget ran out (seed 001 §7.2)
        summary = f"ran out of its turns (the adapter's max_turns): {run.failure or 'the harness stopped'}"
        return Gated(TaskOutcome.failure(summary)), "max_turns", "max_turns"
    if run.rate_limited:
        summary = f"rate limited: {run.failure or 'the provider said slow down'}"
        return Gated(TaskOutcome.failure(summary)), "exited", "rate_limited"
    return _gate(facts, extracted, adapter_ok=run.ok, adapter_failure=run.failure, termination="exited")


def _gate(
    facts: AttemptFacts, extracted: Extracted, *, adapter_ok: bool | None, adapter_failure: str | None, termination: str
) -> tuple[Gated, str, str | None]:
    gated = gate(
        extracted,
        adapter_ok=adapter_ok,
        adapter_failure=adapter_failure,
        files=facts.files,
        attempt_started=facts.attempt.started_at,
        checks=facts.checks,
        audit_bytes=facts.stdout_bytes,
    )
    if gated.outcome.status == "completed":
        return gated, termination, None
    if extracted.outcome is None:
        return gated, termination, "adapter_error" if adapter_ok is False else "no_outcome"
    return gated, termination, "gate_failed" if gated.downgraded else "model_reported_failure"


def _artifacts(facts: AttemptFacts, gated: Gated) -> tuple[ArtifactRow, ...]:
    allowed = facts.checks.artifact_roles
    rows = [
        ArtifactRow(artifact_role(gated.outcome, f.relative_path, allowed), str(Path(f.relative_path)), f.sha256)
        for f in gated.artifacts
    ]
    if facts.checks.require_adapter_audit and gated.outcome.status == "completed" and facts.audit is not None:
        rows.append(facts.audit)
    return tuple(rows)


def outbox_key(agent: str, task: TaskRecord, attempt_number: int) -> str:
    """What an outcome's outbox keys start with: the agent, the task and the attempt's number, never the
    attempt's ULID. They survive a database rolled back to before the attempt (a restored backup, a
    lost -wal), so the attempt that runs again re-sends each message under the key its receiver already
    saw (docs/messages.md, "Exactly once per key"). The task is its id and creation time, so a task id a restore
    hands out again is another task; a sensor's task is its `sensor:<id>:<dedupe_key>` source, which
    names one event of that sensor however often a restored database creates the task for it again."""
    origin = task.source if task.source.startswith("sensor:") else f"{task.task_id} at {format_ts(task.created_at)}"
    return f"task:{sha256_hex(f'{agent} {origin}'.encode())[:16]}:attempt:{attempt_number}"


def outbox_entries(
    task: TaskRecord,
    attempt_id: str,
    outcome: TaskOutcome,
    status: str,
    policy: OutboxPolicy,
    proposal: ProposalFact | None = None,
    *,
    key: str,
) -> tuple[OutboxEntry, ...]:
    """Side effects the outcome asks for; applied after the commit, only if verified and allowed. Each
    entry's idempotency key is `key` (outbox_key) and what it is: `…:message:0`, `…:follow_up:1`."""
    entries = []
    if status == "completed":
        for i, intent in enumerate(outcome.follow_up_tasks or []):
            entry_key, payload = f"{key}:follow_up:{i}", intent.model_dump(mode="json")
            refusal = _delegation_refusal(task, i, policy)
            if refusal is not None:
                entries.append(OutboxEntry("follow_up_task", entry_key, payload, "refused", {"reason": refusal}))
            else:
                entries.append(OutboxEntry("follow_up_task", entry_key, payload))
        for i, message in enumerate(outcome.external_messages or []):
            entry_key = f"{key}:message:{i}"
            entries.append(
                OutboxEntry("external_message", entry_key, message)  # pending: the outbox hands it to a handler
                if policy.allow_messages
                else _refused("external_message", entry_key, message, "external messages")
            )
        if outcome.constitution_proposal is not None:
            entries.append(proposal_entry(task, attempt_id, outcome.constitution_proposal, proposal, key))
    if task.workflow_ref is not None and status in ("completed", "permanent_failure", "blocked", "operator_canceled"):
        signal = {
            "workflow_id": task.workflow_ref.workflow_id,
            "state_id": task.workflow_ref.state_id,
            "iteration": task.workflow_iteration,
            "signal": outcome.workflow_signal,
            "task_status": status,
        }
        entries.append(OutboxEntry("workflow_signal", f"{key}:workflow", signal))
    return tuple(entries)


def side_effects_hold(entries: tuple[OutboxEntry, ...], policy: OutboxPolicy, task: TaskRecord) -> str | None:
    """Why the outcome's follow-ups and messages wait for an operator, or None: only when the
    profile asks for it and there is something to hold (refused entries are not held)."""
    held = [e for e in entries if e.kind in HELD_KINDS and e.status == "pending"]
    if not policy.hold_side_effects or not held:
        return None
    follow_ups = sum(e.kind == "follow_up_task" for e in held)
    messages = len(held) - follow_ups
    return (
        f"{follow_ups} follow-up task(s) and {messages} external message(s): the profile "
        f"{task.requested_profile_id}'s result_policy requires approval for side effects"
    )


HELD_KINDS = ("follow_up_task", "external_message")  # what require_approval_for_side_effects holds


def _delegation_refusal(task: TaskRecord, index: int, policy: OutboxPolicy) -> str | None:
    """Why the outcome's follow-up number `index` may not be created (seed 004 bounded delegation)."""
    if not policy.allow_follow_ups:
        return "the profile's result_policy does not allow follow-up tasks"
    if task.delegation_depth + 1 > policy.max_depth:
        return (
            f"delegation depth {task.delegation_depth + 1} would exceed result_policy.max_follow_up_depth "
            f"= {policy.max_depth} (task {task.task_id} is itself {task.delegation_depth} follow-ups deep)"
        )
    if index >= policy.max_per_outcome:
        return f"follow-up {index + 1} exceeds result_policy.max_follow_ups_per_outcome = {policy.max_per_outcome}"
    return None


def proposal_entry(
    task: TaskRecord, attempt_id: str, proposed: ConstitutionProposal, fact: ProposalFact | None, key: str
) -> OutboxEntry:
    """A completed outcome's constitution proposal: pending until the outbox records it for the
    operator, or refused with the reason its file cannot be one. No profile forbids proposing: it
    changes nothing until the operator accepts (seed 000 §1b)."""
    key = f"{key}:constitution"
    payload: dict[str, Any] = {
        "document": proposed.document,
        "path": proposed.path,
        "reason": proposed.reason,
        "base_sha256": fact.base_sha256 if fact else None,
        "task_id": task.task_id,
        "attempt_id": attempt_id,
    }
    if fact is None or fact.problem is not None or fact.text is None:
        problem = fact.problem if fact and fact.problem else "its file was not read from the workspace"
        return OutboxEntry("constitution_proposal", key, payload, "refused", {"reason": f"proposal refused: {problem}"})
    return OutboxEntry(
        "constitution_proposal", key, {**payload, "proposed_text": fact.text, "proposed_sha256": fact.sha256}
    )


def _refused(kind: OutboxKind, key: str, payload: dict[str, Any], what: str) -> OutboxEntry:
    reason = f"the profile's result_policy does not allow {what}"
    return OutboxEntry(kind, key, payload, "refused", {"reason": reason})


def _diagnostics(facts: AttemptFacts, extracted: Extracted, gated: Gated, failure_type: str | None) -> dict[str, Any]:
    run = facts.run
    process = run.process if run else None
    found: dict[str, Any] = {
        "summary": gated.outcome.operator_summary[:2000],
        "outcome_source": extracted.source,
        "failure_type": failure_type,
        **facts.notes,
    }
    if facts.swept:
        found["exit_seen"] = False
    if facts.redactions:
        found["redactions"] = facts.redactions
    if extracted.problem and extracted.outcome is None:
        found["outcome_problem"] = extracted.problem
    if gated.reasons:
        found["gate_failures"] = list(gated.reasons)
    if run is not None:
        found.update(run.diagnostics)
        if run.failure:
            found["adapter_failure"] = run.failure
        if run.rate_limited:
            found["rate_limited"] = True
        if run.cli_version:
            found["cli_version"] = run.cli_version
    if process is not None:
        found.update(
            exit_code=process.exit_code,
            signal=process.signal,
            elapsed_s=round(process.elapsed_s, 3),
            stdout_bytes=process.stdout.bytes_seen,
            stderr_bytes=process.stderr.bytes_seen,
            stdout_truncated=process.stdout.truncated,
            stderr_truncated=process.stderr.truncated,
            stragglers=process.stragglers,
            **({"limit_hit": process.limit_hit} if process.limit_hit else {}),
        )
    return found


def judged_usage(facts: AttemptFacts, extracted: Extracted) -> tuple[Usage | None, list[str]]:
    """What the attempt cost, every number through the one judge (agentd/usage.py) whichever adapter
    reported it, with every problem found on the way: the harness parser's (in its diagnostics), the
    judge's of the adapter's Usage, a script outcome's. None when nothing ran to report anything."""
    run = facts.run
    found = run.diagnostics.get("usage_problems") if run is not None else None
    problems = [p for p in found if isinstance(p, str)] if isinstance(found, list) else []
    reported, more = _reported_usage(facts, extracted)
    if reported is None and run is not None:
        reported, more = rejudged(run.usage, f"{facts.attempt.adapter_kind} usage")
    return reported, bounded(problems + more)


def _reported_usage(facts: AttemptFacts, extracted: Extracted) -> tuple[Usage | None, list[str]]:
    """What a script attempt says it cost (`usage` in its outcome), judged at the edge. Only a
    script's word is taken: a harness's usage comes from the harness, never from what the model wrote."""
    if facts.attempt.adapter_kind != "script" or extracted.usage is None:
        return None, []
    return judge_usage(extracted.usage, "outcome.usage")


def _usage(u: Usage | None) -> dict[str, Any]:
    if u is None:
        return {}
    return {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "cost_usd": u.cost_usd,
        "cost_estimated": int(u.cost_estimated) if u.cost_usd is not None else None,
    }
