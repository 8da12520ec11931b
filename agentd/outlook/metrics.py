"""Prometheus metrics (docs/design.md, "Operations"): each service serves /metrics on its own port.

What the database knows (tasks by status, oldest pending age) is read at scrape time on the
scrape's own read connection, so both services report the same numbers and a scrape never waits
for an attempt. What happens inside a service (attempts, cost, sensor runs) is counted in that
service.

The endpoint is a small HTTP/1.1 server inside the service's event loop, not a thread per
connection: at most MAX_CONNECTIONS at once (more are closed at once), each with
CONNECTION_TIMEOUT_S to send its request and take the answer, so no client can hold the service's
threads or memory. prometheus-client does the encoding.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.to_thread

from agentd import __version__
from agentd.clock import Clock, parse_ts, stored_ts
from agentd.config import Config
from agentd.config.addresses import listen_parts
from agentd.config.budget import AdapterSpend
from agentd.errors import AgentdError
from agentd.outlook import metric_specs as specs
from agentd.outlook.backups import last_backup
from agentd.outlook.liveness import liveness
from agentd.outlook.metric_specs import Spec
from agentd.outlook.status import read_outlook
from agentd.process import procs
from agentd.process.activation import passed_socket, passed_sockets
from agentd.records import TASK_STATUSES
from agentd.store import Store, open_store
from agentd.usage import TOKEN_KINDS, believed

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.metrics_core import Metric

logger = logging.getLogger(__name__)

DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
FLEET_STATUSES = ("completed", "failed", "refused")  # agentd_fleet_reported_total{status}
CLAIM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)
MAX_CONNECTIONS = 8
CONNECTION_TIMEOUT_S = 5.0
MAX_REQUEST_BYTES = 8192


@functools.cache
def prometheus() -> ModuleType:
    """prometheus_client, imported by the first service that serves metrics: a command or a one-shot run
    that serves none never loads it (docs/decisions.md, "Start-up")."""
    import prometheus_client
    import prometheus_client.core

    # a `_created` series per counter doubles the scrape, and no query of ours reads it
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    return prometheus_client


def family(spec: Spec, value: float | None = None) -> GaugeMetricFamily:
    """A gauge read at scrape time, as its Spec says (labelled: samples are added to it)."""
    gauge = prometheus().core.GaugeMetricFamily
    if spec.labels:
        return gauge(spec.name, spec.help, labels=list(spec.labels))  # type: ignore[no-any-return]
    return gauge(spec.name, spec.help, value=value)  # type: ignore[no-any-return]


def counter(spec: Spec, registry: CollectorRegistry) -> Counter:
    return prometheus().Counter(spec.name, spec.help, list(spec.labels), registry=registry)  # type: ignore[no-any-return]


class QueueCollector:
    """Tasks by status and the oldest pending task's age, from the database at scrape time (a
    prometheus_client Collector: one `collect`)."""

    def __init__(self, db_path: Path, clock: Clock, config: Config | None = None) -> None:
        self._db_path, self._clock, self._config = db_path, clock, config
        self._store: Store | None = None
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if self._store is None:
                self._store = open_store(self._db_path, self._clock)
            seen = read_outlook(self._store, self._config, self._clock.now())
        now, summary, budget, running = seen.now, seen.summary, seen.budget, seen.running
        tasks = family(specs.TASKS)
        for status in TASK_STATUSES:
            tasks.add_metric([status], summary.counts.get(status, 0))
        yield tasks
        waiting = family(specs.TASKS_WAITING)
        for reason, count in (
            ("claimable", summary.claimable),
            ("retry_waiting", summary.retry_waiting),
            ("delayed", summary.delayed),
            ("approval", summary.approval),
            ("paused", summary.paused),
            ("after", summary.after),
            ("budget", summary.budget),
            ("resting", summary.resting),
        ):
            waiting.add_metric([reason], count)
        yield waiting
        oldest = seen.oldest_approval_at
        yield family(specs.APPROVAL_OLDEST, (now - oldest).total_seconds() if oldest else 0.0)
        held = seen.calls[0].requested_at if seen.calls else None
        yield family(specs.TOOL_CALL_OLDEST, (now - held).total_seconds() if held else 0.0)
        spent = family(specs.BUDGET_SPENT)
        if budget is not None and self._config is not None:  # every adapter, 0 until it spends
            for adapter_id in sorted(set(self._config.adapters) | set(budget.spend.by_adapter)):
                used = budget.spend.by_adapter.get(adapter_id, AdapterSpend())
                spent.add_metric([adapter_id, str(int(used.estimated))], used.total_usd)
        yield spent
        yield family(specs.BUDGET_HOLDING, int(bool(budget and budget.hold)))
        yield family(specs.PAUSED, int(seen.pause is not None))
        yield family(specs.MESSAGES_FAILED, seen.failed_messages)
        age = (now - summary.oldest_pending_at).total_seconds() if summary.oldest_pending_at else 0.0
        yield family(specs.OLDEST_PENDING, age)
        yield family(specs.RUNNING_AGE, max(((now - r.started_at).total_seconds() for r in running), default=0.0))
        yield family(specs.CHAIN_HEAD, seen.chain_head[0] if seen.chain_head else 0)
        archive = seen.archive
        yield family(specs.ARCHIVE_QUEUED, archive.length if archive else 0)
        waited = (now - archive.oldest).total_seconds() if archive and archive.oldest else 0.0
        yield family(specs.ARCHIVE_OLDEST, max(waited, 0.0))
        yield from self._backup(now)
        yield from self._services(seen.services, now)

    def _backup(self, now: datetime) -> Iterator[Metric]:
        """The last good backup's time and the schedule it should keep (the config's, else the one it was taken on)."""
        last = last_backup(self._db_path.parent, now)
        yield family(specs.BACKUP_LAST, parse_ts(last["at"]).timestamp() if last else 0.0)
        every = self._config.backup.every_s if self._config is not None else None
        yield family(specs.BACKUP_EVERY, every or (last["every_s"] if last and last["every_s"] else 0.0))

    def _services(self, rows: list[dict[str, Any]], now: datetime) -> Iterator[Metric]:
        """Each service as `agentd status` judges it: live only while the process that wrote its row
        runs and the row is fresh (so a scrape of one service tells whether the other is alive)."""
        live, quiet = family(specs.SERVICE_LIVE), family(specs.SERVICE_QUIET)
        here = procs.this_process()
        for row in rows:
            silent = (now - stored_ts(row["updated_at"])).total_seconds()
            live.add_metric([row["service"]], int(liveness(row, silent, here) == "live"))
            quiet.add_metric([row["service"]], max(silent, 0.0))
        yield live
        yield quiet

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


class Metrics:
    """One service's registry: the shared queue gauges plus that service's own counters."""

    def __init__(self, service: str, agent_id: str, db_path: Path, clock: Clock, config: Config | None = None) -> None:
        self.service = service
        prom = prometheus()
        self.registry = prom.CollectorRegistry(auto_describe=True)
        prom.Info(specs.BUILD.name, specs.BUILD.help, registry=self.registry).info(
            {"version": __version__, "agent_id": agent_id, "service": service}
        )
        self._queue = QueueCollector(db_path, clock, config)
        self.registry.register(self._queue)
        self._scrapes = anyio.CapacityLimiter(1)  # one scrape reads the database at a time
        self._open = 0
        self.url: str | None = None
        self.held: socket.socket | None = None  # bound before the service started (agentd/services/ports.py)

    async def serve(self, listen: str, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve /metrics on HOST:PORT (port 0 picks a free one), or on the socket held for it, until
        cancelled; started() gives the URL."""
        key = f"{self.service}_listen"
        try:
            host, port = listen_parts(listen)
            if self.held is not None:
                host = self.held.getsockname()[0]
            if (held := self.held or passed_socket(listen, f"metrics.{key}")) is not None:  # bound, or systemd's
                listener: anyio.abc.Listener[anyio.abc.SocketStream] = await anyio.abc.SocketListener.from_socket(held)
            else:
                listener = await anyio.create_tcp_listener(local_host=host, local_port=port, reuse_port=False)
        except (OSError, ValueError) as exc:
            raise AgentdError(
                f"metrics: cannot listen on {listen} ({exc}); change [metrics] {key} (or set [metrics] enabled = false)"
            ) from None
        bound = listener.extra(anyio.abc.SocketAttribute.local_port)
        self.url = f"http://{'[' + host + ']' if ':' in host else host}:{bound}/metrics"
        logger.info("metrics_listening service=%s url=%s", self.service, self.url)
        task_status.started(self.url)
        async with listener:
            await listener.serve(self._connection)

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            if self._open >= MAX_CONNECTIONS:
                return  # closed at once: a flood of connections costs the service nothing
            self._open += 1
            try:
                with anyio.move_on_after(CONNECTION_TIMEOUT_S):
                    await self._answer(stream)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError):
                pass  # the client went away
            finally:
                self._open -= 1

    async def _answer(self, stream: anyio.abc.SocketStream) -> None:
        request = b""
        while b"\r\n\r\n" not in request and len(request) < MAX_REQUEST_BYTES:
            request += await stream.receive(MAX_REQUEST_BYTES)
        method, path, *_ = [*request.split(b"\r\n", 1)[0].split(b" "), b"", b""]
        if method not in (b"GET", b"HEAD"):
            await stream.send(_response(405, b"only GET\n", b"text/plain"))
        elif path.split(b"?", 1)[0] not in (b"/metrics", b"/"):
            await stream.send(_response(404, b"try /metrics\n", b"text/plain"))
        else:
            prom = prometheus()
            body = await anyio.to_thread.run_sync(prom.generate_latest, self.registry, limiter=self._scrapes)
            await stream.send(_response(200, body, prom.CONTENT_TYPE_LATEST.encode(), head=method == b"HEAD"))

    def close(self) -> None:
        self._queue.close()


