"""From what an adapter left behind to the task's next state (seed 000 §9, seed 004).

Pure. `extract_outcome` finds the TaskOutcome (result file first, then the last fenced json
block of the final message); `gate` checks completion against what the workspace holds (file
facts looked up beforehand) and downgrades with reasons; `decide` turns the gated outcome into the
task's next status, retry time and counters.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import field
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import ValidationError

from agentd import frozen_value
from agentd.edge import Refused, loads_setting_aside
from agentd.records import OutcomeStatus, RetryClass, TaskOutcome, TaskRecord, TaskStatus
from agentd.records.tasks import MACHINE_STATUS_OF

_FENCED_JSON = re.compile(r"```json[ \t]*\r?\n(.*?)```", re.DOTALL)
MTIME_SLACK_S = 2.0  # filesystem timestamp granularity


@frozen_value
class Extracted:
    outcome: TaskOutcome | None
    source: Literal["result_file", "final_message", "none"]
    problem: str | None = None
    usage: Any = None  # the outcome's own `usage` object, as written: a script reports its cost here


# Where each kind of adapter leaves the text an outcome block is looked for in, as its operator knows it.
FINAL_TEXT_OF = {"script": "its stdout", "ollama-generate": "the model's answer"}
FINAL_TEXT = "the harness's final message"


def extract_outcome(
    result_text: str | None, final_message: str | None, result_problem: str | None = None, *, kind: str = ""
) -> Extracted:
    """The adapter's TaskOutcome, or why there is none, in the words of its `kind`."""
    problems = [f"result file: {result_problem}"] if result_problem else []
    if result_text and result_text.strip():
        outcome, problem, usage = _parse(result_text)
        if outcome is not None:
            return Extracted(outcome, "result_file", usage=usage)
        problems.append(f"result file: {problem}")
    blocks = _FENCED_JSON.findall(final_message or "")
    if blocks:
        outcome, problem, usage = _parse(blocks[-1])
        if outcome is not None:
            return Extracted(outcome, "final_message", usage=usage)
        problems.append(f"last json block of {FINAL_TEXT_OF.get(kind, FINAL_TEXT)}: {problem}")
    if not problems:
        where = FINAL_TEXT_OF.get(kind, FINAL_TEXT)
        problems.append(f"no structured outcome (no result file, no ```json block in {where})")
    return Extracted(None, "none", "; ".join(problems))


def _parse(text: str) -> tuple[TaskOutcome | None, str | None, Any]:
    """(outcome, why there is none, its `usage` object). `usage` is judged on its own (a bad one is
    unknown usage, never a lost outcome), so it is taken out before the TaskOutcome is validated."""
    try:
        data, usage = loads_setting_aside(text, "outcome", "usage")
    except Refused as exc:
        return None, str(exc).removeprefix("outcome: "), None
    try:
        return TaskOutcome.model_validate(data), None, usage
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "outcome"
        return None, f"not a TaskOutcome ({where}: {first['msg']})", None


@frozen_value
class CompletionChecks:
    """What the task type and the intent ask completion to prove."""

    required_artifacts: tuple[str, ...] = ()
    require_artifacts: bool = False
    verify_file_changes: bool = False
    require_adapter_audit: bool = False
    artifact_roles: tuple[str, ...] = ("output",)  # the roles the task type allows; an artifact names one


def artifact_role(outcome: TaskOutcome, relative: str, allowed: tuple[str, ...]) -> str:
    """The role an artifact has: the one its outcome names for it, else the task type's only role,
    else the generic `output` (an undeclared artifact of a several-role type is not given one of them)."""
    declared = (outcome.artifact_roles or {}).get(relative)
    if declared:
        return declared
    return allowed[0] if len(allowed) == 1 else "output"


@frozen_value
class FileFact:
    """What the workspace holds at a path an outcome or a task type names, looked up before judging."""

    relative_path: str
    problem: str | None = None  # the path is not one inside the workspace, and why
    exists: bool = False
    is_file: bool = False
    mtime: float | None = None
    sha256: str | None = None


@frozen_value
class Gated:
    outcome: TaskOutcome
    reasons: tuple[str, ...] = ()  # why a claimed completion was downgraded
    artifacts: tuple[FileFact, ...] = ()

    @property
    def downgraded(self) -> bool:
        return bool(self.reasons)


