"""The dispatcher (docs/design.md, "Dispatch"): one runner per agent.

Start: lock → boot sweep → pending outbox → schedules → READY. Each tick, in the seed's order: due
schedules → workflow steps → claim one task and run it (agentd/attempt/run.py) → its outbox. Idle: sleep
until the next task or schedule is due, a poke, or the poll ceiling. SIGTERM: stop claiming, give
the running attempt the grace period, then stop it and record it interrupted.
"""

from __future__ import annotations

import logging
import os
import random
import signal
from collections.abc import Callable
from datetime import datetime

import anyio

from agentd import frozen_value
from agentd.adapters import Adapter, adapter_for
from agentd.attempt.prepare import plan_attempt
from agentd.attempt.run import AttemptRunner, running_line
from agentd.attempt.sweep import boot_sweep
from agentd.clock import Clock, age
from agentd.config import Config
from agentd.control.outbox import OutboxApplier
from agentd.errors import DatabaseGone, contained
from agentd.evidence.rollback import refuse_if_behind
from agentd.outlook.metrics import DispatchMetrics, NullMetrics
from agentd.outlook.telemetry import TelemetryLoop
from agentd.process.containment import prime, release_namespace
from agentd.process.limits import own_line
from agentd.process.privilege import run_user
from agentd.process.wake import Doorbell
from agentd.records import AdapterConfig, AttemptPlan, Claim, DueSchedule, TaskRecord, WorkflowRecord
from agentd.services.dispatch_view import DispatchView
from agentd.services.fleet import FleetLink
from agentd.services.lock import DispatchLock
from agentd.services.shell import Notifier, Shell
from agentd.store import AsyncStore, Follow, Store
from agentd.work.intents import schedule_runs, schedule_spec, step_decisions

logger = logging.getLogger(__name__)
NO_FLEET = "this agent no longer has a fleet ([fleet] dsn_file is not set): its lease cannot be renewed"


