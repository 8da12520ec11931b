"""`agentd status`'s snapshot, made from what the config says of the agent (`AgentView`: the config's cached
view holds it, agentd/cli/fast/view.py) and one read of the store, without pydantic: the whole config is asked
for only where the budget is capped. The metrics and the dispatcher's status line read the same `Outlook`.

Nothing here is inferred from a service's own word: a service is `live` only while the very
process that wrote its row (pid, start time, host, boot) runs and its row is fresh; otherwise it is
`stale` (running but silent), `down` (that process is gone) or `stopped` (it said so), with how long
ago it was last heard from. The running task comes from its open attempt, and "pending" means
claimable now: tasks waiting for a retry or delayed are counted on their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd import frozen_value
from agentd.clock import format_ts
from agentd.outlook.activity import attempt_activity
from agentd.outlook.backups import last_backup
from agentd.outlook.liveness import limits_report, service_health
from agentd.outlook.states import TaskState, read_facts, task_state
from agentd.process import procs
from agentd.process.advisory import shown_boundary
from agentd.process.privilege import boundary
from agentd.records import (
    TASK_STATUSES,
    BudgetHold,
    LockHolder,
    ProviderReset,
    QueueSummary,
    RunningAttempt,
    Spend,
)
from agentd.store import ArchiveQueue, HeldCall, Pause, Store

if TYPE_CHECKING:
    from agentd.config import Config


@frozen_value
class AgentView:
    """What a snapshot says of the agent's config: its names and paths, its users and limits, whether its
    budget is capped, and the governance and network lines (agentd/outlook/status.py words them)."""

    agent_id: str
    database: str
    state_dir: str
    workspace: str
    run_as: str | None
    sensors_run_as: str | None
    max_pids: int
    max_memory_mb: int
    budget_capped: bool
    governance: list[str]
    network: dict[str, Any]

    @classmethod
    def of(cls, view: Mapping[str, Any]) -> AgentView:
        """From the config's cached view (agentd/cli/fast/view.py `view_of`), which holds each field."""
        return cls(**{field.name: view[field.name] for field in dataclasses.fields(cls)})


@frozen_value
class BudgetOutlook:
    spend: Spend  # today's, since 00:00 UTC
    hold: BudgetHold | None  # what waits for the next UTC day
    waiting: int  # tasks due now that the hold keeps back


@frozen_value
class Outlook:
    """The agent as one read sees it: what `agentd status`, the metrics collector and the dispatcher's
    status line are made from, so they never disagree (one deferred read transaction: one state of
    the database, not a mix of before and after a commit)."""

    now: datetime
    summary: QueueSummary
    budget: BudgetOutlook | None
    pause: Pause | None
    running: list[RunningAttempt]
    services: list[dict[str, Any]]
    oldest_approval_at: datetime | None
    calls: list[HeldCall]  # tool calls held for a person, oldest first (docs/policy.md)
    failed_messages: int
    lock_holder: LockHolder | None
    chain_head: tuple[int, str] | None
    archive: ArchiveQueue | None = None  # sealed folders not yet in [archive]'s bucket (docs/backup-and-archive.md)


def read_outlook(store: Store, config: Config | None, now: datetime) -> Outlook:
    with store.snapshot():
        summary, budget = queue_outlook(store, config, now)
        approvals = store.pending_approvals()
        return Outlook(
            now,
            summary,
            budget,
            store.dispatch_pause(),
            store.running_now(),
            store.service_statuses(),
            approvals[0].requested_at if approvals else None,
            store.pending_calls(),
            store.failed_message_count(),
            store.dispatch_lock_holder(),
            store.chain_head(),
            store.archive_queue(),
        )


def queue_outlook(store: Store, config: Config | None, now: datetime) -> tuple[QueueSummary, BudgetOutlook | None]:
    """The queue as the claim sees it, one read for `agentd status` and the metrics: each waiting
    task counted once, under the reason it waits, the budget's hold included."""
    if config is None or not config.budget.capped:
        return store.queue_summary(now), None
    from agentd.config.budget import budget_hold, day_start  # the whole config's: a capped budget

    spend = store.spend_since(day_start(now))
    hold = budget_hold(config, spend, now)
    summary = store.queue_summary(now, hold)
    return summary, BudgetOutlook(spend, hold, summary.budget)


