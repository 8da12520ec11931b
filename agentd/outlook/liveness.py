"""Whether a service is live, as its row in service_status says and the OS confirms: one judgement for
`agentd status` (both paths), the console and agentd_service_live. Plain (no records), so the CLI's
fast path can use it too (docs/decisions.md, "Start-up")."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from agentd.clock import format_ts, stored_ts
from agentd.process import limits, procs

STALE_STATUS_S = 30.0  # services refresh their row every 5 s
Liveness = Literal["live", "stale", "down", "stopped", "unknown"]


def service_health(row: dict[str, Any], now: datetime, here: procs.ProcessIdentity) -> dict[str, Any]:
    """The row, with `liveness` and how long ago it was last updated."""
    quiet = (now - stored_ts(row["updated_at"])).total_seconds()
    return {**row, "liveness": liveness(row, quiet, here), "updated_ago_s": round(quiet, 1)}


def liveness(row: dict[str, Any], quiet_s: float, here: procs.ProcessIdentity) -> Liveness:
    if row["status"] == "stopped":
        return "stopped"
    owner = procs.ProcessIdentity(
        row["pid"], row.get("pid_started") or 0, row.get("host") or "", row.get("boot_id") or ""
    )
    running = procs.is_running(owner, here) if row.get("pid_started") is not None else None
    if running is False:
        return "down"
    if quiet_s > STALE_STATUS_S:
        return "stale"
    return "live" if running else "unknown"  # another host, or a row from before agentd recorded who wrote it


def limits_report(max_pids: int, max_memory_mb: int, services: list[dict[str, Any]]) -> dict[str, Any]:
    """Each attempt's limits ([dispatch] max_pids, max_memory_mb) and whether the live dispatcher can hold
    them (agentd/process/limits.py), for `agentd status` (both paths) and the console."""
    asked = limits.Limits.of(max_pids, max_memory_mb)
    dispatcher = next((s for s in services if s["service"] == "dispatch" and s["liveness"] == "live"), None)
    where = limits.held(int(dispatcher["pid"]), asked.wanted()) if asked and dispatcher else None
    return {
        "max_pids": max_pids,
        "max_memory_mb": max_memory_mb,
        "held": where,
        "line": limits.describe(asked, where),
    }


def lost_reason(services: list[dict[str, Any]]) -> str | None:
    """Why a task running now is lost, or None: its attempt is open, but no live dispatcher runs it. One
    rule and one sentence for every view (`agentd status`, the API, the console, the Agent Runtime export):
    a dispatcher not `live` cannot be shown to be running anything (seed 002: "lost: runtime cannot prove
    whether the worker is still alive"). Starting the dispatcher reclaims it (the boot sweep)."""
    dispatcher = next((s for s in services if s["service"] == "dispatch"), None)
    if dispatcher is None:
        return "no dispatcher has reported to this database"
    if dispatcher["liveness"] == "live":
        return None
    since = format_ts(stored_ts(dispatcher["updated_at"]))
    return f"its dispatcher is {str(dispatcher['liveness']).upper()} since {since}"
