"""One task's state as every view shows it, read on the full path: `agentd status`, `task list`, `task show`,
the API, the console and the Agent Runtime export all take it from `task_state` (issue 41, issue 52; seed 002,
"Completion and failure semantics"). The rule is agentd/outlook/states.py's, over plain values, which the
CLI's fast paths run too; here the facts are read with the budget's hold, which needs the config."""

from __future__ import annotations

from datetime import datetime

from agentd.clock import format_ts
from agentd.config import Config
from agentd.config.budget import budget_hold, day_start
from agentd.outlook.states import NATIVE, STREAMING_S, StateFacts, TaskState, read_facts, task_state
from agentd.store import Store

__all__ = ["NATIVE", "STREAMING_S", "StateFacts", "TaskState", "state_facts", "task_state"]


def state_facts(store: Store, config: Config, now: datetime, task_ids: list[int]) -> StateFacts:
    """The facts of these tasks, in the caller's read (a snapshot keeps them one state of the database)."""
    return read_facts(store.tx, now, task_ids, budget_held(store, config, now))


def budget_held(store: Store, config: Config, now: datetime) -> dict[int, str]:
    """The tasks the budget holds today, each with why (none when the budget is not capped)."""
    if not config.budget.capped:
        return {}
    hold = budget_hold(config, store.spend_since(day_start(now)), now)
    if hold is None:
        return {}
    why = f"held by the budget until {format_ts(hold.until)}: {hold.reason}"
    return dict.fromkeys(store.budget_held_ids(now, hold), why)
