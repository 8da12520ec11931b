"""The sensor service (`agentd sensors`): each sensor run when it is due, grounded work into the
queue once (a run itself: agentd/services/sensor_runs.py).

Schedules live in the database, so a restart neither re-runs early nor forgets. At most
`max_concurrent` run at once, each under its own hard timeout: one slow or crashing sensor never
holds up the others. A run agentd could not even record is not retried before its interval.
The service also applies [retention] (agentd/evidence/retention.py): a minute after it starts, then every
`interval_s`; a pass that fails is logged and recorded, and the service goes on. With [archive] it uploads the
sealed attempt folders and witnesses the chain head beside its runs (agentd/archive/upload.py).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import anyio
import anyio.abc

from agentd.archive.upload import archive_beside
from agentd.clock import Clock, age
from agentd.config import Config
from agentd.config.sensors import Sensor
from agentd.edge import scrub
from agentd.errors import contained
from agentd.evidence.retention import Cutoffs, RetentionReport, apply_retention
from agentd.evidence.rollback import refuse_if_behind
from agentd.outlook.metrics import NullMetrics, SensorMetrics
from agentd.process.containment import release_namespace
from agentd.process.wake import Doorbell
from agentd.services.sensor_runs import SensorRunner, SensorRunReport, sweep_sensor_runs
from agentd.services.shell import Notifier, Shell
from agentd.store import AsyncStore, Store

logger = logging.getLogger(__name__)

RETENTION_FIRST_S = 60.0  # after start: the first pass waits for the boot sweep and the first runs
RETENTION_CATCH_UP_S = 10.0  # a bounded pass that left more: the next one comes this soon


class SensorService:
    def __init__(
        self,
        config: Config,
        db: AsyncStore,
        *,
        clock: Clock,
        notifier: Notifier | None = None,
        metrics: SensorMetrics | NullMetrics | None = None,
        once: bool = False,
    ) -> None:
        self.config, self.db, self.clock, self.once = config, db, clock, once
        metrics = metrics or NullMetrics()
        listen, state_dir = config.metrics.sensors_listen, config.paths.state_dir
        self.shell = Shell("sensors", db, clock, metrics, listen, notifier, state_dir)
        self.runner = SensorRunner(config, db, clock, metrics)
        self.doorbell = Doorbell()
        self._running: set[str] = set()
        self._not_before: dict[str, datetime] = {}  # a run agentd could not record: not again before
        self._schedule: dict[str, datetime] = {}  # when each sensor not running falls due, as last read
        self._retention_due: datetime | None = None  # set when the service starts (or first asked)
        self.stopping = False

    @property
    def sensors(self) -> list[Sensor]:
        return [s for s in self.config.sensor_definitions.values() if s.manifest.enabled]

    async def run(self) -> None:
        """Run sensors as they fall due until stopped (once: one pass over what is due)."""
        await self.db.call(refuse_if_behind, self.config.paths.state_dir)  # a database older than the evidence
        self.runner.check()  # the boundary first: a service that cannot keep it does not start
        async with anyio.create_task_group() as group:
            await sweep_sensor_runs(self.config, self.db, self.clock, self.runner.user)
            await self.shell.serve(group, self.status_line)
            group.start_soon(archive_beside, self.config, self.db, self.clock)  # [archive]: docs/decisions.md
            async with anyio.create_task_group() as runs:
                while not self.stopping:
                    await self._start_due(runs, self.clock.now())
                    if self.once:
                        break
                    if self._take_retention_pass(self.clock.now()):
                        runs.start_soon(self._apply_retention, self.clock.now())
                    await self._sleep_until_due()
                if self.stopping:
                    runs.cancel_scope.cancel()  # every sensor is idempotent: what it printed stays recorded
            group.cancel_scope.cancel()
        await self.shell.stopped()
        release_namespace(self.config.paths.state_dir)

    async def status_line(self) -> str:
        """What the sensor service is doing, in one line (systemd STATUS=, `agentd status`)."""
        if self.stopping:
            return "stopping"
        running = ", ".join(sorted(self._running))
        soonest = min(self._schedule.values(), default=None)
        due = f", next due in {age((soonest - self.clock.now()).total_seconds())}" if soonest else ""
        return f"watching {len(self.sensors)} sensors" + (f"; running {running}" if running else "") + due

    def request_stop(self, *, immediately: bool = False) -> None:
        self.stopping = True
        self.doorbell.ring()
        self.shell.stopping("stopping")

    async def run_due(self, now: datetime) -> list[SensorRunReport]:
        """Run every due sensor now, concurrently, and wait for all of them (tests, --once)."""
        reports: list[SensorRunReport] = []
        async with anyio.create_task_group() as runs:
            await self._start_due(runs, now, reports)
        return reports

    async def _start_due(
        self, runs: anyio.abc.TaskGroup, now: datetime, reports: list[SensorRunReport] | None = None
    ) -> None:
        """Start every sensor due now (and not held back, not running); remember when each other one
        falls due: the schedule the idle sleep waits on without reading the database."""
        states = await self.db.call(Store.sensor_states)
        self._schedule = {}
        for sensor in self.sensors:
            if sensor.sensor_id in self._running:
                continue  # its end rings the doorbell, and the next check reads its new schedule
            state = states.get(sensor.sensor_id)
            times = (state.next_run_at if state else None, self._not_before.get(sensor.sensor_id))
            due_at = max((t for t in times if t is not None), default=now)  # never run: due at once
            if due_at > now:
                self._schedule[sensor.sensor_id] = due_at
                continue
            self._running.add(sensor.sensor_id)
            runs.start_soon(self._run_guarded, sensor, reports)

    async def _run_guarded(self, sensor: Sensor, reports: list[SensorRunReport] | None) -> None:
        try:  # one sensor's failure is its own; the service and the others go on
            with contained(logger, "sensor %s failed inside agentd", sensor.sensor_id) as failed:
                report = await self.runner.run(sensor)
                if reports is not None:
                    reports.append(report)
            if failed.error:
                interval = timedelta(seconds=sensor.manifest.interval_seconds)
                self._not_before[sensor.sensor_id] = self.clock.now() + interval
        finally:
            self._running.discard(sensor.sensor_id)
            self.doorbell.ring()

    async def apply_retention_if_due(self, now: datetime) -> RetentionReport | None:
        """One bounded retention pass if due (the first RETENTION_FIRST_S after start, then every interval_s)."""
        return await self._apply_retention(now) if self._take_retention_pass(now) else None

    def _take_retention_pass(self, now: datetime) -> bool:
        if self._retention_due is None:
            self._retention_due = now + timedelta(seconds=RETENTION_FIRST_S)
        if now < self._retention_due:
            return False
        self._retention_due = now + timedelta(seconds=self.config.retention.interval_s)
        return True

    async def _apply_retention(self, now: datetime) -> RetentionReport | None:
        """A retention pass is its own boundary: whatever it raises is logged and recorded as
        retention_failed, and the service (and the next pass, an interval later) goes on."""
        cutoffs = Cutoffs.configured(self.config.retention, now)
        try:
            report = await self.db.call(apply_retention, self.config, cutoffs, now, bounded=True)
        except Exception as exc:
            logger.exception("retention_failed: the next retention pass is in %ss", self.config.retention.interval_s)
            error = scrub(f"{type(exc).__name__}: {exc}")[:500]
            try:
                await self.db.call(Store.record_event, "retention_failed", self.clock.now(), {"error": error})
            except Exception:  # the storage itself is failing: the log line above is the record
                logger.exception("retention_failed could not be recorded")
            return None
        if report.more:  # bounded, and more is old enough: catch up soon
            self._retention_due = self.clock.now() + timedelta(seconds=RETENTION_CATCH_UP_S)
        return report

    def seconds_to_next_check(self, now: datetime) -> float:
        """How long the service may sleep before its next due check: 0 if a sensor or a retention
        pass is due by the schedule last read, else until the first falls due, at most `tick_s`."""
        dues = [*self._schedule.values(), *([self._retention_due] if self._retention_due else [])]
        soonest = min(dues, default=None)
        until = self.config.sensors.tick_s if soonest is None else (soonest - now).total_seconds()
        return max(min(until, self.config.sensors.tick_s), 0.0)

    async def _sleep_until_due(self) -> None:
        """Until a sensor or retention pass falls due, a run ends, or stop (the doorbell). Only this
        service brings a sensor's next run forward (`agentd sensor run` only pushes it later), so the
        schedule read at the last check holds meanwhile and an idle wake reads nothing: it looks at
        the wall clock every `tick_s` (the sleep itself counts monotonic time, which a stepped clock
        or a suspend leaves behind) and sleeps again."""
        while not self.stopping and (pause := self.seconds_to_next_check(self.clock.now())) > 0:
            if await self.doorbell.wait(pause):
                return
