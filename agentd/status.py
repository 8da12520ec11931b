"""The agent's status as an operator reads it (`agentd status`): the queue, each service's own
line, the dispatch lock. A service line nobody refreshed lately is reported stale, never live."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentd.clock import format_ts, parse_ts
from agentd.config import Config
from agentd.records import TASK_STATUSES
from agentd.store import Store

STALE_STATUS_S = 30.0  # services refresh their status line every 5 s


def snapshot(config: Config, store: Store, now: datetime) -> dict[str, Any]:
    summary = store.queue_summary(now)
    holder = store.dispatch_lock_holder()
    return {
        "agent_id": config.agent.agent_id,
        "database": str(config.db_path),
        "state_dir": str(config.paths.state_dir),
        "workspace": str(config.paths.workspace),
        "schema_version": summary.schema_version,
        "counts": {status: summary.counts.get(status, 0) for status in TASK_STATUSES},
        "oldest_pending_age_s": (now - summary.oldest_pending_at).total_seconds()
        if summary.oldest_pending_at
        else None,
        "next_available_at": format_ts(summary.next_available_at) if summary.next_available_at else None,
        "services": [service_health(row, now) for row in store.service_statuses()],
        "dispatch_lock": {"pid": holder.pid, "host": holder.host, "heartbeat_at": format_ts(holder.heartbeat_at)}
        if holder
        else None,
    }


def service_health(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    quiet = (now - parse_ts(row["updated_at"])).total_seconds()
    return {**row, "stale": row["status"] != "stopped" and quiet > STALE_STATUS_S, "updated_ago_s": round(quiet, 1)}
