"""How an attempt ends when one of agentd's guards stopped it, not the harness: a tool call that ran without
the policy's decision (the ledger: docs/policy.md), a budget (agentd/attempt/meter.py), a limit of its cgroup
(agentd/process/limits.py), and when a provider's rate limit resets (the gateway: docs/gateway.md). Pure: the
judge (agentd/attempt/judge.py) calls these on the run it was handed."""

from __future__ import annotations

from datetime import datetime

from agentd.adapters.base import AdapterRun
from agentd.attempt.outcome import Gated
from agentd.clock import parse_ts
from agentd.process.timer import POLICY_VIOLATION
from agentd.records import CredentialGroup, ProviderReset, TaskOutcome
from agentd.records.base import OutcomeStatus

# A limit of its own cgroup ended the attempt (agentd/process/limits.py; docs/reliability.md).
LIMIT_HIT = {
    "pids": "hit its limit on processes and threads ([dispatch] max_pids); everything it started was killed",
    "memory": "the kernel killed inside it at its memory limit ([dispatch] max_memory_mb); everything it started "
    "was killed",
}


def provider_reset_of(
    run: AdapterRun | None, credential: CredentialGroup | None, rate_limited: bool
) -> ProviderReset | None:
    """A rate-limited attempt whose provider named its reset rests its credential until then (docs/gateway.md)."""
    until = provider_reset(run)
    if not rate_limited or until is None or credential is None or run is None:
        return None
    said = run.diagnostics.get("rate_limit")
    said = said if isinstance(said, dict) else {}
    reason = str(said.get("reason") or "")[:500] or "the provider's rate limit"
    shared = said.get("credential") if isinstance(said.get("credential"), str) else None
    return ProviderReset(credential, until, reason, shared)


def provider_reset(run: AdapterRun | None) -> datetime | None:
    """When the provider said its limit resets, as the model gateway read it from its 429 (docs/gateway.md)."""
    said = run.diagnostics.get("rate_limit") if run is not None else None
    at = said.get("reset_at") if isinstance(said, dict) else None
    try:
        return parse_ts(at) if isinstance(at, str) else None
    except ValueError:
        return None


def ended_by_a_guard(run: AdapterRun) -> tuple[Gated, str, str | None] | None:
    """The end of a run one of agentd's guards stopped: the tool policy's ledger, the budget, a cgroup limit."""
    hit = run.process.limit_hit if run.process is not None else None
    if run.diagnostics.get("policy_violations") or hit == POLICY_VIOLATION:
        return _policy_violation(run)
    if hit == "budget" or run.diagnostics.get("budget_stop"):
        return _budget_exceeded(run)
    if hit in LIMIT_HIT:
        return Gated(TaskOutcome.failure(LIMIT_HIT[hit])), f"{hit}_limit", "resource_limit"
    return None


def _policy_violation(run: AdapterRun) -> tuple[Gated, str, str | None]:
    """A tool call ran without the decision agentd's policy makes on every call (docs/policy.md, "Every call
    accounted for"): the run was ended at once and nothing it claims is trusted. Not retried by itself: a person
    looks first (`agentd task retry`)."""
    found = run.diagnostics.get("policy_violations")
    first = found[0] if isinstance(found, list) and found and isinstance(found[0], dict) else {}
    call = f"{first.get('tool', 'a tool')} call {first.get('call_id', '')}".replace("  ", " ").strip()
    what = f"{call} {first.get('what')}" if first.get("what") else "a tool call ran without agentd's decision"
    summary = f"policy violation: {what}; the attempt was ended at once"
    return Gated(TaskOutcome.failure(summary, "permanent_failure")), POLICY_VIOLATION, POLICY_VIOLATION


def _budget_exceeded(run: AdapterRun) -> tuple[Gated, str, str | None]:
    """Stopped as it passed its spending cap: by agentd's meter (agentd/attempt/meter.py), or by the harness
    itself on the cap agentd gave it (claude's --max-budget-usd). Past its own cap it would pass it again: a
    permanent failure. Past what was left of the day: retryable, and the claim's budget hold keeps it for
    the next UTC day (agentd/config/budget.py)."""
    stop = run.diagnostics.get("budget_stop") or {}
    spent = f"it spent ${stop['spent_usd']:.4f}, " if isinstance(stop.get("spent_usd"), int | float) else ""
    cap = f"{stop.get('cap', 'its spending cap')}" + (f" (${stop['cap_usd']:g})" if stop.get("cap_usd") else "")
    summary = f"stopped by {stop.get('by', 'agentd')}: {spent}past {cap}"
    status: OutcomeStatus = "permanent_failure" if stop.get("per_attempt", True) else "retryable_failure"
    return Gated(TaskOutcome.failure(summary, status)), "budget_exceeded", "budget_exceeded"