class Dispatcher:
    def __init__(
        self,
        config: Config,
        db: AsyncStore,
        *,
        clock: Clock,
        rng: random.Random | None = None,
        notifier: Notifier | None = None,
        metrics: DispatchMetrics | NullMetrics | None = None,
        adapters: Callable[[AdapterConfig], Adapter] = adapter_for,
        until_idle: bool = False,
    ) -> None:
        self.config, self.db, self.clock, self.until_idle = config, db, clock, until_idle
        self.rng = rng or random.Random()
        self.metrics = metrics or NullMetrics()
        listen, state_dir = config.metrics.dispatch_listen, config.paths.state_dir
        self.shell = Shell("dispatch", db, clock, self.metrics, listen, notifier, state_dir)
        self.doorbell = Doorbell()
        self.lock = DispatchLock(config, db, clock, self.metrics)
        self.user = run_user(config.dispatch.run_as)  # who attempts run as (docs/install-and-deploy.md, "The boundary")
        self.attempts = AttemptRunner(config, db, clock, self.rng, self.metrics, self.doorbell, adapters, self.user)
        self.outbox = OutboxApplier(config, db, clock, self.metrics)
        self.fleet = FleetLink.of(config, db, clock, self.metrics, self.doorbell)  # docs/fleet.md
        self.view = DispatchView(config, db, clock, self.shell, self.doorbell)  # what it says of itself
        self.telemetry = TelemetryLoop.of(config, db, clock)  # [telemetry]: spans for a collector (docs/telemetry.md)
        self._stopping = False
        self.began = anyio.Event()  # its start ended, the lock taken or not: `agentd run`'s other services wait for it
        self.holds_lock = False

    @property
    def holder_id(self) -> str:
        return self.lock.holder_id

    async def run(self) -> None:
        """Until SIGTERM/SIGINT (or, until_idle, until nothing is claimable now)."""
        try:
            await self.start()
            self.holds_lock = True
        finally:
            self.began.set()
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self.lock.keep)
                await group.start(self.doorbell.listen, self.config.paths.state_dir)
                await self.shell.serve(group, self.status_line)
                group.start_soon(self.outbox.deliveries.run)  # external messages, beside the claims
                if self.fleet is not None:
                    group.start_soon(self.fleet.run)  # the fleet's work into this queue, results back
                if self.telemetry is not None:
                    group.start_soon(self.telemetry.run)  # beside the claims: a slow collector never holds them
                await self._loop()
                group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.stop()

    async def start(self) -> None:
        """Refuse a database older than what happened (agentd/evidence/rollback.py: nothing is written then), take
        the lock, sweep what a dead dispatcher left running, finish its outbox, and make the config's
        schedules the database's."""
        await self.db.call(refuse_if_behind, self.config.paths.state_dir)
        await self.lock.take()
        logger.info("limits: %s", own_line(self.config.dispatch.max_pids, self.config.dispatch.max_memory_mb))
        last = await self.db.call(Store.last_successful_attempt_at)
        if last is not None:
            self.metrics.last_success(last.timestamp())
        await boot_sweep(self.config, self.db, self.user, self.attempts, self.metrics)
        if self.fleet is None:  # leases an earlier [fleet] left: no one renews or confirms them now
            await self.db.call(Store.drop_fleet_leases, NO_FLEET, self.clock.now())
        await self.outbox.apply_pending()
        specs = [schedule_spec(s) for s in self.config.schedules]
        await self.db.call(Store.upsert_config_schedules, specs, self.clock.now())
        payload = {"pid": self.lock.identity.pid, "holder": self.holder_id}
        await self.db.call(Store.record_event, "dispatch_started", self.clock.now(), payload)

    async def stop(self) -> None:
        try:
            await self.db.call(
                Store.record_event, "dispatch_stopped", self.clock.now(), {"pid": self.lock.identity.pid}
            )
            await self.shell.stopped()
            await self.lock.release()
        except DatabaseGone:
            self.shell.close()  # nothing can be recorded; the error that stopped the service says why
        finally:
            if self.fleet is not None:
                self.fleet.close()
            release_namespace(self.config.paths.state_dir)

    async def status_line(self) -> str:
        """What the dispatcher is doing, in one line: systemd's STATUS=, `agentd status`, the logs; and, while
        its last check of the tool-call hook failed, why attempts that need the hook do not start."""
        line = await self.view.line(self.attempts.describe(), self._stopping)
        refused = self.attempts.preparer.hooks.failed
        return f"{line}; REFUSING attempts whose tool calls are judged: {refused}" if refused else line

    def request_stop(self, *, immediately: bool = False) -> None:
        """Stop claiming; the running attempt gets the grace period (none if immediately)."""
        self._stopping = True
        self.doorbell.ring()
        running = self.attempts.describe()
        grace = 0.0 if immediately else self.config.dispatch.grace_s
        if running is None:
            line = "stopping"
        elif immediately:
            line = f"stopping at once: ending {running}"
        else:
            line = (
                f"stopping: waiting up to {age(grace)} for {running} to finish "
                "(then it is stopped and recorded interrupted); a second SIGTERM or Ctrl-C stops it at once"
            )
        logger.info(line)
        self.shell.stopping(line)
        self.attempts.stop("interrupted", grace)

    async def _loop(self) -> None:
        """Tick until stopped. A tick that fails is logged and retried after a pause that doubles up
        to the poll ceiling (never a hot loop); only an unusable disk ends the service."""
        pause, claimed = 1.0, None
        while not self._stopping or claimed is not None:  # a task already claimed runs (its grace)
            with contained(logger, "dispatch_tick_failed: retrying in %.0fs", pause) as failed:
                ticked = await self.tick(self.clock.now(), claimed)
            claimed = None if failed.error else ticked.next
            if failed.error:
                await self.doorbell.wait(pause)
                pause = min(pause * 2, self.config.dispatch.poll_ceiling_s)
                continue
            pause = 1.0
            if not ticked:
                if self.until_idle:
                    return
                await self.view.sleep_until_due(self._stopping)

    async def tick(self, now: datetime, claimed: Claim | None = None) -> Ticked:
        """One pass in the seed's order; truthy if an attempt ran (or a claim was refused), with the task
        its outcome commit claimed, which the next tick is given. What the schedules and workflows need is
        one read; so is whether the outbox holds an entry to apply (one an operator's approval let go, say:
        an attempt's own are applied as it ends). `claimed`, a task the last outcome commit claimed, runs
        first: that commit found nothing else due."""
        if claimed is not None:
            return await self._run_claimed(claimed)
        prime()  # an attempt may start in a few ms: its cgroup move's kernel lock, warmed meanwhile
        due, waiting, outbox = await self.db.read(Store.tick_intents, now)
        if outbox:
            await self.outbox.apply_pending()
            due, waiting, _ = await self.db.read(Store.tick_intents, now)  # after what it changed
        await self.run_due_schedules(now, due)
        await self.advance_workflows(now, waiting)
        return await self.claim_and_run(now)

    async def run_until_idle(self) -> int:
        """Tick until nothing is claimable at the clock's now, or until asked to stop; return how many
        tasks were claimed."""
        count, claimed = 0, None
        while not self._stopping or claimed is not None:
            ticked = await self.tick(self.clock.now(), claimed)
            if not ticked:
                break
            count, claimed = count + 1, ticked.next
        return count

    async def run_due_schedules(self, now: datetime, due: list[DueSchedule] | None = None) -> None:
        """Each due schedule enqueues one task, unless its previous task is still open."""
        if due is None:
            due = await self.db.call(Store.due_schedules, now)
        if due:
            for schedule_id in await self.db.call(
                Store.record_schedule_runs, schedule_runs(due, self.config, now), now
            ):
                self.metrics.schedule_created(schedule_id)

    async def advance_workflows(self, now: datetime, waiting: list[WorkflowRecord] | None = None) -> None:
        """Every active workflow whose current state has no task for this entry gets exactly one."""
        if waiting is None:
            waiting = await self.db.call(Store.workflows_awaiting_step)
        if waiting:
            await self.db.call(Store.create_step_tasks, step_decisions(waiting, self.config, now), now)

    async def claim_and_run(self, now: datetime) -> Ticked:
        evidence = self.config.paths.state_dir / "attempts"
        budget = await self.view.budget(now)
        hold = budget.hold if budget else None
        claim = await self.db.call(Store.claim_next_task, now, self.holder_id, self._plan, evidence, hold)
        if claim is None:
            if not await self.view.nothing_claimed(now, budget):  # not paused
                await self.outbox.apply_pending()  # e.g. side effects an operator just approved
            await self._publish()
            return Ticked(False)
        return await self._run_claimed(claim)

    async def _run_claimed(self, claim: Claim) -> Ticked:
        """Run the claimed task's attempt to its outcome commit. When the next task is claimable at
        once, that commit claims it too (one durable transaction at the attempt boundary) and the
        next tick starts from it."""
        self.view.ran()
        if claim.attempt is None:  # refused at the claim: its outbox, if any, is the next tick's
            return Ticked(True)
        self._crash_point("after_claim")
        ended = await self.attempts.run(claim, stopping=self._stopping, on_running=self._publish, follow=self._follow())
        self._crash_point("after_outcome_commit")
        if self.fleet is not None:
            self.fleet.wake.ring()  # a fleet task's result goes back now, and its lease is confirmed again
        if (followed := ended.next) is not None:
            line = None
            if followed.claim.attempt is not None:  # the row says it runs: written in that same commit
                self.view.published(f"running task {followed.claim.task.task_id}")
                line = claimed_line(followed.claim)
            self.shell.reported(followed.head, line)  # that commit's head: published off this path
            return Ticked(True, followed.claim)
        await self._publish()
        if ended.end.outbox:
            await self.outbox.apply_pending()
        return Ticked(True)

    def _follow(self) -> Follow | None:
        """What the outcome commit needs to claim the next task with it; None while stopping or when the
        budget is capped (the next claim then needs the spend this attempt adds, read afresh)."""
        if self._stopping or self.config.budget.capped:
            return None
        evidence = self.config.paths.state_dir / "attempts"
        return Follow(self.holder_id, self._plan, evidence, self._running_row)

    def _running_row(self, store: Store, claim: Claim) -> tuple[int, str] | None:
        return self.shell.row(claimed_line(claim))(store)

    async def _publish(self) -> None:
        await self.view.publish(self.view.state(self.attempts.running_task, self._stopping), self.status_line)

    def _plan(self, task: TaskRecord) -> AttemptPlan:
        return plan_attempt(self.config, task)  # pure: config lookups only (it runs inside the claim)

    def _crash_point(self, name: str) -> None:
        if self.config.chaos.crash_at == name:
            logger.warning("chaos: crashing at %s", name)
            os.kill(os.getpid(), signal.SIGKILL)


@frozen_value
class Ticked:
    """What a tick did: whether an attempt ran (or a claim was refused), and the task its outcome commit
    claimed in the same transaction, for the next tick to run."""

    worked: bool
    next: Claim | None = None

    def __bool__(self) -> bool:
        return self.worked


def claimed_line(claim: Claim) -> str:
    """The status line of a task claimed this instant."""
    attempt = claim.attempt
    assert attempt is not None
    return running_line(claim.task.task_id, attempt.adapter_id, attempt.model, 0.0)