class DispatchMetrics(Metrics):
    def __init__(self, agent_id: str, db_path: Path, clock: Clock, config: Config | None = None) -> None:
        super().__init__("dispatch", agent_id, db_path, clock, config)
        r, prom = self.registry, prometheus()
        self.attempts = counter(specs.ATTEMPTS, r)
        spec = specs.ATTEMPT_DURATION
        self.attempt_duration = prom.Histogram(
            spec.name, spec.help, list(spec.labels), buckets=DURATION_BUCKETS, registry=r
        )
        self.cost = counter(specs.COST, r)
        self.tokens = counter(specs.TOKENS, r)
        self.schedule_tasks = counter(specs.SCHEDULE_TASKS, r)
        self.workflow_transitions = counter(specs.WORKFLOW_MOVES, r)
        self._lock_held = prom.Gauge(specs.LOCK_HELD.name, specs.LOCK_HELD.help, registry=r)
        self._last_success = prom.Gauge(specs.LAST_SUCCESS.name, specs.LAST_SUCCESS.help, registry=r)
        self._boot_sweep = counter(specs.BOOT_SWEEP, r)
        self.messages = counter(specs.MESSAGES, r)
        self._fleet: dict[str, Any] = {}  # made on the first fleet call: an agent without a fleet shows none

    def fleet(self, name: str) -> Any:
        """A fleet metric (docs/fleet.md). None has an `agent` label: the scrape job's target label
        names the agent, as on every other series (a label of ours would come back as exported_agent)."""
        if not self._fleet:
            r, prom = self.registry, prometheus()
            spec = specs.FLEET_CLAIM_SECONDS
            reported = counter(specs.FLEET_REPORTED, r)
            for status in FLEET_STATUSES:  # at 0 from the start, so increase() sees the first report
                reported.labels(status)
            self._fleet = {
                "leases": prom.Gauge(specs.FLEET_LEASES.name, specs.FLEET_LEASES.help, registry=r),
                "claimed": counter(specs.FLEET_CLAIMED, r),
                "lost": counter(specs.FLEET_LOST, r),
                "reported": reported,
                "claim_seconds": prom.Histogram(spec.name, spec.help, buckets=CLAIM_BUCKETS, registry=r),
                "reachable": prom.Gauge(specs.FLEET_REACHABLE.name, specs.FLEET_REACHABLE.help, registry=r),
            }
        return self._fleet[name]

    def fleet_leases(self, held: int) -> None:
        self.fleet("leases").set(held)

    def fleet_claimed(self, count: int, seconds: float) -> None:
        self.fleet("claim_seconds").observe(seconds)
        if count:
            self.fleet("claimed").inc(count)

    def fleet_lost(self) -> None:
        self.fleet("lost").inc()

    def fleet_reported(self, status: str) -> None:
        self.fleet("reported").labels(status).inc()

    def fleet_reachable(self, up: bool) -> None:
        self.fleet("reachable").set(int(up))

    def lock_held(self, held: bool) -> None:
        self._lock_held.set(int(held))

    def last_success(self, at: float) -> None:
        self._last_success.set(at)

    def boot_swept(self) -> None:
        self._boot_sweep.inc()

    def schedule_created(self, schedule_id: str) -> None:
        self.schedule_tasks.labels(schedule_id).inc()

    def workflow_moved(self, workflow_type: str, kind: str) -> None:
        self.workflow_transitions.labels(workflow_type, kind).inc()

    def message_counted(self, handler: str, outcome: str) -> None:
        self.messages.labels(handler, outcome).inc()

    def attempt_finished(
        self,
        adapter: str,
        outcome: str,
        exit_status: str,
        seconds: float,
        model: str | None,
        usage: dict[str, Any],
        completed_at: float | None,
    ) -> None:
        self.attempts.labels(adapter, outcome, exit_status).inc()
        self.attempt_duration.labels(adapter).observe(max(seconds, 0.0))
        model_label = model or "none"
        # Only what usage may be (agentd/usage.py): Counter.inc() raises on a negative or NaN amount, and
        # a counter must never go down or become Infinity, whatever an adapter reported.
        if cost := believed(usage.get("cost_usd"), "cost_usd"):
            self.cost.labels(adapter, model_label).inc(cost)
        for key in TOKEN_KINDS:
            if tokens := believed(usage.get(key), key):
                self.tokens.labels(adapter, model_label, key.removesuffix("_tokens")).inc(tokens)
        if completed_at is not None:
            self._last_success.set(completed_at)


