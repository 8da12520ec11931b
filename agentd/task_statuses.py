"""A task's status words (seed 000 §6), free of every dependency: the CLI offers them as choices
before it loads a record (agentd/records re-exports them)."""

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
