"""One sensor run, end to end: its process (under its timeout, in its own run group), its output
redacted, every line judged on its own, the accepted events recorded once, the run finished. And
the sensor boot sweep: runs a dead sensor service left in flight.

Every line is its own boundary: a line that is not JSON, not a SensorEvent, names another sensor,
or proposes a task `agentd task add` would refuse is rejected with its line number and does not use
up its dedupe key; the lines around it still count. A line whose key an earlier accepted line used is a
repeat before its proposal is judged (docs/sensors-and-workflows.md). Whatever a run raises inside agentd is the
run's recorded internal_error.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

import anyio
from pydantic import ValidationError

from agentd.clock import Clock
from agentd.config import Config
from agentd.config.sensors import Sensor
from agentd.edge import MAX_DEPTH, Refused, keys_once, scrub
from agentd.edge import loads as load_json
from agentd.errors import InputError, contained
from agentd.hashing import new_ulid
from agentd.outlook.metrics import NullMetrics, SensorMetrics
from agentd.process import procs
from agentd.process.containment import sensor_group, sweep_run
from agentd.process.environment import child_environment
from agentd.process.files import hand_over, make_run_dir, private_folders
from agentd.process.privilege import RunUser, owner_of, require_switch, sensor_home_base, sensor_user
from agentd.process.runner import ProcessSpec, make_dir_as, run_process
from agentd.process.wake import poke
from agentd.records import AcceptedEvent, IntakeCounts, NewTask, RejectedLine, SensorEvent, WorkflowStart
from agentd.redaction import Redactor
from agentd.store import AsyncStore, Store
from agentd.store.base import no_cycle_collection
from agentd.work.intake import admit_task, beyond_defaults
from agentd.work.workflows import judge_signal, signal_refusal, start_state

logger = logging.getLogger(__name__)

BATCH = 500  # events per transaction: bounds how long one run holds the write lock
SensorRunKind = Literal["ok", "failed", "timeout", "start_failed", "internal_error"]


@dataclass
class SensorRunReport:
    sensor_id: str
    kind: SensorRunKind
    result: str  # for people: the kind, or how it failed ("exit 3", "killed by SIGKILL")
    error: str | None = None
    counts: IntakeCounts = field(default_factory=IntakeCounts)
    accepted: list[AcceptedEvent] = field(default_factory=list)
    rejected: list[RejectedLine] = field(default_factory=list)


def parse_output(
    sensor_id: str, text: str, config: Config, now: datetime
) -> tuple[list[AcceptedEvent], list[RejectedLine]]:
    """Judge each line on its own: a SensorEvent with a valid proposal, or rejected and why. A line
    whose dedupe key an earlier accepted line of this output used is a repeat, whatever it proposes:
    its key is judged before its proposal, which is never admitted (issue #43 a; the store counts it
    deduped, as it would have)."""
    accepted, rejected = [], []
    used: set[str] = set()  # the keys of the lines accepted so far
    with no_cycle_collection():
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                accepted.append(_accept(sensor_id, number, line, config, now, used))
            except _Rejected as exc:
                rejected.append(RejectedLine(number, scrub(str(exc))))
            except Exception as exc:  # one line's problem is its own: the lines around it still count
                logger.exception("sensor %s line %d could not be judged", sensor_id, number)
                rejected.append(RejectedLine(number, scrub(f"internal_error: {type(exc).__name__}: {exc}")[:500]))
    return accepted, rejected


class _Rejected(Exception):
    pass


def _accept(sensor_id: str, number: int, line: str, config: Config, now: datetime, used: set[str]) -> AcceptedEvent:
    event = _read_at_once(sensor_id, line) or _read_carefully(sensor_id, line)
    if event.dedupe_key in used:  # a repeat: nothing it proposes would be used
        return AcceptedEvent(number, event)
    if event.freshness_deadline is not None and event.freshness_deadline < now:
        judged = AcceptedEvent(number, event, stale=True)
    else:
        task, workflow = _proposed_task(sensor_id, event, config, now), _proposed_workflow(event, config)
        judged = AcceptedEvent(number, event, task, workflow)
    used.add(event.dedupe_key)  # only once accepted: a line rejected for its proposal spends no key
    return judged


def _read_carefully(sensor_id: str, line: str) -> SensorEvent:
    """The line as a SensorEvent, or _Rejected naming what is wrong with it."""
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
        return SensorEvent.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise _Rejected(f"not a SensorEvent: {'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None


def _read_at_once(sensor_id: str, line: str) -> SensorEvent | None:
    """The common line in one pass of pydantic's own JSON parser, where that surely gives what
    _read_carefully gives; None sends the line there (which also says what is wrong with it).

    Surely: the sensor's id goes first, so an id the line gives wins (as setdefault lets it) and must
    be this one; fewer brackets than MAX_DEPTH (the careful path counts nesting from the line, the
    record from each payload); no workflow_ref (the one integer without bounds, which only the
    careful path holds to int64; a sensor may not propose one anyway); no key written twice in one
    object (edge.keys_once). Lone surrogates, NaN and integers past int64 anywhere else fail here too,
    and go there."""
    text = line.strip(" \t\r\n")  # JSON's whitespace only: json.loads refuses any other
    if not text.startswith("{") or text.count("{") + text.count("[") >= MAX_DEPTH:
        return None
    try:
        keys_once(text)  # pydantic's parser would keep the last of a key written twice
        event = SensorEvent.model_validate_json(_id_first(sensor_id) + text[1:])
    except ValueError:  # pydantic's ValidationError and edge's Refused among them
        return None
    task = event.proposed_task
    if event.sensor_id != sensor_id or (task is not None and task.workflow_ref is not None):
        return None
    return event


@functools.lru_cache(maxsize=64)
def _id_first(sensor_id: str) -> str:
    return f'{{"sensor_id":{json.dumps(sensor_id)},'


def _proposed_task(sensor_id: str, event: SensorEvent, config: Config, now: datetime) -> NewTask | None:
    if event.proposed_task is None:
        return None
    source = f"sensor:{sensor_id}:{event.dedupe_key}"
    sensor = config.sensor_definitions.get(sensor_id)
    if sensor is not None and (why := beyond_defaults(config, sensor.manifest, event.proposed_task)):
        raise _Rejected(f"proposed_task: {why}")
    try:
        return admit_task(event.proposed_task, config, now, trusted=False, source=source)
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
    refusal = signal_refusal(config.workflows[proposal.template], proposal.signal) if proposal.signal else None
    if refusal:
        raise _Rejected(f"proposed_workflow: {refusal}")
    return WorkflowStart(proposal.template, proposal.instance_key, state, proposal.context, proposal.signal)


class SensorRunner:
    """Runs one sensor at a time for the service (or `agentd sensor run`), never more than
    `max_concurrent` at once."""

    def __init__(
        self, config: Config, db: AsyncStore, clock: Clock, metrics: SensorMetrics | NullMetrics | None = None
    ) -> None:
        self.config, self.db, self.clock = config, db, clock
        # as [sensors] run_as, out of the attempts' reach (docs/install-and-deploy.md, "The boundary")
        self.user = sensor_user(config.dispatch.run_as, config.sensors.run_as)
        self.homes = SensorHomes(config, self.user)
        self.metrics = metrics or NullMetrics()
        self._limiter = anyio.CapacityLimiter(config.sensors.max_concurrent)
        me = procs.this_process()
        self.owner = {"pid": me.pid, "started": me.started, "host": me.host, "boot_id": me.boot_id}

    def check(self) -> None:
        """Refuse to run sensors (BoundaryError) unless this process can become the sensors' user and
        their homes are out of every attempt's reach: the service's start, `agentd sensor run`."""
        require_switch(self.user)
        self.homes.check()

    async def run(self, sensor: Sensor, *, dry_run: bool = False) -> SensorRunReport:
        """Run one sensor now: its process, its output judged line by line, recorded (unless dry_run).
        Whatever goes wrong inside agentd is the run's recorded internal_error; valid lines still count."""
        started = self.clock.now()
        run_id = new_ulid(self.clock)  # every process of this run is kept in its run group
        redactor = Redactor()
        if not dry_run:
            await self.db.call(Store.begin_sensor_run, sensor.sensor_id, run_id, self.owner, started)
        with contained(logger, "sensor %s: run %s failed inside agentd", sensor.sensor_id, run_id) as failed:
            spec, redactor = self._spec(sensor, run_id, await self.homes.make(sensor.sensor_id))
            report = await self._observe(sensor, spec, redactor)
            if not dry_run:  # what the run printed is recorded with the run's end, a stop or not (shielded:
                with anyio.CancelScope(shield=True):  # a stop between the two left tasks of a run never finished)
                    await self._record(sensor, report)
        if (exc := failed.error) is not None:
            error = redactor.text(scrub(f"{type(exc).__name__}: {exc}"))
            report = SensorRunReport(sensor.sensor_id, "internal_error", "internal_error", error[:2000])
        if not dry_run:
            with anyio.CancelScope(shield=True):
                await self._finish(sensor, report, started)
        return report

    async def _observe(self, sensor: Sensor, spec: ProcessSpec, redactor: Redactor) -> SensorRunReport:
        """The sensor's process, its output redacted, then judged line by line."""
        try:
            async with self._limiter:
                result = await run_process(spec)
        finally:  # a stop that cancels the run too: its output never stays on disk unredacted
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._keep_logs, redactor, spec)
        if result.start_error:
            return SensorRunReport(sensor.sensor_id, "start_failed", "start_failed", result.start_error)
        kind: SensorRunKind = "ok" if result.ok else ("timeout" if result.timed_out else "failed")
        described = result.describe() if kind == "failed" else kind
        error = None if result.ok else _tail(result.stderr.path) or described
        report = SensorRunReport(sensor.sensor_id, kind, described, error)
        report.accepted, report.rejected = await anyio.to_thread.run_sync(
            self._parse, sensor.sensor_id, result.stdout.path
        )
        return report

    async def _record(self, sensor: Sensor, report: SensorRunReport) -> None:
        for offset in range(0, max(len(report.accepted), 1), BATCH):
            batch = report.accepted[offset : offset + BATCH]
            rejected = report.rejected if offset == 0 else []
            report.counts.add(await self._record_batch(sensor.sensor_id, batch, rejected))
        if report.counts.created or report.counts.workflows_created or report.counts.workflows_signaled:
            poke(self.config.paths.state_dir)  # new work: wake the dispatcher now

    async def _record_batch(
        self, sensor_id: str, batch: list[AcceptedEvent], rejected: list[RejectedLine]
    ) -> IntakeCounts:
        """One transaction for the batch; if it fails, each event on its own, and an event that
        still fails is recorded as rejected with the reason: its neighbours are kept."""
        batch = [await self._judge_wake(sensor_id, item) for item in batch]
        with contained(logger, "sensor %s: a batch of %d events failed; one by one", sensor_id, len(batch)) as failed:
            return await self.db.call(Store.record_sensor_events, sensor_id, batch, rejected, self.clock.now())
        counts = IntakeCounts()
        for item in batch:
            with contained(None) as failed:
                counts.add(await self.db.call(Store.record_sensor_events, sensor_id, [item], [], self.clock.now()))
            if (exc := failed.error) is not None:
                reason = scrub(f"internal_error: {type(exc).__name__}: {exc}")[:500]
                rejected = [*rejected, RejectedLine(item.line, reason)]
        counts.add(await self.db.call(Store.record_sensor_events, sensor_id, [], rejected, self.clock.now()))
        return counts

    async def _judge_wake(self, sensor_id: str, item: AcceptedEvent) -> AcceptedEvent:
        """A proposal with a signal for a workflow that exists: the signal judged on the workflow as
        it is now (seed 000 §5: sensors may wake workflows); the store applies it only if the
        workflow is still there when the event is recorded."""
        start = item.workflow
        if item.stale or start is None or start.signal is None:
            return item
        found = await self.db.call(Store.find_workflow, start.workflow_type, start.instance_key)
        if found is None:
            return item  # a new workflow: it starts in its state
        workflow, entries = found
        decision = judge_signal(self.config, workflow, entries, start.signal, f"sensor:{sensor_id}", item.described)
        return replace(item, wake=decision)

    async def _finish(self, sensor: Sensor, report: SensorRunReport, started: datetime) -> None:
        next_run = started + timedelta(seconds=sensor.manifest.interval_seconds)
        counts = report.counts.as_dict()
        await self.db.call(
            Store.finish_sensor_run,
            sensor.sensor_id,
            started,
            next_run,
            report.result,
            report.error,
            counts,
            self.clock.now(),
            quiet=is_quiet(report),
        )
        self.metrics.sensor_run(sensor.sensor_id, report.kind, counts)

    def _keep_logs(self, redactor: Redactor, spec: ProcessSpec) -> None:
        """The run's logs redacted, and the services' even where an operator ran `sensor run` as root."""
        redactor.files([spec.stdout_path, spec.stderr_path])
        for log in (spec.stdout_path, spec.stderr_path):
            if log.is_file():
                hand_over(log, self.config.paths.state_dir)

    def _parse(self, sensor_id: str, stdout: Path) -> tuple[list[AcceptedEvent], list[RejectedLine]]:
        text = stdout.read_text(encoding="utf-8", errors="replace")
        return parse_output(sensor_id, text, self.config, self.clock.now())

    def _spec(self, sensor: Sensor, run_id: str, home: Path) -> tuple[ProcessSpec, Redactor]:
        """The sensor's process: as the sensors' user, its own persistent folder as HOME, its output
        logged by agentd into the state dir (where that user may not write)."""
        logs = self.config.paths.state_dir / "sensors" / sensor.sensor_id
        private_folders(logs, self.config.paths.state_dir)
        env, redactor = child_environment(
            home=home,
            env_file=sensor.env_file,
            env=sensor.manifest.env,
            agentd={
                "AGENTD_SENSOR_ID": sensor.sensor_id,
                "AGENTD_SENSOR_RUN": run_id,
                "AGENTD_SENSOR_STATE_DIR": str(home),
                "AGENTD_WORKSPACE": str(self.config.paths.workspace),
                "AGENTD_CONFIG": str(self.config.path),
            },
        )
        spec = ProcessSpec(
            argv=sensor.argv,
            cwd=sensor.directory,
            env=env,
            stdout_path=logs / "stdout.log",
            stderr_path=logs / "stderr.log",
            timeout_s=sensor.manifest.timeout_seconds or self.config.sensors.default_timeout_s,
            kill_grace_s=self.config.sensors.kill_grace_s,
            output_cap_bytes=self.config.sensors.output_cap_bytes,
            group=sensor_group(self.config.paths.state_dir, run_id),
            user=self.user,
        )
        return spec, redactor