class SensorMetrics(Metrics):
    def __init__(self, agent_id: str, db_path: Path, clock: Clock, config: Config | None = None) -> None:
        super().__init__("sensors", agent_id, db_path, clock, config)
        self.runs = counter(specs.SENSOR_RUNS, self.registry)
        self.events = counter(specs.SENSOR_EVENTS, self.registry)

    def sensor_run(self, sensor: str, kind: str, counts: dict[str, int]) -> None:
        """One run: its kind (ok, failed, timeout, start_failed, internal_error), and each of its events
        as created (a task or workflow), recorded (new, nothing to create), deduped, stale or rejected."""
        self.runs.labels(sensor, kind).inc()
        created = counts.get("created", 0) + counts.get("workflows_created", 0)
        by_result = {
            "created": created,
            "recorded": counts.get("recorded", 0) - created - counts.get("stale", 0),
            "deduped": counts.get("deduped", 0),
            "stale": counts.get("stale", 0),
            "rejected": counts.get("rejected", 0),
        }
        for key, value in by_result.items():
            if value > 0:
                self.events.labels(sensor, key).inc(value)


def _response(status: int, body: bytes, content_type: bytes, *, head: bool = False) -> bytes:
    reason = {200: b"OK", 404: b"Not Found", 405: b"Method Not Allowed"}[status]
    headers = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (
        status,
        reason,
        content_type,
        len(body),
    )
    return headers if head else headers + body