def gate(
    extracted: Extracted,
    *,
    adapter_ok: bool | None,
    adapter_failure: str | None,
    files: Mapping[str, FileFact],
    attempt_started: datetime,
    checks: CompletionChecks,
    audit_bytes: int,
) -> Gated:
    """Completed only if the evidence agrees; otherwise a retryable failure saying why. `files` holds
    a fact for every path `paths_to_check` names."""
    outcome = extracted.outcome
    if outcome is None:
        summary = extracted.problem or "no outcome"
        if adapter_failure:
            summary = f"{adapter_failure}; {summary}"
        return Gated(TaskOutcome.failure(summary), (summary,))
    if outcome.status == "operator_canceled":
        reason = "operator_canceled is the operator's to give, not the model's"
        return Gated(downgrade(outcome, reason, status="permanent_failure"), (reason,))
    if outcome.status != "completed":
        return Gated(outcome)
    reasons: list[str] = []
    if outcome.machine_status != "ok":
        reasons.append(f"completed needs machine_status ok, found {outcome.machine_status}")
    if adapter_ok is False:  # None: its exit is unknown (the boot sweep found what it left)
        reasons.append(f"the adapter did not end cleanly ({adapter_failure or 'error'})")
    if too_much := _too_much(outcome):  # judged unread: looking at each would cost what it asks for
        reasons += too_much
        return Gated(downgrade(outcome, "; ".join(reasons)), tuple(reasons))
    verified, artifact_reasons = _check_artifacts(outcome, files, checks)
    reasons += artifact_reasons
    if checks.verify_file_changes:
        reasons += _check_file_changes(outcome.file_changes or [], files, attempt_started)
    if checks.require_adapter_audit and audit_bytes == 0:
        reasons.append("an adapter audit is required but the adapter printed nothing")
    if reasons:
        return Gated(downgrade(outcome, "; ".join(reasons)), tuple(reasons))
    return Gated(outcome, (), tuple(verified))


# The distinct files one outcome may name (its artifacts and file changes): each is looked up in the
# workspace (~60 µs) in the database's thread, and a result file of 16 MiB can name a million and more.
MAX_NAMED_FILES = 10_000
# The follow-up tasks and external messages one outcome may ask for, in all: each becomes an outbox
# row (a refused one too) in the attempt's commit, and each message a delivery; a 16 MiB result can ask
# for millions. The profile's own caps (delegation's max_per_outcome) still apply below this.
MAX_SIDE_EFFECTS = 1_000


def named_files(outcome: TaskOutcome) -> list[str]:
    return list(dict.fromkeys([*(outcome.artifact_paths or []), *(outcome.file_changes or [])]))


def _too_much(outcome: TaskOutcome) -> list[str]:
    """Why the outcome names more files, or asks for more side effects, than one outcome may."""
    found = []
    if (named := len(named_files(outcome))) > MAX_NAMED_FILES:
        found.append(f"the outcome names {named:,} files (artifacts and file changes); at most {MAX_NAMED_FILES:,}")
    follow_ups, messages = len(outcome.follow_up_tasks or []), len(outcome.external_messages or [])
    if follow_ups + messages > MAX_SIDE_EFFECTS:
        found.append(
            f"the outcome asks for {follow_ups:,} follow-up tasks and {messages:,} external messages; "
            f"at most {MAX_SIDE_EFFECTS:,} in all"
        )
    return found


def paths_to_check(outcome: TaskOutcome | None, checks: CompletionChecks) -> list[str]:
    """Every workspace path the gate will ask about for this outcome (none it names when it names more
    than MAX_NAMED_FILES: the gate refuses it unread)."""
    claimed = named_files(outcome) if outcome else []
    if len(claimed) > MAX_NAMED_FILES:
        claimed = []
    return list(dict.fromkeys([*claimed, *checks.required_artifacts]))


def _check_artifacts(
    outcome: TaskOutcome, files: Mapping[str, FileFact], checks: CompletionChecks
) -> tuple[list[FileFact], list[str]]:
    verified, reasons = [], []
    claimed = list(outcome.artifact_paths or [])
    if checks.require_artifacts and not claimed and not checks.required_artifacts:
        reasons.append("this task type requires artifacts and none were claimed")
    for relative, role in (outcome.artifact_roles or {}).items():
        if relative not in claimed and relative not in checks.required_artifacts:
            reasons.append(f"artifact_roles names {relative!r}, which is not among the artifacts")
        elif role not in checks.artifact_roles:
            allowed = ", ".join(checks.artifact_roles)
            reasons.append(f"artifact {relative!r}: role {role!r} is not one this task type allows ({allowed})")
    for relative in dict.fromkeys([*claimed, *checks.required_artifacts]):
        fact = files.get(relative, FileFact(relative))
        if fact.problem:
            reasons.append(fact.problem)
        elif not fact.is_file:
            required = " (required)" if relative in checks.required_artifacts else ""
            reasons.append(f"artifact {relative!r}{required} does not exist in the workspace")
        else:
            verified.append(fact)
    return verified, reasons


def _check_file_changes(claimed: list[str], files: Mapping[str, FileFact], started: datetime) -> list[str]:
    reasons = []
    for relative in claimed:
        fact = files.get(relative, FileFact(relative))
        if fact.problem:
            reasons.append(fact.problem)
        elif not fact.exists:
            reasons.append(f"claimed change to {relative!r}, which does not exist")
        elif (fact.mtime or 0.0) < started.timestamp() - MTIME_SLACK_S:
            reasons.append(f"claimed change to {relative!r}, which was not modified during the attempt")
    return reasons