class SensorHomes:
    """Each sensor's own persistent folder (its HOME, `AGENTD_SENSOR_STATE_DIR`), by who sensors run as:
    - the service's own user: in the state dir, 0700;
    - the attempts' user (no `[sensors] run_as`): under `[paths] run_dir`, which that user reaches, so
      an attempt reaches it too (`agentd status` says so);
    - a user of their own: in that user's home (`sensor_home_base`), made by that user, 0700, so no
      one else (the services included) may enter it."""

    def __init__(self, config: Config, user: RunUser | None) -> None:
        self.config, self.user = config, user
        self.own = user if user is not None and user.key == "sensors.run_as" else None  # not the attempts' user

    def check(self) -> None:
        """BoundaryError if sensors have a user of their own whose home would let others in."""
        if self.own is not None:
            self._base(self.own)

    async def make(self, sensor_id: str) -> Path:
        if self.own is not None:
            home = self._base(self.own) / sensor_id  # checked again each run: made by that user, in its home
            await make_dir_as(home, self.own)
            return home
        if self.user is not None:
            base = self.config.paths.runs / "sensors"
            make_run_dir(base, self.user, mode=0o750)
            make_run_dir(base / sensor_id, self.user)
            return base / sensor_id
        home = self.config.paths.state_dir / "sensors" / sensor_id / "state"
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        return home

    def _base(self, user: RunUser) -> Path:
        return sensor_home_base(user, services=owner_of(self.config.paths.state_dir))