class NullMetrics:
    """What a service counts when `[metrics] enabled = false` (and in one-shot runs): nothing."""

    url: str | None = None

    async def serve(
        self, listen: str, *, task_status: anyio.abc.TaskStatus[str | None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        for held in passed_sockets():  # a socket unit left from when metrics were on: nothing answers it
            host, port = held.getsockname()[:2]
            logger.warning(
                "systemd passed a socket on %s:%s, but [metrics] enabled = false: nothing answers on it; run "
                "`agentd install --agent NAME` again (it removes the socket units of ports that are off)",
                host,
                port,
            )
        task_status.started(None)

    def close(self) -> None:
        pass

    def attempt_finished(self, *args: Any) -> None:
        pass

    def lock_held(self, held: bool) -> None:
        pass

    def last_success(self, at: float) -> None:
        pass

    def boot_swept(self) -> None:
        pass

    def schedule_created(self, schedule_id: str) -> None:
        pass

    def workflow_moved(self, workflow_type: str, kind: str) -> None:
        pass

    def fleet_leases(self, held: int) -> None:
        pass

    def fleet_claimed(self, count: int, seconds: float) -> None:
        pass

    def fleet_lost(self) -> None:
        pass

    def fleet_reported(self, status: str) -> None:
        pass

    def fleet_reachable(self, up: bool) -> None:
        pass

    def message_counted(self, handler: str, outcome: str) -> None:
        pass

    def sensor_run(self, sensor: str, kind: str, counts: dict[str, int]) -> None:
        pass


def dispatch_metrics(enabled: bool, config: Config, clock: Clock) -> DispatchMetrics | NullMetrics:
    return DispatchMetrics(config.agent.agent_id, config.db_path, clock, config) if enabled else NullMetrics()


def sensor_metrics(enabled: bool, config: Config, clock: Clock) -> SensorMetrics | NullMetrics:
    return SensorMetrics(config.agent.agent_id, config.db_path, clock, config) if enabled else NullMetrics()
