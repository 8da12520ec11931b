"""One attempt, from its claim to its outcome commit: prepare → execute → conclude → commit.

Whatever goes wrong inside agentd becomes the attempt's recorded internal_error and the service
goes on; only storage it cannot use (StorageError) ends it. The commit itself is a boundary too:
an outcome SQLite refuses is recorded as internal_error naming why, so a task never stays running.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

import anyio

from agentd import frozen_value
from agentd.adapters import Adapter, AdapterRun, adapter_for
from agentd.attempt import live
from agentd.attempt.calls import CallGate
from agentd.attempt.conclude import conclude, internal_failure_end
from agentd.attempt.meter import Meter, attempt_cap, meter_for
from agentd.attempt.model_calls import ModelCalls
from agentd.attempt.policy import Ending, attempt_policy
from agentd.attempt.prepare import AttemptPreparer, Prepared, adapter_redactor
from agentd.attempt.served import ServedAttempt
from agentd.clock import Clock, age
from agentd.config import Config
from agentd.config.budget import day_start, price_of
from agentd.errors import contained
from agentd.outlook.metrics import DispatchMetrics, NullMetrics
from agentd.process.privilege import RunUser
from agentd.process.wake import Doorbell
from agentd.records import AdapterConfig, AttemptEnd, Claim, TaskAttempt, TaskRecord
from agentd.store import AsyncStore, Ended, Follow, Store

if TYPE_CHECKING:
    from agentd.gateway.server import Gateway

logger = logging.getLogger(__name__)

CANCEL_POLL_S = 1.0  # a running task's cancel flag is checked at least this often


class AttemptControl:
    """How a running attempt is stopped from outside: a signal, or an operator's cancel."""

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.reason: str | None = None
        self.started = False  # the adapter began: side effects may have happened from here on

    def stop(self, reason: str, after_s: float = 0.0) -> None:
        self.reason = self.reason or reason
        self.scope.deadline = min(self.scope.deadline, anyio.current_time() + after_s)

    @property
    def stopped(self) -> str | None:
        return self.reason if self.scope.cancelled_caught else None


def metered(run: AdapterRun, meter: Meter | None) -> AdapterRun:
    """The run as its meter saw it end: what it had spent, when the meter stopped it, in its diagnostics, and
    the meter's figure as its usage when the harness was killed before it reported its own."""
    if meter is None or meter.stopped is None:
        return run
    usage = run.usage if run.usage.cost_usd is not None else meter.spent()
    return replace(run, usage=usage, diagnostics={**run.diagnostics, "budget_stop": meter.stopped})


def judged_calls(run: AdapterRun, gate: CallGate | None) -> AdapterRun:
    """The run with every tool-call decision its gate made, for the diagnostics and the action trace, and what
    its ledger found: calls that ran without a decision end it `policy_violation` (agentd/attempt/judge.py)."""
    if gate is None:
        return run
    found = {**({"tool_calls": list(gate.decided)} if gate.decided else {}), **gate.findings()}
    return replace(run, diagnostics={**run.diagnostics, **found}) if found else run


def through_gateway(run: AdapterRun, served: ServedAttempt | None) -> AdapterRun:
    """The run as the gateway saw it (docs/gateway.md): the usage the providers' answers reported is the attempt's,
    the harness's own report kept beside it (never trusted over it); a provider's 429 makes it rate-limited."""
    if served is None:
        return run
    calls = served.calls
    harness = {k: v for k, v in asdict(run.usage).items() if v not in (None, False)}
    diagnostics = {**run.diagnostics, **served.findings(), **({"harness_usage": harness} if harness else {})}
    return replace(
        run, usage=calls.usage(), rate_limited=run.rate_limited or calls.rate_limit is not None, diagnostics=diagnostics
    )


