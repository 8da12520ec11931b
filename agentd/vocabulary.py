"""agentd's words, free of every dependency: a task's statuses (seed 000 §6), an outcome's, an
attempt's ending, and seed 003 §7's dispatch context. The CLI offers them as choices before it loads a
record (agentd/records builds its records from them)."""

from __future__ import annotations

from typing import Literal, get_args

TaskStatus = Literal[
    "pending",
    "running",
    "completed",
    "retryable_failure",
    "permanent_failure",
    "blocked",
    "operator_canceled",
]
TASK_STATUSES: tuple[TaskStatus, ...] = get_args(TaskStatus)
TERMINAL_STATUSES: tuple[TaskStatus, ...] = (
    "completed",
    "permanent_failure",
    "blocked",
    "operator_canceled",
)

# An outcome's status, and the machine status each one means (seed 000 §7's TaskOutcome).
OutcomeStatus = Literal["completed", "retryable_failure", "permanent_failure", "blocked", "operator_canceled"]
MachineStatus = Literal["ok", "needs_retry", "blocked", "failed", "canceled"]
MACHINE_STATUS_OF: dict[OutcomeStatus, MachineStatus] = {
    "completed": "ok",
    "retryable_failure": "needs_retry",
    "permanent_failure": "failed",
    "blocked": "blocked",
    "operator_canceled": "canceled",
}

# How an attempt ended, in its record (seed 000 §8's TaskAttempt) and its end.
ExitStatus = Literal[
    "ok", "error", "timeout"
]  # seed 000 §8; a boot-swept attempt is error, diagnostics exit_seen false
RetryClass = Literal["none", "retryable", "permanent"]
SideEffects = Literal["none", "possible"]  # none: the adapter never started
OUTCOME_STATUSES: tuple[str, ...] = get_args(OutcomeStatus)
MACHINE_STATUSES: tuple[str, ...] = get_args(MachineStatus)
EXIT_STATUSES: tuple[str, ...] = get_args(ExitStatus)
RETRY_CLASSES: tuple[str, ...] = get_args(RetryClass)
SIDE_EFFECTS: tuple[str, ...] = get_args(SideEffects)

OriginSurface = Literal["browser", "mobile", "desktop", "web", "product-api", "cli"]  # seed 003 §7, and `cli`
DispatchMode = Literal["interactive", "queued", "scheduled", "remote"]
SURFACES: tuple[str, ...] = get_args(OriginSurface)
MODES: tuple[str, ...] = get_args(DispatchMode)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """A count with its noun in the right number, as every line that prints one says it: `1 attempt`,
    `2 attempts`, `0 profiles`, `1,204 tasks` (`plural` where adding an s is wrong: `1 entry`, `2 entries`)."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"