async def sweep_sensor_runs(config: Config, db: AsyncStore, clock: Clock, user: RunUser | None) -> int:
    """The sensor boot sweep: runs recorded in flight whose service is dead are killed (as `user`, who
    sensors run as: `SensorRunner.user`) and closed (what they printed but did not record, the sensor
    prints again: sensors are idempotent)."""
    me, swept = procs.this_process(), 0
    for run in await db.call(Store.open_sensor_runs):
        owner = run.owner
        holder = procs.ProcessIdentity(
            int(owner.get("pid", 0)),
            int(owner.get("started", 0)),
            str(owner.get("host", "")),
            str(owner.get("boot_id", "")),
        )
        if procs.is_running(holder, me) is not False:
            continue  # alive, or on another host: not ours to sweep
        killed = await sweep_run(sensor_group(config.paths.state_dir, run.run_id), user)
        await db.call(Store.reclaim_sensor_run, run.sensor_id, run.run_id, len(killed), clock.now())
        swept += 1
    return swept


def is_quiet(report: SensorRunReport) -> bool:
    """A run that found nothing new and nothing wrong: an ok exit, every line a known event. It leaves
    no sensor_run_finished event (only the sensor's state and the metrics say it ran)."""
    counts = report.counts
    nothing_new = not counts.recorded and not counts.rejected and not report.rejected
    return report.kind == "ok" and not report.error and nothing_new


def _tail(path: Path, limit: int = 2000) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text[-limit:].strip() or None
