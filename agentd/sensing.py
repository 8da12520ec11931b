"""The sensor service (`agentd sensors`): grounded work enters the queue once.

Each sensor runs when due (its schedule lives in the database), under a hard timeout that kills
its process group, with at most `max_concurrent` running; one slow or crashing sensor never
holds up the others. Every output line is judged on its own: a malformed line is rejected with
its number and the rest still count. Dedupe is UNIQUE(sensor_id, dedupe_key), in the same
transaction as the task or workflow the event creates.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from pydantic import ValidationError

from agentd import procs
from agentd.clock import Clock, age
from agentd.config import Config, passthrough_environment, read_env_file
from agentd.containment import sensor_group, sweep_run
from agentd.edge import Refused, scrub
from agentd.edge import loads as load_json
from agentd.errors import InputError, StorageError
from agentd.hashing import new_ulid
from agentd.intake import prepare_task
from agentd.metrics import SensorMetrics
from agentd.records import SensorEvent
from agentd.redaction import Redactor
from agentd.runner import ProcessSpec, run_process
from agentd.sensors import Sensor
from agentd.service import Notifier, keep_alive
from agentd.store import AcceptedEvent, AsyncStore, IntakeCounts, RejectedLine, Store, WorkflowStart
from agentd.wake import poke
from agentd.workflows import start_state

logger = logging.getLogger(__name__)

BATCH = 500  # events per transaction: bounds how long one run holds the write lock
FATAL = (StorageError,)  # ends the service (systemd restarts it); anything else is one run's failure


@dataclass
class SensorRunReport:
    sensor_id: str
    result: str  # ok | exit N | killed by SIG… | timeout | start_failed | internal_error
    error: str | None = None
    counts: IntakeCounts = field(default_factory=IntakeCounts)
    accepted: list[AcceptedEvent] = field(default_factory=list)
    rejected: list[RejectedLine] = field(default_factory=list)


def parse_output(
    sensor_id: str, text: str, config: Config, now: datetime
) -> tuple[list[AcceptedEvent], list[RejectedLine]]:
    """Judge each line on its own: a SensorEvent with a valid proposal, or rejected and why."""
    accepted, rejected = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            accepted.append(_accept(sensor_id, number, line, config, now))
        except _Rejected as exc:
            rejected.append(RejectedLine(number, scrub(str(exc))))
        except Exception as exc:  # one line's problem is its own: the lines around it still count
            logger.exception("sensor %s line %d could not be judged", sensor_id, number)
            rejected.append(RejectedLine(number, scrub(f"internal_error: {type(exc).__name__}: {exc}")[:500]))
    return accepted, rejected


class _Rejected(Exception):
    pass


def _accept(sensor_id: str, number: int, line: str, config: Config, now: datetime) -> AcceptedEvent:
    try:
        data = load_json(line, "line")
    except Refused as exc:
        raise _Rejected(str(exc).removeprefix("line: ")) from None
    if not isinstance(data, dict):
        raise _Rejected(f"expected a JSON object, found {type(data).__name__}")
    data.setdefault("sensor_id", sensor_id)
    if data["sensor_id"] != sensor_id:
        raise _Rejected(f"sensor_id {data['sensor_id']!r} is not this sensor ({sensor_id!r})")
    try:
        event = SensorEvent.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise _Rejected(f"not a SensorEvent: {'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None
    if event.freshness_deadline is not None and event.freshness_deadline < now:
        return AcceptedEvent(number, event, stale=True)
    return AcceptedEvent(
        number, event, _proposed_task(sensor_id, event, config, now), _proposed_workflow(event, config)
    )


def _proposed_task(sensor_id: str, event: SensorEvent, config: Config, now: datetime) -> Any:
    if event.proposed_task is None:
        return None
    intent = event.proposed_task.model_copy(update={"source": f"sensor:{sensor_id}:{event.dedupe_key}"})
    try:
        return prepare_task(intent, config, now, trusted=False)
    except InputError as exc:
        raise _Rejected(f"proposed_task: {exc}") from None


def _proposed_workflow(event: SensorEvent, config: Config) -> WorkflowStart | None:
    proposal = event.proposed_workflow
    if proposal is None:
        return None
    try:
        state = start_state(config.workflows, config.task_types, proposal.template, proposal.state)
    except InputError as exc:
        raise _Rejected(f"proposed_workflow: {exc}") from None
    return WorkflowStart(proposal.template, proposal.instance_key, state, proposal.context)


class SensorService:
    def __init__(
        self,
        config: Config,
        db: AsyncStore,
        *,
        clock: Clock,
        notifier: Notifier | None = None,
        metrics: SensorMetrics | None = None,
    ) -> None:
        self.config, self.db, self.clock = config, db, clock
        self.notifier = notifier or Notifier()
        self.metrics = metrics
        self.started_at = clock.now()
        self.pid = os.getpid()
        self._limiter = anyio.CapacityLimiter(config.sensors.max_concurrent)
        self._running: set[str] = set()
        self._not_before: dict[str, datetime] = {}  # a run agentd could not record: not again before
        self._stopping = False
        self._wake = anyio.Event()
        me = procs.this_process()
        self._owner = {"pid": me.pid, "started": me.started, "host": me.host, "boot_id": me.boot_id}

    @property
    def sensors(self) -> list[Sensor]:
        return [s for s in self.config.sensor_definitions.values() if s.manifest.enabled]

    async def run(self, *, once: bool = False, watch_signals: bool = True) -> None:
        """Run sensors as they fall due until SIGTERM (with once: one pass over what is due)."""
        async with anyio.create_task_group() as services:
            if watch_signals:
                services.start_soon(self._watch_signals)
            if self.metrics is not None:
                await services.start(self.metrics.serve, self.config.metrics.sensors_listen)
            await self.sweep()
            self.notifier.ready(await self.status_line())
            if not once:
                services.start_soon(keep_alive, self.notifier, self.status_line, self._report_status)
            async with anyio.create_task_group() as runs:
                while not self._stopping:
                    await self._start_due(runs, self.clock.now())
                    if once:
                        break
                    await self._sleep_until_due()
                if self._stopping:
                    runs.cancel_scope.cancel()  # every sensor is idempotent: what it printed stays recorded
            services.cancel_scope.cancel()
        await self.db.call(
            Store.report_service_status, "sensors", self.pid, "stopped", None, self.started_at, self.clock.now()
        )
        self.notifier.close()
        if self.metrics is not None:
            self.metrics.close()

    async def status_line(self) -> str:
        """What the sensor service is doing, in one line (systemd STATUS=, `agentd status`)."""
        if self._stopping:
            return "stopping"
        running = ", ".join(sorted(self._running))
        states = await self.db.call(Store.sensor_states)
        now = self.clock.now()
        upcoming = [
            states[s.sensor_id].next_run_at
            for s in self.sensors
            if s.sensor_id not in self._running and s.sensor_id in states and states[s.sensor_id].next_run_at
        ]
        soonest = min(upcoming, default=None)  # type: ignore[type-var]
        due = f", next due in {age((soonest - now).total_seconds())}" if soonest else ""
        return f"watching {len(self.sensors)} sensors" + (f"; running {running}" if running else "") + due

    async def _report_status(self, line: str) -> None:
        url = self.metrics.url if self.metrics else None
        await self.db.call(
            Store.report_service_status, "sensors", self.pid, line, url, self.started_at, self.clock.now()
        )

    @property
    def stopping(self) -> bool:
        return self._stopping

    def request_stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self.notifier.stopping("stopping")

    async def run_due(self, now: datetime) -> list[SensorRunReport]:
        """Run every due sensor now, concurrently, and wait for all of them (tests, --once)."""
        reports: list[SensorRunReport] = []
        async with anyio.create_task_group() as runs:
            await self._start_due(runs, now, reports)
        return reports

    async def _start_due(
        self, runs: anyio.abc.TaskGroup, now: datetime, reports: list[SensorRunReport] | None = None
    ) -> None:
        states = await self.db.call(Store.sensor_states)
        for sensor in self.sensors:
            state = states.get(sensor.sensor_id)
            due = state is None or state.next_run_at is None or state.next_run_at <= now
            held_back = self._not_before.get(sensor.sensor_id, now) > now
            if due and not held_back and sensor.sensor_id not in self._running:
                self._running.add(sensor.sensor_id)
                runs.start_soon(self._run_guarded, sensor, reports)

    async def _run_guarded(self, sensor: Sensor, reports: list[SensorRunReport] | None) -> None:
        try:
            report = await self.run_sensor(sensor)
            if reports is not None:
                reports.append(report)
        except FATAL:
            raise
        except Exception:  # one sensor's failure is its own; the service and the others go on
            logger.exception("sensor %s failed inside agentd", sensor.sensor_id)
            self._hold_back(sensor)
        finally:
            self._running.discard(sensor.sensor_id)
            self._wake.set()

    def _hold_back(self, sensor: Sensor) -> None:
        """A run agentd could not even record is not retried before its interval: never a hot loop."""
        interval = timedelta(seconds=sensor.manifest.interval_seconds)
        self._not_before[sensor.sensor_id] = self.clock.now() + interval

    async def run_sensor(self, sensor: Sensor, *, dry_run: bool = False) -> SensorRunReport:
        """Run one sensor now: its process, its output judged line by line, recorded (unless dry_run).
        Whatever goes wrong inside agentd is the run's recorded internal_error; valid lines still count."""
        started = self.clock.now()
        run_id = new_ulid(self.clock)  # every process of this run carries it: none outlives the run
        redactor = Redactor()
        if not dry_run:
            await self.db.call(Store.begin_sensor_run, sensor.sensor_id, run_id, self._owner, started)
        try:
            redactor = self._redactor(sensor)
            report = await self._observe(sensor, run_id, redactor)
            if not dry_run:
                await self._record(sensor, report)
        except FATAL:
            raise
        except Exception as exc:
            logger.exception("sensor %s: run %s failed inside agentd", sensor.sensor_id, run_id)
            error = redactor.text(scrub(f"{type(exc).__name__}: {exc}"))
            report = SensorRunReport(sensor.sensor_id, "internal_error", error[:2000])
        if not dry_run:
            await self._finish(sensor, report, started)
        return report

    async def _observe(self, sensor: Sensor, run_id: str, redactor: Redactor) -> SensorRunReport:
        """The sensor's process, its output redacted, then judged line by line."""
        async with self._limiter:
            result = await run_process(self._spec(sensor, run_id))
        await anyio.to_thread.run_sync(redactor.files, [result.stdout.path, result.stderr.path])
        if result.start_error:
            return SensorRunReport(sensor.sensor_id, "start_failed", result.start_error)
        outcome = "ok" if result.ok else ("timeout" if result.timed_out else result.describe())
        error = None if result.ok else _tail(result.stderr.path) or outcome
        report = SensorRunReport(sensor.sensor_id, outcome, error)
        report.accepted, report.rejected = await anyio.to_thread.run_sync(
            self._parse, sensor.sensor_id, result.stdout.path
        )
        return report

    def _redactor(self, sensor: Sensor) -> Redactor:
        return Redactor(read_env_file(sensor.env_file).values() if sensor.env_file is not None else ())

    async def _record(self, sensor: Sensor, report: SensorRunReport) -> None:
        for offset in range(0, max(len(report.accepted), 1), BATCH):
            batch = report.accepted[offset : offset + BATCH]
            rejected = report.rejected if offset == 0 else []
            report.counts.add(await self._record_batch(sensor.sensor_id, batch, rejected))
        if report.counts.created or report.counts.workflows_created:
            poke(self.config.paths.state_dir)  # new work: wake the dispatcher now

    async def _record_batch(
        self, sensor_id: str, batch: list[AcceptedEvent], rejected: list[RejectedLine]
    ) -> IntakeCounts:
        """One transaction for the batch; if it fails, each event on its own, and an event that
        still fails is recorded as rejected with the reason: its neighbours are kept."""
        try:
            return await self.db.call(Store.record_sensor_events, sensor_id, batch, rejected, self.clock.now())
        except FATAL:
            raise
        except Exception:
            logger.exception("sensor %s: a batch of %d events failed; recording them one by one", sensor_id, len(batch))
        counts = IntakeCounts()
        for item in batch:
            try:
                counts.add(await self.db.call(Store.record_sensor_events, sensor_id, [item], [], self.clock.now()))
            except FATAL:
                raise
            except Exception as exc:
                reason = scrub(f"internal_error: {type(exc).__name__}: {exc}")[:500]
                rejected = [*rejected, RejectedLine(item.line, reason)]
        counts.add(await self.db.call(Store.record_sensor_events, sensor_id, [], rejected, self.clock.now()))
        return counts

    async def _finish(self, sensor: Sensor, report: SensorRunReport, started: datetime) -> None:
        next_run = started + timedelta(seconds=sensor.manifest.interval_seconds)
        await self.db.call(
            Store.finish_sensor_run,
            sensor.sensor_id,
            started,
            next_run,
            report.result,
            report.error,
            report.counts.as_dict(),
            self.clock.now(),
        )
        if self.metrics is not None:
            self.metrics.sensor_run(sensor.sensor_id, report.result, report.counts.as_dict())

    async def sweep(self) -> None:
        """The sensor boot sweep: runs recorded in flight whose service is dead are killed and closed."""
        me = procs.this_process()
        for sensor_id, run_id, owner, _started in await self.db.call(Store.open_sensor_runs):
            holder = procs.ProcessIdentity(
                int(owner.get("pid", 0)),
                int(owner.get("started", 0)),
                str(owner.get("host", "")),
                str(owner.get("boot_id", "")),
            )
            if procs.is_running(holder, me) is not False:
                continue  # alive, or on another host: not ours to sweep
            killed = await sweep_run(sensor_group(self.config.paths.state_dir, run_id))
            await self.db.call(Store.reclaim_sensor_run, sensor_id, run_id, len(killed), self.clock.now())

    def _parse(self, sensor_id: str, stdout: Path) -> tuple[list[AcceptedEvent], list[RejectedLine]]:
        text = stdout.read_text(encoding="utf-8", errors="replace")
        return parse_output(sensor_id, text, self.config, self.clock.now())

    def _spec(self, sensor: Sensor, run_id: str) -> ProcessSpec:
        home = self.config.paths.state_dir / "sensors" / sensor.sensor_id
        (home / "state").mkdir(mode=0o700, parents=True, exist_ok=True)
        env = passthrough_environment()
        env["HOME"] = str(home / "state")
        if sensor.env_file is not None:
            env.update(read_env_file(sensor.env_file))
        env.update(sensor.manifest.env)
        env.update(
            AGENTD_SENSOR_ID=sensor.sensor_id,
            AGENTD_SENSOR_RUN=run_id,
            AGENTD_SENSOR_STATE_DIR=str(home / "state"),
            AGENTD_WORKSPACE=str(self.config.paths.workspace),
            AGENTD_CONFIG=str(self.config.path),
        )
        return ProcessSpec(
            argv=sensor.argv,
            cwd=sensor.directory,
            env=env,
            stdout_path=home / "stdout.log",
            stderr_path=home / "stderr.log",
            timeout_s=sensor.manifest.timeout_seconds or self.config.sensors.default_timeout_s,
            kill_grace_s=self.config.sensors.kill_grace_s,
            output_cap_bytes=self.config.sensors.output_cap_bytes,
            group=sensor_group(self.config.paths.state_dir, run_id),
        )

    async def _sleep_until_due(self) -> None:
        states = await self.db.call(Store.sensor_states)
        now = self.clock.now()
        waits = [
            (states[s.sensor_id].next_run_at - now).total_seconds()  # type: ignore[operator]
            for s in self.sensors
            if s.sensor_id not in self._running and s.sensor_id in states and states[s.sensor_id].next_run_at
        ]
        delay = max(min([self.config.sensors.tick_s, *waits]), 0.0)
        with anyio.move_on_after(delay):
            await self._wake.wait()
        if self._wake.is_set():
            self._wake = anyio.Event()

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                logger.info("%s received: stopping the sensors", signal.Signals(signum).name)
                self.request_stop()


def _tail(path: Any, limit: int = 2000) -> str | None:
    try:
        text: str = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text[-limit:].strip() or None


__all__ = ["SensorRunReport", "SensorService", "parse_output"]
