"""The dispatch lock (docs/design.md, "Dispatch", §12): one dispatcher per agent.

A holder is stale only if its heartbeat is older than lock_stale_s, or its pid on this host and
boot is not running (or is another process that reused the pid): PID alone hung an ancestor
forever after reuse, age alone expired under a long attempt. Staleness is judged before the
transaction (it reads /proc); the store clears only the holder that was judged.
"""

from __future__ import annotations

import logging

import anyio

from agentd.clock import Clock
from agentd.config import Config
from agentd.errors import AgentdError, DispatchLocked
from agentd.hashing import new_ulid
from agentd.outlook.metrics import DispatchMetrics, NullMetrics
from agentd.process import procs
from agentd.records import LockHolder
from agentd.store import AsyncStore, Store

logger = logging.getLogger(__name__)


class LockLost(AgentdError):
    """Another dispatcher cleared our lock as stale: stop at once, commit nothing more."""


class DispatchLock:
    def __init__(self, config: Config, db: AsyncStore, clock: Clock, metrics: DispatchMetrics | NullMetrics) -> None:
        self.config, self.db, self.clock, self.metrics = config, db, clock, metrics
        self.identity = procs.this_process()
        self.holder_id = new_ulid(clock)

    async def take(self) -> None:
        """Take the lock, clearing a stale holder; DispatchLocked naming a live one."""
        now = self.clock.now()
        me = LockHolder(
            self.holder_id,
            self.identity.pid,
            self.identity.started,
            self.identity.host,
            self.identity.boot_id,
            now,
            now,
        )
        holder = await self.db.call(Store.dispatch_lock_holder)
        reason = self.staleness(holder) if holder is not None else None
        result = await self.db.call(Store.acquire_dispatch_lock, me, now, holder if reason else None, reason)
        if not result.acquired:
            beat_age = (now - result.holder.heartbeat_at).total_seconds()
            raise DispatchLocked(
                f"dispatch_locked: another dispatcher holds the lock (pid {result.holder.pid} on {result.holder.host}, "
                f"heartbeat {beat_age:.0f}s ago); only one runs per agent"
            )
        if result.cleared is not None:
            logger.warning(
                "dispatch_lock_stale_cleared pid=%s host=%s reason=%s", result.cleared.pid, result.cleared.host, reason
            )
        self.metrics.lock_held(True)

    def staleness(self, holder: LockHolder) -> str | None:
        """Why a lock is stale, or None if its holder may be alive: both age and identity count."""
        beat_age = (self.clock.now() - holder.heartbeat_at).total_seconds()
        if beat_age > self.config.dispatch.lock_stale_s:
            return f"heartbeat {beat_age:.0f}s old (stale after {self.config.dispatch.lock_stale_s:g}s)"
        holder_process = procs.ProcessIdentity(holder.pid, holder.pid_started, holder.host, holder.boot_id)
        if procs.is_running(holder_process, self.identity) is False:
            return f"holder pid {holder.pid} is not running on this host"
        return None

    async def keep(self) -> None:
        """Heartbeat from a task of its own (a long attempt never ages the lock out)."""
        while True:
            await anyio.sleep(self.config.dispatch.lock_heartbeat_s)
            if not await self.db.call(Store.heartbeat_dispatch_lock, self.holder_id, self.clock.now()):
                raise LockLost("the dispatch lock was cleared by another dispatcher; stopping without committing")

    async def release(self) -> None:
        await self.db.call(Store.release_dispatch_lock, self.holder_id)
        self.metrics.lock_held(False)