@frozen_value
class IdleOutlook:
    """What an idle dispatcher shows and sleeps on, in one read: the operator's pause, the tasks
    claimable now and when the next task or schedule falls due."""

    pause: Pause | None
    waiting: int
    upcoming: datetime | None


def idle_outlook(store: Store, now: datetime) -> IdleOutlook:
    with store.snapshot():
        return IdleOutlook(store.dispatch_pause(), *store.idle_outlook(now))


def running_states(store: Store, config: Config | None, now: datetime, task_ids: list[int]) -> dict[int, TaskState]:
    """The running tasks' states (lost, cancelling, preparing, streaming or running), in the caller's read;
    `config` where the budget is capped (its hold is a task's state too)."""
    if not task_ids:
        return {}
    held: dict[int, str] = {}
    if config is not None:
        from agentd.outlook.taskstate import budget_held

        held = budget_held(store, config, now)
    facts = read_facts(store.tx, now, task_ids, held)
    attempts = store.attempts_by_task(task_ids)
    return {t: task_state(store.get_task_or_raise(t), attempts[t], facts) for t in task_ids}


VIOLATIONS_SHOWN_FOR = timedelta(days=1)  # status names the attempts ended as a policy violation this long


def agent_snapshot(agent: AgentView, store: Store, now: datetime, whole: Callable[[], Config]) -> dict[str, Any]:
    """`agentd status --json`'s body, from what the config says of the agent and one read of the store;
    `whole` gives the whole config, asked only where the budget is capped (its report and hold)."""
    config = whole() if agent.budget_capped else None
    with store.snapshot():  # the running attempts' activity and states from the same read as the rest
        seen = read_outlook(store, config, now)
        activity = {r.attempt_id: attempt_activity(store, r.task_id, r.attempt_id) for r in seen.running}
        states = running_states(store, config, now, [r.task_id for r in seen.running])
        violations = store.recent_violations(now - VIOLATIONS_SHOWN_FOR)
        resets = store.resting_credentials(now)
    summary, pause, holder = seen.summary, seen.pause, seen.lock_holder
    here = procs.this_process()
    services = [service_health(row, now, here) for row in seen.services]
    return {
        "agent_id": agent.agent_id,
        "database": agent.database,
        "state_dir": agent.state_dir,
        "workspace": agent.workspace,
        "schema_version": summary.schema_version,
        "counts": {status: summary.counts.get(status, 0) for status in TASK_STATUSES},
        "waiting": {
            "claimable": summary.claimable,
            "retry_waiting": summary.retry_waiting,
            "delayed": summary.delayed,
            "approval": summary.approval,
            "paused": summary.paused,
            "after": summary.after,
            "budget": summary.budget,
            "resting": summary.resting,
        },
        "budget": _budget_report(config, seen.budget),
        "messages": {"failed": seen.failed_messages},
        "oldest_approval_age_s": (now - seen.oldest_approval_at).total_seconds() if seen.oldest_approval_at else None,
        "held_calls": [held_call_view(call, now) for call in seen.calls],
        "policy_violations": [violation_view(*violated, now) for violated in violations],
        "provider_resets": [reset_view(reset, now) for reset in resets],
        "paused": {"since": format_ts(pause.paused_at), "by": pause.paused_by, "reason": pause.reason}
        if pause
        else None,
        "oldest_pending_age_s": (now - summary.oldest_pending_at).total_seconds()
        if summary.oldest_pending_at
        else None,
        "next_available_at": format_ts(summary.next_available_at) if summary.next_available_at else None,
        "archive": archive_view(seen.archive, now),
        "running": [
            {
                "task_id": r.task_id,
                "task_type": r.task_type,
                "attempt_id": r.attempt_id,
                "adapter_id": r.adapter_id,
                "model": r.model,
                "started_at": format_ts(r.started_at),
                "elapsed_s": round((now - r.started_at).total_seconds(), 1),
                "activity": activity[r.attempt_id],  # docs/live.md
                "waiting_for": next((c.summary for c in seen.calls if c.attempt_id == r.attempt_id), None),
                "state": states[r.task_id].as_json(),  # agentd/outlook/taskstate.py
                "lost": states[r.task_id].reason if states[r.task_id].status == "lost" else None,
            }
            for r in seen.running
        ],
        "services": services,
        "boundary": shown_boundary(
            boundary(agent.run_as, agent.sensors_run_as, Path(agent.state_dir)), store.boundary_waiver(), seen.services
        ),
        "limits": limits_report(agent.max_pids, agent.max_memory_mb, services),
        "governance": agent.governance,
        "network": agent.network,
        "dispatch_lock": {"pid": holder.pid, "host": holder.host, "heartbeat_at": format_ts(holder.heartbeat_at)}
        if holder
        else None,
        "backup": last_backup(Path(agent.state_dir), now),  # docs/backup-and-archive.md
    }