def downgrade(outcome: TaskOutcome, reason: str, status: OutcomeStatus = "retryable_failure") -> TaskOutcome:
    return outcome.model_copy(
        update={
            "status": status,
            "machine_status": MACHINE_STATUS_OF[status],
            "operator_summary": f"not completed: {reason} (model said: {outcome.operator_summary})",
        }
    )


# --- the task's next state -----------------------------------------------------------------------


@frozen_value
class RetryPolicy:
    backoff_base_s: float
    backoff_max_s: float
    backoff_jitter: float
    rate_limit_backoff_s: float
    max_rate_limit_reschedules: int
    crash_limit: int = 3  # boot sweeps in a row before a task is ended crashed_runtime
    max_reset_wait_s: float = 6 * 3600.0  # the longest a provider's reset is waited for ([dispatch])


@frozen_value
class Decision:
    status: TaskStatus  # the task's next status
    retry_class: RetryClass
    available_at: datetime | None  # when a retry may run
    last_error: str | None
    free_attempt: bool = False  # rate-limited, interrupted or crashed: does not spend max_attempts
    rate_limited: bool = False
    crashed: bool = False  # the runtime died during the attempt (counted toward crash_limit)
    notes: tuple[str, ...] = field(default=())


def decide(
    task: TaskRecord,
    free_attempts_so_far: int,
    outcome: TaskOutcome,
    *,
    now: datetime,
    policy: RetryPolicy,
    rng: random.Random,
    rate_limited: bool = False,
    interrupted: bool = False,
    crashed: bool = False,
    reset_at: datetime | None = None,
) -> Decision:
    """Next status for a task whose attempt (already counted in attempt_count) just ended. `reset_at`: when the
    provider said its limit resets (a rate-limited attempt's; docs/gateway.md, "Quotas and resets")."""
    if outcome.status == "completed":
        return Decision("completed", "none", None, None)
    if outcome.status in ("permanent_failure", "blocked", "operator_canceled"):
        return Decision(outcome.status, "permanent", None, outcome.operator_summary)
    if crashed:
        return _after_crash(task, now, policy)
    free = rate_limited or interrupted
    counted = task.attempt_count - free_attempts_so_far - (1 if free else 0)
    if rate_limited and task.rate_limit_count + 1 > policy.max_rate_limit_reschedules:
        error = f"rate limited {task.rate_limit_count + 1} times (cap {policy.max_rate_limit_reschedules})"
        return Decision("permanent_failure", "permanent", None, error, free, rate_limited)
    if counted >= task.max_attempts:
        error = f"out of attempts ({counted} of {task.max_attempts}): {outcome.operator_summary}"
        return Decision("permanent_failure", "permanent", None, error, free, rate_limited)
    if rate_limited:
        delay = (
            after_reset(reset_at, now, policy, rng)
            if reset_at
            else backoff(policy.rate_limit_backoff_s, task.rate_limit_count + 1, policy, rng)
        )
    elif interrupted:
        delay = 0.0  # the service stopped, not the task: run it again as soon as possible
    else:
        delay = backoff(policy.backoff_base_s, counted, policy, rng)
    return Decision(
        "retryable_failure", "retryable", now + timedelta(seconds=delay), outcome.operator_summary, free, rate_limited
    )


def _after_crash(task: TaskRecord, now: datetime, policy: RetryPolicy) -> Decision:
    """The runtime died during the attempt: not the task's fault, so no attempt is spent — unless
    this task has now been running each of the last crash_limit times the runtime died."""
    crashes = task.crash_count + 1
    if crashes >= policy.crash_limit:
        error = (
            f"crashed_runtime: the runtime died during {crashes} attempts of this task in a row "
            f"(limit [dispatch] crash_limit = {policy.crash_limit}); it is not run again by itself"
        )
        return Decision("permanent_failure", "permanent", None, error, free_attempt=True, crashed=True)
    error = f"the runtime died during this attempt ({crashes} of {policy.crash_limit} in a row); run again"
    return Decision("retryable_failure", "retryable", now, error, free_attempt=True, crashed=True)


RESET_JITTER_S = 10.0  # at most this much after a reset, at random, so tasks waiting on one do not stampede


def after_reset(reset_at: datetime, now: datetime, policy: RetryPolicy, rng: random.Random) -> float:
    """Seconds from now until the provider's limit resets, and a little after (never before it), capped at
    [dispatch] max_reset_wait_s: a provider's reset an hour away is waited for, not retried every few minutes."""
    wait = max(0.0, (reset_at - now).total_seconds()) + rng.uniform(0, RESET_JITTER_S)
    return min(wait, policy.max_reset_wait_s)


def backoff(base_s: float, retry_number: int, policy: RetryPolicy, rng: random.Random) -> float:
    """base · 2^(n-1), capped at backoff_max_s, then ± jitter so retries do not stampede."""
    delay = min(policy.backoff_max_s, base_s * 2.0 ** max(retry_number - 1, 0))
    return max(0.0, delay * (1 + rng.uniform(-policy.backoff_jitter, policy.backoff_jitter)))
