"""The dispatcher (DESIGN §4): one runner per agent.

Start: lock → boot sweep → pending outbox → READY. Each tick: due schedules → workflows →
claim one task → prepare → execute → judge → commit → outbox. Idle: sleep until the next task
is due, a poke, or the poll ceiling. SIGTERM: stop claiming, give the running attempt the grace
period, then stop it and record it interrupted.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import signal
from dataclasses import replace
from datetime import datetime

import anyio
import anyio.abc
import anyio.to_thread
from pydantic import ValidationError

from agentd import procs
from agentd.adapters import AdapterRun
from agentd.attempt import AttemptPreparer, Prepared, conclude, internal_failure_end, plan_attempt, sweep_end
from agentd.bundle import WorkflowStep
from agentd.clock import Clock, age
from agentd.config import Config, task_intent_from_schedule
from agentd.containment import attempt_group, sweep_run
from agentd.errors import AgentdError, DispatchLocked, InputError, StorageError
from agentd.evidence import attempt_paths
from agentd.hashing import new_ulid
from agentd.intake import NewTask, prepare_task
from agentd.metrics import DispatchMetrics
from agentd.records import (
    RecurringScheduleRecord,
    TaskAttempt,
    TaskIntent,
    TaskRecord,
    WorkflowRecord,
    WorkflowRef,
)
from agentd.service import Notifier, keep_alive
from agentd.store import AsyncStore, AttemptEnd, Claim, LockHolder, OutboxItem, ScheduleSpecRow, Store
from agentd.store.attempts import AttemptPlan
from agentd.wake import doorbell
from agentd.workflows import Change, StepResult, accepted_signals, judge_step, state_cap, state_of, step_payload

logger = logging.getLogger(__name__)

CANCEL_POLL_S = 1.0  # a running task's cancel flag is checked at least this often
FATAL = (StorageError,)  # what ends the service (exit 1, systemd restarts it); anything else is recorded


class LockLost(AgentdError):
    """Another dispatcher cleared our lock as stale: stop at once, commit nothing more."""


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


class Dispatcher:
    def __init__(
        self,
        config: Config,
        db: AsyncStore,
        *,
        clock: Clock,
        rng: random.Random | None = None,
        notifier: Notifier | None = None,
        metrics: DispatchMetrics | None = None,
    ) -> None:
        self.config, self.db, self.clock = config, db, clock
        self.rng = rng or random.Random()
        self.notifier = notifier or Notifier()
        self.metrics = metrics
        self.started_at = clock.now()
        self._running: tuple[int, str, str | None, float] | None = None  # task, adapter, model, since
        self.identity = procs.this_process()
        self.holder_id = new_ulid(clock)
        self.preparer = AttemptPreparer(config, db, clock)
        self._wake = anyio.Event()
        self._stopping = False
        self._control: AttemptControl | None = None
        self._idle_noted = False

    # --- the service ----------------------------------------------------------------------------

    async def run(self, *, until_idle: bool = False, watch_signals: bool = True) -> None:
        """Run until SIGTERM/SIGINT (or, with until_idle, until nothing is claimable now)."""
        await self.start()
        try:
            async with anyio.create_task_group() as services:
                if self.metrics is not None:
                    await services.start(self.metrics.serve, self.config.metrics.dispatch_listen)
                services.start_soon(self._keep_lock)
                if watch_signals:
                    services.start_soon(self._watch_signals)
                await services.start(self._listen_for_pokes)
                self.notifier.ready(await self.status_line())
                services.start_soon(keep_alive, self.notifier, self.status_line, self._report_status)
                await self._loop(until_idle)
                services.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.stop()

    async def start(self) -> None:
        """Take the lock, sweep what a dead dispatcher left running, finish its outbox, and make the
        config's schedules the database's."""
        await self.take_lock()
        await self.boot_sweep()
        await self.apply_outbox()
        await self.db.call(Store.upsert_config_schedules, self._schedule_specs(), self.clock.now())
        await self.db.call(
            Store.record_event,
            "dispatch_started",
            self.clock.now(),
            {"pid": self.identity.pid, "holder": self.holder_id},
        )

    async def stop(self) -> None:
        await self.db.call(Store.record_event, "dispatch_stopped", self.clock.now(), {"pid": self.identity.pid})
        await self.db.call(
            Store.report_service_status,
            "dispatch",
            self.identity.pid,
            "stopped",
            None,
            self.started_at,
            self.clock.now(),
        )
        await self.db.call(Store.release_dispatch_lock, self.holder_id)
        self.notifier.close()
        if self.metrics is not None:
            self.metrics.lock_held.set(0)
            self.metrics.close()

    async def status_line(self) -> str:
        """What the dispatcher is doing, in one line: systemd's STATUS=, `agentd status`, the logs."""
        if self._running is not None:
            task_id, adapter, model, since = self._running
            elapsed = age(anyio.current_time() - since)
            line = f"running task {task_id} ({adapter}, {model or 'no model'}) {elapsed}"
            return f"stopping: waiting for {line}" if self._stopping else line
        if self._stopping:
            return "stopping"
        now = self.clock.now()
        return _idle_line(now, *await self.db.call(Store.idle_outlook, now))

    async def _report_status(self, line: str) -> None:
        url = self.metrics.url if self.metrics else None
        await self.db.call(
            Store.report_service_status, "dispatch", self.identity.pid, line, url, self.started_at, self.clock.now()
        )

    def request_stop(self, *, immediately: bool = False) -> None:
        """Stop claiming; the running attempt gets the grace period (none if immediately)."""
        self._stopping = True
        self._wake.set()
        self.notifier.stopping("stopping: waiting for the running attempt" if self._control else "stopping")
        if self._control is not None:
            self._control.stop("interrupted", 0.0 if immediately else self.config.dispatch.grace_s)

    async def _loop(self, until_idle: bool) -> None:
        """Tick until stopped. A tick that fails is logged and retried after a pause that doubles up
        to the poll ceiling (never a hot loop); only an unusable disk ends the service."""
        pause = 1.0
        while not self._stopping:
            try:
                worked = await self.tick(self.clock.now())
            except FATAL:
                raise
            except Exception:
                logger.exception("dispatch_tick_failed: retrying in %.0fs", pause)
                await self._wait_for_poke(pause)
                pause = min(pause * 2, self.config.dispatch.poll_ceiling_s)
                continue
            pause = 1.0
            if not worked:
                if until_idle:
                    return
                await self._sleep_until_due()

    async def tick(self, now: datetime) -> bool:
        """One pass in the seed's order; True if an attempt ran (or a claim was refused)."""
        await self.run_due_schedules(now)
        await self.advance_workflows(now)
        return await self.claim_and_run(now)

    async def run_until_idle(self) -> int:
        """Tick until nothing is claimable at the clock's now; return how many tasks were claimed."""
        claimed = 0
        while await self.tick(self.clock.now()):
            claimed += 1
        return claimed

    # --- tick steps -----------------------------------------------------------------------------

    async def run_due_schedules(self, now: datetime) -> None:
        """Each due schedule enqueues one task, unless its previous task is still open."""
        created = await self.db.call(
            Store.enqueue_due_schedules, now, lambda schedule: self._schedule_task(schedule, now)
        )
        if self.metrics is not None:
            for schedule_id in created:
                self.metrics.schedule_tasks.labels(schedule_id).inc()

    async def advance_workflows(self, now: datetime) -> None:
        """Every active workflow whose current state has no task for this entry gets exactly one."""
        await self.db.call(Store.create_step_tasks, now, lambda workflow: self._step_task(workflow, now))

    async def claim_and_run(self, now: datetime) -> bool:
        claim = await self.db.call(Store.claim_next_task, now, self.holder_id, self._plan, self._evidence_dir)
        if claim is None:
            return False
        self._idle_noted = False
        if claim.attempt is not None:
            self._crash_point("after_claim")
            await self.run_attempt(claim)
            self._crash_point("after_outcome_commit")
        await self.apply_outbox()
        return True

    async def run_attempt(self, claim: Claim) -> TaskRecord:
        """prepare → execute → conclude (redact, judge, seal) → the outcome commit. Whatever goes
        wrong inside agentd becomes the attempt's recorded internal_error; the service goes on."""
        attempt = claim.attempt
        assert attempt is not None
        control = AttemptControl()
        self._control = control
        if self._stopping:
            control.stop("interrupted", self.config.dispatch.grace_s)
        prepared: Prepared | None = None
        try:
            prepared = await self.preparer.prepare(claim, await self.workflow_step(claim.task))
            self._running = (claim.task.task_id, attempt.adapter_id, attempt.model, anyio.current_time())
            self.notifier.status(await self.status_line())
            run = await self._execute(prepared, control)
            end = await anyio.to_thread.run_sync(
                conclude, self.config, self.clock, self.rng, prepared, run, control.stopped
            )
        except FATAL:
            raise
        except Exception as exc:  # the attempt's boundary: record it, never leave the task running
            logger.exception("attempt %s of task %s failed inside agentd", attempt.attempt_id, claim.task.task_id)
            end = await self._internal_failure(claim.task, attempt, exc, "running this attempt", control, prepared)
        finally:
            self._control = None
            self._running = None
        task = await self._commit(claim.task, attempt, end, control, prepared)
        self._count_attempt(attempt, end)
        return task

    async def _commit(
        self,
        task: TaskRecord,
        attempt: TaskAttempt,
        end: AttemptEnd,
        control: AttemptControl | None = None,
        prepared: Prepared | None = None,
    ) -> TaskRecord:
        """The outcome commit. If SQLite refuses it (a value nothing caught earlier), the attempt is
        recorded as agentd's internal_error naming why, so the task never stays running."""
        try:
            return await self.db.call(Store.finish_attempt, end)
        except FATAL:
            raise
        except Exception as exc:
            logger.exception("the outcome of attempt %s could not be recorded", attempt.attempt_id)
            fallback = await self._internal_failure(task, attempt, exc, "recording its outcome", control, prepared)
            return await self.db.call(Store.finish_attempt, fallback)

    async def _internal_failure(
        self,
        task: TaskRecord,
        attempt: TaskAttempt,
        exc: BaseException,
        stage: str,
        control: AttemptControl | None,
        prepared: Prepared | None,
    ) -> AttemptEnd:
        return await anyio.to_thread.run_sync(
            functools.partial(
                internal_failure_end,
                self.config,
                self.clock,
                self.rng,
                task,
                attempt,
                exc,
                stage=stage,
                started=bool(control and control.started),
                redactor=prepared.redactor if prepared else None,
            )
        )

    def _count_attempt(self, attempt: TaskAttempt, end: AttemptEnd) -> None:
        if self.metrics is None:
            return
        completed = end.ended_at.timestamp() if end.status == "completed" else None
        seconds = (end.ended_at - attempt.started_at).total_seconds()
        self.metrics.attempt_finished(
            attempt.adapter_id, end.exit_status, seconds, end.model or attempt.model, end.usage, completed
        )

    async def _execute(self, prepared: Prepared, control: AttemptControl) -> AdapterRun | None:
        task_id, attempt_id = prepared.task.task_id, prepared.attempt_id

        async def started(pid: int | None) -> None:
            control.started = True
            await self.db.call(Store.mark_attempt_started, task_id, attempt_id, pid, self.clock.now())

        with control.scope:
            async with anyio.create_task_group() as watchers:
                watchers.start_soon(self._watch_for_cancel, task_id, control)
                run = await prepared.adapter.execute(prepared.ctx, started)
                watchers.cancel_scope.cancel()
            return run
        return None  # stopped from outside: control.stopped says why

    async def _watch_for_cancel(self, task_id: int, control: AttemptControl) -> None:
        while True:
            await self._wait_for_poke(CANCEL_POLL_S)
            if await self.db.call(Store.cancel_requested, task_id):
                control.stop("operator_canceled")
                return

    async def apply_outbox(self) -> None:
        """Apply every pending side effect, each exactly once (a crash re-applies, never doubles).
        An item that fails inside agentd is settled as refused with the reason; the rest go on."""
        for item in await self.db.call(Store.pending_outbox):
            try:
                await self._apply_outbox_item(item, self.clock.now())
            except FATAL:
                raise
            except Exception as exc:
                logger.exception("outbox item %s could not be applied", item.idempotency_key)
                reason = f"internal_error: {type(exc).__name__}: {exc}"[:500]
                await self.db.call(Store.settle_outbox, item, "refused", {"reason": reason}, self.clock.now())

    async def _apply_outbox_item(self, item: OutboxItem, now: datetime) -> None:
        if item.kind == "follow_up_task":
            new, refusal = self._follow_up(item, now)
            await self.db.call(Store.apply_follow_up, item, new, refusal, now)
        elif item.kind == "workflow_signal":
            await self.apply_workflow_signal(item, now)
        else:
            await self.db.call(Store.settle_outbox, item, "awaiting_handler", {}, now)

    async def apply_workflow_signal(self, item: OutboxItem, now: datetime) -> None:
        """A step task ended: move its workflow on, complete it, or block it (never loop)."""
        step = StepResult(
            int(item.payload["workflow_id"]),
            item.payload["state_id"],
            int(item.payload["iteration"]),
            item.payload.get("signal"),
            item.payload["task_status"],
            item.task_id,
        )

        def judge(workflow: WorkflowRecord, entries: dict[str, int]) -> Change:
            definition = self.config.workflows.get(workflow.workflow_type)
            return judge_step(
                definition, workflow, step, entries, state_cap(definition, self.config.dispatch.workflow_state_cap)
            )

        workflow_types: list[str] = []

        def judged(workflow: WorkflowRecord, entries: dict[str, int]) -> Change:
            workflow_types.append(workflow.workflow_type)
            return judge(workflow, entries)

        change = await self.db.call(Store.apply_step_result, item, judged, now)
        if self.metrics is not None and change is not None and change.kind != "ignore":
            self.metrics.workflow_transitions.labels(workflow_types[0], change.kind).inc()

    async def workflow_step(self, task: TaskRecord) -> WorkflowStep | None:
        """What the bundle tells a step task about its workflow, including the signals it may give."""
        if task.workflow_ref is None:
            return None
        workflow = await self.db.call(Store.get_workflow_or_raise, task.workflow_ref.workflow_id)
        definition = self.config.workflows.get(workflow.workflow_type)
        state = state_of(definition, task.workflow_ref.state_id) if definition else None
        return WorkflowStep(
            workflow.workflow_id,
            workflow.workflow_type,
            task.workflow_ref.state_id,
            task.workflow_iteration or workflow.iteration,
            accepted_signals(state) if state else (),
        )

    def _schedule_task(self, schedule: RecurringScheduleRecord, now: datetime) -> NewTask | str:
        intent = schedule.task.model_copy(update={"source": f"schedule:{schedule.schedule_id}"})
        try:
            return replace(prepare_task(intent, self.config, now, trusted=False), schedule_id=schedule.schedule_id)
        except InputError as exc:
            return str(exc)
        except Exception as exc:  # one schedule's problem is its own: refused and recorded, never a stall
            logger.exception("schedule %s: its task could not be made", schedule.schedule_id)
            return f"internal_error: {type(exc).__name__}: {exc}"

    def _step_task(self, workflow: WorkflowRecord, now: datetime) -> NewTask | str:
        definition = self.config.workflows.get(workflow.workflow_type)
        state = state_of(definition, workflow.current_state) if definition else None
        if definition is None or state is None:
            return f"workflow {workflow.workflow_type} has no state {workflow.current_state!r} any more"
        if state.task_type is None:
            return ""  # a state without a task: the workflow waits there for a signal
        intent = TaskIntent(
            task_type=state.task_type,
            source=f"workflow:{workflow.workflow_id}:{state.state_id}:{workflow.iteration}",
            subject=f"{workflow.workflow_type} {workflow.instance_key}: {state.state_id} (#{workflow.iteration})",
            requested_profile_id=state.default_profile_id,
            skill_ids=state.default_skill_ids,
            workflow_ref=WorkflowRef(
                workflow_id=workflow.workflow_id, state_id=state.state_id, instance_key=workflow.instance_key
            ),
            payload=step_payload(workflow),
        )
        try:
            new = prepare_task(intent, self.config, now, trusted=True)
        except InputError as exc:
            return f"cannot create the {state.state_id} task: {exc}"
        except Exception as exc:  # blocks this workflow with the reason; the others go on
            logger.exception("workflow %s: its %s task could not be made", workflow.workflow_id, state.state_id)
            return f"cannot create the {state.state_id} task: internal_error: {type(exc).__name__}: {exc}"
        return replace(new, workflow_iteration=workflow.iteration)

    def _schedule_specs(self) -> list[ScheduleSpecRow]:
        return [
            ScheduleSpecRow(
                s.schedule_id,
                s.name or s.schedule_id,
                s.enabled,
                s.interval_seconds,
                task_intent_from_schedule(s).model_dump(mode="json", exclude_none=True),
            )
            for s in self.config.schedules
        ]

    def _follow_up(self, item: OutboxItem, now: datetime) -> tuple[NewTask | None, str | None]:
        try:
            intent = TaskIntent.model_validate({**item.payload, "source": f"follow_up:task:{item.task_id}"})
            return prepare_task(intent, self.config, now, trusted=False), None
        except ValidationError as exc:
            return None, f"not a valid TaskIntent: {exc.errors()[0]['msg']}"
        except InputError as exc:
            return None, str(exc)

    # --- lock, sweep, idle ----------------------------------------------------------------------

    async def take_lock(self) -> None:
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
        result = await self.db.call(Store.acquire_dispatch_lock, me, now, self._staleness)
        if not result.acquired:
            holder = result.holder
            beat_age = (now - holder.heartbeat_at).total_seconds()
            raise DispatchLocked(
                f"dispatch_locked: another dispatcher holds the lock (pid {holder.pid} on {holder.host}, "
                f"heartbeat {beat_age:.0f}s ago); only one runs per agent"
            )
        if result.cleared is not None:
            logger.warning(
                "dispatch_lock_stale_cleared pid=%s host=%s reason=%s",
                result.cleared.pid,
                result.cleared.host,
                result.cleared_because,
            )
        if self.metrics is not None:
            self.metrics.lock_held.set(1)
            last = await self.db.call(Store.last_successful_attempt_at)
            if last is not None:
                self.metrics.last_success.set(last.timestamp())

    def _staleness(self, holder: LockHolder) -> str | None:
        """Why a lock is stale, or None if its holder may be alive: both age and identity count."""
        beat_age = (self.clock.now() - holder.heartbeat_at).total_seconds()
        if beat_age > self.config.dispatch.lock_stale_s:
            return f"heartbeat {beat_age:.0f}s old (stale after {self.config.dispatch.lock_stale_s:g}s)"
        holder_process = procs.ProcessIdentity(holder.pid, holder.pid_started, holder.host, holder.boot_id)
        if procs.is_running(holder_process, self.identity) is False:
            return f"holder pid {holder.pid} is not running on this host"
        return None

    async def _keep_lock(self) -> None:
        while True:
            await anyio.sleep(self.config.dispatch.lock_heartbeat_s)
            if not await self.db.call(Store.heartbeat_dispatch_lock, self.holder_id, self.clock.now()):
                raise LockLost("the dispatch lock was cleared by another dispatcher; stopping without committing")

    async def boot_sweep(self) -> None:
        """Close every attempt a dead dispatcher left open: kill what it left running, then judge
        what it left (if its processes were gone) or count the crash against the task."""
        for task, attempt in await self.db.call(Store.running_attempts):
            survivors = await sweep_run(attempt_group(self.config.paths.state_dir, attempt.attempt_id))
            try:
                end = await anyio.to_thread.run_sync(
                    sweep_end, self.config, self.clock, self.rng, task, attempt, survivors
                )
            except FATAL:
                raise
            except Exception as exc:
                logger.exception("boot sweep of attempt %s failed inside agentd", attempt.attempt_id)
                end = await self._internal_failure(task, attempt, exc, "sweeping this attempt", None, None)
            await self._commit(task, attempt, end)
            if self.metrics is not None:
                self.metrics.boot_sweep.inc()

    async def _listen_for_pokes(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with doorbell(self.config.paths.state_dir) as sock:
            task_status.started()
            if sock is None:  # state dir path too long for a socket: the poll ceiling still holds
                await anyio.sleep_forever()
                return
            while True:
                await sock.receive()
                self._wake.set()

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                logger.info("%s received: stopping", signal.Signals(signum).name)
                self.request_stop(immediately=self._stopping)  # a second signal does not wait

    async def _wait_for_poke(self, timeout_s: float) -> None:
        with anyio.move_on_after(max(timeout_s, 0.0)):
            await self._wake.wait()
        if self._wake.is_set():
            self._wake = anyio.Event()

    async def _sleep_until_due(self) -> None:
        now = self.clock.now()
        waiting, upcoming = await self.db.call(Store.idle_outlook, now)
        delay = self.config.dispatch.poll_ceiling_s
        if upcoming is not None:
            delay = min(delay, (upcoming - now).total_seconds())
        if not self._idle_noted:
            await self.db.call(Store.record_event, "dispatch_idle", now, {"next_due_in_s": round(delay, 3)})
            self._idle_noted = True
        if not self._stopping:
            self.notifier.status(_idle_line(now, waiting, upcoming))
        await self._wait_for_poke(delay)

    def _plan(self, task: TaskRecord) -> AttemptPlan:
        return plan_attempt(self.config, task)

    def _evidence_dir(self, task_id: int, attempt_id: str) -> str:
        return str(attempt_paths(self.config.paths.state_dir, task_id, attempt_id).root)

    def _crash_point(self, name: str) -> None:
        if self.config.chaos.crash_at == name:
            logger.warning("chaos: crashing at %s", name)
            os.kill(os.getpid(), signal.SIGKILL)


def _idle_line(now: datetime, waiting: int, upcoming: datetime | None) -> str:
    later = f", next due in {age((upcoming - now).total_seconds())}" if upcoming else ""
    return f"idle, {waiting} pending{later}"