def violation_view(
    task_id: int, attempt_id: str, ended_at: datetime, error: str | None, now: datetime
) -> dict[str, Any]:
    """An attempt ended as a policy violation, as status and its JSON show it (docs/policy.md)."""
    age_s = round((now - ended_at).total_seconds(), 1)
    return {
        "task_id": task_id,
        "attempt_id": attempt_id,
        "ended_at": format_ts(ended_at),
        "age_s": age_s,
        "error": error,
    }


def reset_view(reset: ProviderReset, now: datetime) -> dict[str, Any]:
    """A credential waiting for its provider's reset, as status and its JSON show it (docs/gateway.md)."""
    return {
        "adapters": list(reset.group.adapters),
        "until": format_ts(reset.until),
        "in_s": round((reset.until - now).total_seconds(), 1),
        "reason": reset.reason,
    }


def held_call_view(call: HeldCall, now: datetime) -> dict[str, Any]:
    """A tool call held for a person as status, its JSON, the API and the console show it (docs/policy.md)."""
    return {
        "call_id": call.call_id,
        "task_id": call.task_id,
        "attempt_id": call.attempt_id,
        "task_type": call.task_type,
        "tool": call.tool,
        "summary": call.summary,
        "input_json": call.input_json,  # whole: what runs if it is allowed (docs/policy.md, "Asking a person")
        "input_chars": call.input_chars,
        "input_sha256": call.input_sha256,
        "rule": call.rule,
        "requested_at": format_ts(call.requested_at),
        "age_s": round((now - call.requested_at).total_seconds(), 1),
    }


def _budget_report(config: Config | None, outlook: BudgetOutlook | None) -> dict[str, Any] | None:
    return None if config is None else budget_report(config, outlook)


def budget_report(config: Config, outlook: BudgetOutlook | None) -> dict[str, Any] | None:
    """[budget] as `agentd status` shows it. `estimated`: some of the total was priced by agentd
    from an adapter's prices (codex reports tokens, not cost), not reported by the harness."""
    if outlook is None:
        return None
    budget, spend = config.budget, outlook.spend
    return {
        "day_start": format_ts(spend.since),
        "spent_usd": round(spend.total_usd, 6),
        "estimated": spend.estimated,
        "daily_usd": budget.daily_usd,
        "per_attempt_usd": budget.per_attempt_usd,
        "adapters": {
            adapter_id: {
                "spent_usd": round(spend.by_adapter[adapter_id].total_usd, 6)
                if adapter_id in spend.by_adapter
                else 0.0,
                "estimated": adapter_id in spend.by_adapter and spend.by_adapter[adapter_id].estimated,
                "daily_usd": budget.adapter_daily_usd.get(adapter_id),
            }
            for adapter_id in sorted(set(spend.by_adapter) | set(budget.adapter_daily_usd))
        },
        "urgent_priority": budget.urgent_priority,
        "holding": None
        if outlook.hold is None
        else {"reason": outlook.hold.reason, "until": format_ts(outlook.hold.until), "waiting": outlook.waiting},
    }


def archive_view(queue: ArchiveQueue | None, now: datetime) -> dict[str, Any] | None:
    """The archive's queue as `agentd status` shows it: None while archiving is off and nothing waits."""
    if queue is None or not (queue.enabled or queue.length):
        return None
    oldest = queue.oldest
    return {
        "enabled": queue.enabled,
        "queued": queue.length,
        "oldest_age_s": (now - oldest).total_seconds() if oldest else None,
    }