@frozen_value
class Running:
    """One attempt as it runs, the one value `AttemptRunner`'s steps take (docs/decisions.md, "One value
    per running attempt (issue 53)"): its task and attempt; how it is stopped (`control`; None for one found
    outside a run: the boot sweep's); what preparing it made (`prepared`, None until then); the claim its
    outcome commit may make after it (`follow`); and since when it runs (`anyio.current_time()`)."""

    task: TaskRecord
    attempt: TaskAttempt
    control: AttemptControl | None = None
    prepared: Prepared | None = None
    follow: Follow | None = None
    since: float = 0.0

    @property
    def started(self) -> bool:
        """The adapter began: side effects may have happened from here on."""
        return bool(self.control and self.control.started)


def running_line(task_id: int, adapter: str, model: str | None, seconds: float) -> str:
    return f"running task {task_id} ({adapter}, {model or 'no model'}) {age(seconds)}"


class AttemptRunner:
    def __init__(
        self,
        config: Config,
        db: AsyncStore,
        clock: Clock,
        rng: random.Random,
        metrics: DispatchMetrics | NullMetrics,
        doorbell: Doorbell,
        adapters: Callable[[AdapterConfig], Adapter] = adapter_for,
        user: RunUser | None = None,
    ) -> None:
        self.config, self.db, self.clock, self.rng, self.metrics = config, db, clock, rng, metrics
        self.doorbell = doorbell
        self.preparer = AttemptPreparer(config, db, clock, adapters, user)
        self.running: Running | None = None  # the attempt this runner has claimed and not yet recorded
        self.gate: CallGate | None = None  # the running attempt's, while it runs
        self.gateway: Gateway | None = (
            None  # the model gateway, made for the first attempt that uses it (docs/gateway.md)
        )

    @property
    def busy(self) -> bool:
        return self.running is not None

    @property
    def running_task(self) -> int | None:
        """The task whose attempt this runner has claimed and not yet recorded, if any."""
        return self.running.task.task_id if self.running else None

    def describe(self) -> str | None:
        """`running task 812 (claude-code, sonnet) 3m12s`, or None when idle; `…; waiting for a decision on
        Bash: git push … (40s)` while a tool call waits for a person."""
        running = self.running
        if running is None:
            return None
        attempt, seconds = running.attempt, anyio.current_time() - running.since
        line = running_line(running.task.task_id, attempt.adapter_id, attempt.model, seconds)
        waiting = self.gate.waiting() if self.gate is not None else None
        return f"{line}; {waiting}" if waiting else line

    def stop(self, reason: str, after_s: float) -> None:
        if self.running is not None and self.running.control is not None:
            self.running.control.stop(reason, after_s)

    async def run(
        self,
        claim: Claim,
        *,
        stopping: bool = False,
        on_running: Callable[[], Awaitable[None]] | None = None,
        follow: Follow | None = None,
    ) -> Ended:
        """One attempt to its outcome commit (`Store.end_attempt`, made once); returns what that commit
        made: the end, and the next task when `follow` let the commit claim it in the same transaction.
        `stopping`: the service is stopping, so the attempt gets only the grace period. `on_running` is
        told as the attempt begins (its claim is committed and it is what `describe` says runs)."""
        attempt = claim.attempt
        assert attempt is not None
        control = AttemptControl()
        running = Running(claim.task, attempt, control, follow=follow, since=anyio.current_time())
        self.running = running
        if stopping:
            control.stop("interrupted", self.config.dispatch.grace_s)
        boundary = ("attempt %s of task %s failed inside agentd", attempt.attempt_id, claim.task.task_id)
        try:  # the attempt's boundary: what fails inside agentd is recorded; the task never stays running
            with contained(logger, *boundary) as failed:
                if on_running is not None:
                    await on_running()
                self.running = running = replace(running, prepared=await self.preparer.prepare(claim))
                run = await self._execute(running)
                ended = await self._conclude(running, run)
            if failed.error is not None:
                end = await self.internal_failure(running, failed.error, "running this attempt")
                ended = await self.db.call(self._commit, running, end)
        finally:
            self.running = None
        self._count(attempt, ended.end)
        return ended

    async def _conclude(self, running: Running, run: AdapterRun | None) -> Ended:
        """The attempt's end, judged and sealed, and its outcome commit, in one hop to the database's
        thread (docs/decisions.md, "Group commit")."""
        prepared, control = running.prepared, running.control
        assert prepared is not None and control is not None
        ending = self.ending(running)

        def conclude_and_commit(store: Store) -> Ended:
            end = conclude(ending, prepared, run, control.stopped)  # its failure is the attempt's, as ever
            return self._commit(store, running, end)

        return await self.db.call(conclude_and_commit)

    async def commit(self, task: TaskRecord, attempt: TaskAttempt, end: AttemptEnd) -> Ended:
        """The outcome commit of an end found outside an attempt's run (the boot sweep's)."""
        return await self.db.call(self._commit, Running(task, attempt), end)

    def _commit(self, store: Store, running: Running, end: AttemptEnd) -> Ended:
        """`Store.end_attempt`, on the database's thread. An attempt that never started records its bundle
        first (evidence all the same). With `follow` (not for a stopped attempt: it claims nothing after it)
        the next claim shares the transaction; if that fails, the outcome is committed alone; if SQLite
        refuses even that (a value nothing caught earlier), the attempt is recorded as agentd's
        internal_error naming why, so the task never stays running."""
        task, attempt, prepared, control = running.task, running.attempt, running.prepared, running.control
        if prepared is not None and not running.started:
            with contained(logger, "the bundle of attempt %s could not be recorded", attempt.attempt_id):
                store.record_bundle(task.task_id, attempt.attempt_id, prepared.compiled, self.clock.now())
        if running.follow is not None and not (control and control.reason):
            with contained(logger, "the boundary commit after attempt %s failed; alone now", attempt.attempt_id):
                return store.end_attempt(end, running.follow)  # its chain head: the service's to publish (shell.py)
        with contained(logger, "the outcome of attempt %s could not be recorded", attempt.attempt_id) as failed:
            return store.end_attempt(end)
        assert failed.error is not None
        return store.end_attempt(self.failure_end(running, failed.error, "recording its outcome"))

    async def internal_failure(self, running: Running, exc: BaseException, stage: str) -> AttemptEnd:
        return await anyio.to_thread.run_sync(self.failure_end, running, exc, stage)

    def failure_end(self, running: Running, exc: BaseException, stage: str) -> AttemptEnd:
        """The end of an attempt agentd itself failed (`stage`: what it was doing), judged as every end is."""
        task, attempt, prepared = running.task, running.attempt, running.prepared
        redactor = prepared.redactor if prepared else adapter_redactor(self.config, attempt.adapter_id)
        ending = self.ending(running)
        return internal_failure_end(ending, task, attempt, exc, stage=stage, started=running.started, redactor=redactor)

    def ending(self, running: Running) -> Ending:
        """The attempt's policy (resolved once, when it was prepared; else now: the boot sweep, or agentd's own
        failure before the attempt was prepared), with the clock and the jitter."""
        if running.prepared is not None:
            return Ending(running.prepared.policy, self.clock, self.rng)
        user, memo, task = self.preparer.user, self.preparer.memo, running.task
        policy = attempt_policy(self.config, task, running.attempt.adapter_id, user, memo)
        return Ending(policy, self.clock, self.rng)

    async def _execute(self, running: Running) -> AdapterRun | None:
        prepared, control = running.prepared, running.control
        assert prepared is not None and control is not None
        task_id, attempt_id, compiled, held = (
            prepared.task.task_id,
            prepared.attempt_id,
            prepared.compiled,
            prepared.ctx,
        )

        async def started(pid: int | None) -> None:
            control.started = True
            now = self.clock.now()
            session = held.session.payload() if held.session else None
            await self.db.call(Store.mark_attempt_started, task_id, attempt_id, pid, now, compiled, session)

        gate = self._gate(prepared)
        if gate is not None and gate.ledger is not None:  # the harness's stream, read as it comes
            prepared = replace(prepared, ctx=replace(prepared.ctx, tap=gate.ledger.tap))
        served = await self._served(prepared)  # its model calls through agentd's gateway (docs/gateway.md)
        meter = await self._meter(prepared) if served is None else None  # else the gateway meters each call
        try:
            with control.scope:
                async with anyio.create_task_group() as watchers:
                    watchers.start_soon(self._watch_for_cancel, task_id, control)
                    if gate is not None:
                        gate.open()  # before the start; if it cannot be served, the attempt never runs unguarded
                        self.gate = gate
                        watchers.start_soon(gate.serve)
                    if meter is not None:
                        watchers.start_soon(meter.run, prepared.ctx.timer)
                    ctx = served.start(watchers) if served is not None else prepared.ctx
                    activity = live.watch(prepared, self.db, self.clock, watchers)
                    run = await prepared.adapter.execute(ctx, started)
                    if activity is not None:
                        await activity.finish()
                    watchers.cancel_scope.cancel()
                return judged_calls(through_gateway(metered(run, meter), served), gate)
            return None  # stopped from outside: control.stopped says why
        finally:
            self.gate = None
            if gate is not None:
                await gate.close()
            if served is not None:
                await served.close()

    def _gate(self, prepared: Prepared) -> CallGate | None:
        """The gate of an attempt whose tool calls are judged while it runs (docs/policy.md)."""
        if prepared.ctx.hook is None:
            return None
        return CallGate(prepared, self.config.policy, self.db, self.clock, self.doorbell)

    async def _served(self, prepared: Prepared) -> ServedAttempt | None:
        """The gateway's part in an attempt whose model calls go through it: the budget each call is held to
        (the attempt's cap and what is left of the day's, at the adapter's prices) and what its profile does
        past it (`on_budget`)."""
        if prepared.routed is None:
            return None
        if self.gateway is None:  # imported here: a dispatcher whose attempts never use it starts without it and
            from agentd.gateway.server import Gateway  # h11 (~15 ms; docs/decisions.md, "Start-up")

            self.gateway = Gateway(self.clock)
        config, attempt = self.config, prepared.attempt
        cap = None
        if config.budget.per_attempt_usd is not None or config.budget.capped:
            spend = await self.db.read(Store.spend_since, day_start(self.clock.now()))
            cap = attempt_cap(config, attempt.adapter_id, spend)
        profile = config.profiles[prepared.task.requested_profile_id]
        calls = ModelCalls(
            prepared,
            self.db,
            self.clock,
            self.doorbell,
            cap=cap,
            price=price_of(prepared.ctx.adapter, attempt.model),
            on_budget=profile.on_budget,
            ask_timeout_s=config.policy.ask_timeout_s,
        )
        return ServedAttempt(self.gateway, prepared, calls, self.db, self.clock)

    async def _meter(self, prepared: Prepared) -> Meter | None:
        """The running budget of an attempt with a cap its harness's reports can be held to."""
        config, ctx, attempt = self.config, prepared.ctx, prepared.attempt
        if config.budget.per_attempt_usd is None and not config.budget.capped:
            return None
        spend = await self.db.read(Store.spend_since, day_start(self.clock.now()))
        cap = attempt_cap(config, attempt.adapter_id, spend)
        before = ctx.session.spent_before if ctx.session else None
        return meter_for(ctx.adapter, attempt.model, cap, ctx.paths.stdout, ctx.paths.scratch, ctx.reporter, before)

    async def _watch_for_cancel(self, task_id: int, control: AttemptControl) -> None:
        while True:
            await self.doorbell.wait(CANCEL_POLL_S)
            if await self.db.call(Store.cancel_requested, task_id):
                control.stop("operator_canceled")
                return

    def _count(self, attempt: TaskAttempt, end: AttemptEnd) -> None:
        completed = end.ended_at.timestamp() if end.status == "completed" else None
        seconds = (end.ended_at - attempt.started_at).total_seconds()
        self.metrics.attempt_finished(
            attempt.adapter_id, end.kind, end.exit_status, seconds, end.model or attempt.model, end.usage, completed
        )
