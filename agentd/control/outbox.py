"""Applying the outbox (docs/design.md, "Outcomes, gating and the outbox"): every side effect an outcome asked for,
exactly once, after the outcome commit. A crash re-applies on restart, never doubles: each entry is settled in the same
transaction as its effect. An entry that fails inside agentd is settled refused with the reason;
the rest go on."""

from __future__ import annotations

import logging
from datetime import datetime

from agentd.clock import Clock
from agentd.config import Config
from agentd.control.delivery import Deliveries
from agentd.errors import contained
from agentd.outlook.metrics import DispatchMetrics, NullMetrics
from agentd.records import OutboxEntry, StepResult
from agentd.store import AsyncStore, Store
from agentd.work.intents import follow_up
from agentd.work.workflows import next_move, state_cap

logger = logging.getLogger(__name__)


class OutboxApplier:
    def __init__(self, config: Config, db: AsyncStore, clock: Clock, metrics: DispatchMetrics | NullMetrics) -> None:
        self.config, self.db, self.clock, self.metrics = config, db, clock, metrics
        self.deliveries = Deliveries(config, db, clock, metrics)  # its loop runs beside dispatch

    async def apply_pending(self) -> None:
        for entry in await self.db.call(Store.pending_outbox):
            with contained(logger, "outbox entry %s could not be applied", entry.idempotency_key) as failed:
                await self.apply(entry, self.clock.now())
            if (exc := failed.error) is not None:
                reason = f"internal_error: {type(exc).__name__}: {exc}"[:500]
                await self.db.call(Store.settle_outbox, entry, "refused", {"reason": reason}, self.clock.now())

    async def apply(self, entry: OutboxEntry, now: datetime) -> None:
        if entry.kind == "follow_up_task":
            parent = await self.db.read(Store.get_task, entry.task_id) if entry.task_id is not None else None
            new, refusal = follow_up(entry, self.config, now, parent)
            limit = self.config.dispatch.max_descendants
            await self.db.call(Store.apply_follow_up, entry, new, refusal, now, limit)
        elif entry.kind == "workflow_signal":
            await self.apply_workflow_signal(entry, now)
        elif entry.kind == "constitution_proposal":  # recorded for the operator; only they apply it
            await self.db.call(Store.record_constitution_proposal, entry, now)
        else:  # an external message: to its handler, which the delivery loop sends it through
            await self.deliveries.hand_over(entry, now)

    async def apply_workflow_signal(self, entry: OutboxEntry, now: datetime) -> None:
        """A step task ended: move its workflow on, complete it, or block it (never loop)."""
        found = await self.db.call(Store.workflow_for_signal, entry)
        if found is None:
            return  # applied already (a re-run after a crash)
        workflow, entries = found
        step = StepResult(
            int(entry.payload["workflow_id"]),
            entry.payload["state_id"],
            int(entry.payload["iteration"]),
            entry.payload.get("signal"),
            entry.payload["task_status"],
            entry.task_id or 0,
        )
        definition = self.config.workflows.get(workflow.workflow_type)
        cap = state_cap(definition, self.config.dispatch.workflow_state_cap)
        change = await self.db.call(
            Store.apply_workflow_change, entry, workflow, next_move(definition, workflow, step, entries, cap), now
        )
        if change is not None and change.kind != "ignore":
            self.metrics.workflow_moved(workflow.workflow_type, change.kind)
