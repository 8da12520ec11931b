"""agentd's words, free of every dependency: a task's statuses (seed 000 §6) and seed 003 §7's
dispatch context. The CLI offers them as choices before it loads a record (agentd/records builds
its records from them)."""

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

OriginSurface = Literal["browser", "mobile", "desktop", "web", "product-api", "cli"]  # seed 003 §7, and `cli`
DispatchMode = Literal["interactive", "queued", "scheduled", "remote"]
SURFACES: tuple[str, ...] = get_args(OriginSurface)
MODES: tuple[str, ...] = get_args(DispatchMode)
