"""The fleet at scale (issue 55): hundreds of simulated agents on one PostgreSQL at a deployment's durability,
each looping the verbs an agent's fleet intake runs (agentd/services/fleet.py) — `FleetQueue.claim`, a
heartbeat (`renew_all`), the report (`finish`) — with a simulated attempt between, and no dispatcher around them.

Agents are threads in a few processes (a thousand interpreters would measure the machine, not the queue):
psycopg lets go of the GIL while it waits on the server, and an agent spends nearly all its life waiting.
Each agent connects one of three ways: a connection of its own (as each agent VM holds one); borrowing one
per verb from a psycopg_pool its process's agents share (N agents over M server connections: what a pooler
in front of PostgreSQL gives); or a connection of its own to PgBouncer (tests/pg.py `bouncer`). A run starts
from `tasks` queued tasks and ends when they are done or its window closes; then PostgreSQL's history is
checked (`check`): each task claimed by one live lease at a time, completed at most once and by its last
claim's token, each refused write an answer the agent saw."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import resource
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from agentd.store import fleet_connect
from agentd.store.fleet import FleetQueue
from bench.fleet import TASK_TYPE, submitted
from bench.latency import percentile

SPAWN = multiprocessing.get_context("spawn")
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
RESULT = {"status": "completed", "summary": "ok", "attempts": 1, "cost_usd": 0.0}
T = TypeVar("T")
RESERVED = 3  # PostgreSQL's superuser_reserved_connections: what max_connections keeps from clients

# What the run's monitor asks while agents work (its own connection): the tasks left, and the clients connected.
LEFT = "SELECT count(*) AS n FROM fleet_tasks WHERE status IN ('queued', 'leased')"
CLIENTS = "SELECT count(*) AS n FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"

# PostgreSQL's history after a run, each count a broken guarantee but `refused` and `expired` (docs/fleet.md, "Guards").
CHECK = """
    WITH per_task AS (
        SELECT t.id, t.status, t.lease_token,
               count(*) FILTER (WHERE e.type = 'claimed') AS claims,
               count(*) FILTER (WHERE e.type = 'lease_expired') AS expiries,
               count(*) FILTER (WHERE e.type = 'completed') AS completions,
               max(e.token) FILTER (WHERE e.type = 'claimed') AS last_claim,
               max(e.token) FILTER (WHERE e.type = 'completed') AS completed_by
        FROM fleet_tasks t LEFT JOIN fleet_events e ON e.task_id = t.id GROUP BY t.id)
    SELECT count(*) FILTER (WHERE status = 'completed') AS completed,
           count(*) FILTER (WHERE status = 'queued') AS queued,
           count(*) FILTER (WHERE status NOT IN ('completed', 'queued')) AS unfinished,
           coalesce(sum(completions - 1) FILTER (WHERE completions > 1), 0) AS duplicate_completions,
           count(*) FILTER (WHERE claims - expiries > 1) AS double_claims,
           count(*) FILTER (WHERE completions > 0
                            AND (completed_by IS DISTINCT FROM last_claim OR lease_token IS DISTINCT FROM last_claim)
                           ) AS stale_completions,
           count(*) FILTER (WHERE status = 'completed' AND completions <> 1) AS unrecorded,
           (SELECT count(*) FROM fleet_events WHERE type = 'refused') AS refused,
           coalesce(sum(expiries), 0) AS expired
    FROM per_task"""


class BrokenRun(RuntimeError):
    """A run that could not be measured (an agent raised, or PostgreSQL holds what no run may leave)."""


@dataclass(frozen=True)
class Plan:
    """One run: how many agents, how they connect, what they work through."""

    agents: int
    tasks: int
    window_s: float  # the run ends when every task is done or this has passed
    work_s: float = 0.75  # an attempt's mean length (each uniform in 0.5..1.5 of it)
    processes: int = 4
    pool: int = 0  # connections per process that its agents share; 0: one connection per agent
    bouncer: int = 0  # a connection per agent through PgBouncer with this many server connections; 0: none
    lease_s: float = 300.0  # far beyond an attempt: no lease runs out unless an agent stalls
    stall_every: int = 0  # every n-th task an agent takes, it freezes past its lease, then reports
    poll_s: float = 0.1  # an idle agent's wait before it claims again (or tries a verb the fleet did not answer)
    ramp_s: float = 5.0  # each agent's first claim comes within this of the start: [fleet] poll_s's default,
    # as every agent's next round comes within one poll after PostgreSQL restarts; measured from its end
    seed: int = 55

    @property
    def connections(self) -> int:
        """Server connections the agents hold (the monitor's one aside)."""
        return self.bouncer or (self.processes * self.pool if self.pool else self.agents)

    def describe(self) -> str:
        if self.pool:
            return f"pooled ({self.processes} × {self.pool} connections)"
        if self.bouncer:
            return f"through PgBouncer ({self.bouncer} connections, unprepared)"
        return "one connection per agent"


@dataclass
class AgentLog:
    """What one agent saw: each verb's latency, what it completed (fleet id, token) and what was refused."""

    name: str
    claim_s: list[float] = field(default_factory=list)  # claims that took a task
    empty_claims: int = 0
    heartbeat_s: list[float] = field(default_factory=list)
    finish_s: list[float] = field(default_factory=list)
    done: list[tuple[int, int, float]] = field(default_factory=list)  # fleet id, token, time.monotonic()
    refused: list[tuple[int, int]] = field(default_factory=list)
    lost_on_heartbeat: int = 0
    unanswered: list[str] = field(default_factory=list)  # each verb the fleet did not answer: why
    error: str | None = None


@dataclass(frozen=True)
class ProcessReport:
    logs: list[AgentLog]
    cpu_s: float  # the process's own CPU time over the run (all its agents)


@dataclass(frozen=True)
class Checked:
    """PostgreSQL's history after a run (CHECK)."""

    completed: int
    queued: int
    unfinished: int
    duplicate_completions: int
    double_claims: int
    stale_completions: int
    unrecorded: int
    refused: int
    expired: int


@dataclass(frozen=True)
class Run:
    """One run, measured and checked."""

    plan: Plan
    dsn: str  # the run's own database, left as the run left it
    logs: list[AgentLog]
    began: float  # time.monotonic() of the common start
    wall_s: float  # from the end of the ramp to the last completion
    elapsed_s: float  # from the common start until the agents had all stopped (the CPU times' window)
    agents_cpu_s: float
    server_cpu_s: float
    server_pss_mb: float
    clients_peak: int
    max_connections: int
    checked: Checked

    @property
    def completions(self) -> int:
        return sum(len(log.done) for log in self.logs)

    @property
    def per_s(self) -> float:
        """Completions per second once every agent had started (from the ramp's end to the last completion)."""
        steady = self.began + self.plan.ramp_s
        done = sum(1 for log in self.logs for *_, at in log.done if at >= steady)
        return done / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def unanswered(self) -> int:
        return sum(len(log.unanswered) for log in self.logs)

    def latency_ms(self, verb: str, share: float) -> float:
        values = [value for log in self.logs for value in getattr(log, f"{verb}_s")]
        return percentile(values, share) * 1e3 if values else 0.0

    @property
    def duplicates(self) -> int:
        """A task done twice by any account: two agents told their report counted, two completions in the
        history, or two live leases at once."""
        told = [fleet_id for log in self.logs for fleet_id, *_ in log.done]
        checked = self.checked
        return len(told) - len(set(told)) + checked.duplicate_completions + checked.double_claims

    @property
    def per_agent(self) -> list[int]:
        return sorted(len(log.done) for log in self.logs)

    @property
    def fairness(self) -> float:
        """Jain's index of the tasks each agent completed: 1.0 when all did as many, 1/n when one did all."""
        counts = self.per_agent
        squares = sum(n * n for n in counts)
        return sum(counts) ** 2 / (len(counts) * squares) if squares else 1.0


# --- an agent --------------------------------------------------------------------------------------


class Connections:
    """How an agent reaches the queue: a connection of its own (to PostgreSQL or PgBouncer), or one borrowed per
    verb from its process's pool."""

    def __init__(self, dsn: str, pool: Any | None, bouncer: bool = False) -> None:
        self.dsn, self.pool, self.bouncer = dsn, pool, bouncer
        self.own = None if pool is not None else self._connect()

    def _connect(self) -> FleetQueue:
        return FleetQueue(unprepared(self.dsn)) if self.bouncer else FleetQueue.open(self.dsn)

    @contextmanager
    def queue(self) -> Iterator[FleetQueue]:
        if self.own is not None:
            if self.own.broken:  # as an agent's intake does: a connection that failed is opened again
                self.own = self._connect()
            yield self.own
            return
        with self.pool.connection() as conn:
            yield FleetQueue(conn)

    def close(self) -> None:
        if self.own is not None:
            self.own.close()


def agent(log: AgentLog, reach: Connections, plan: Plan, go: threading.Event, stop: Any, rng: random.Random) -> None:
    """One agent, from the common start until the run stops: claim, an attempt with a heartbeat in its
    middle, the report. Its first claim comes within `ramp_s` of the start, idle `poll_s` after a claim that
    found nothing; a verb the fleet did not answer (FleetUnavailable: a timeout) is counted and tried again
    after `poll_s`, as an agent's next round tries it (a report again is safe: the same write twice is one)."""
    go.wait()
    time.sleep(rng.uniform(0, plan.ramp_s))
    taken = 0
    while not stop.is_set():
        started = time.perf_counter()
        leases = asked(log, plan, lambda queue: queue.claim(log.name, [TASK_TYPE], [], plan.lease_s, 1), reach)
        if leases is None:
            continue  # unanswered: it waited poll_s already
        if not leases:
            log.empty_claims += 1
            time.sleep(plan.poll_s)
            continue
        log.claim_s.append(time.perf_counter() - started)
        for lease in leases:
            taken += 1
            stalls = plan.stall_every > 0 and taken % plan.stall_every == 0
            attempt(log, reach, plan, lease.task.fleet_id, lease.token, rng.uniform(0.5, 1.5) * plan.work_s, stalls)


def asked(log: AgentLog, plan: Plan, verb: Callable[[FleetQueue], T], reach: Connections) -> T | None:
    """The verb's answer, or None when the fleet did not answer (counted in `unanswered`, after which the
    agent waits `poll_s`)."""
    try:
        with reach.queue() as queue:
            return verb(queue)
    except fleet_connect.FleetUnavailable as exc:
        log.unanswered.append(str(exc))
        time.sleep(plan.poll_s)
        return None


def attempt(
    log: AgentLog, reach: Connections, plan: Plan, fleet_id: int, token: int, work_s: float, stalls: bool
) -> None:
    """Half the attempt, a heartbeat, the other half, the report. A stalling agent (SIGSTOPped, partitioned)
    sends no heartbeat and wakes after its lease ran out: its report must be refused once another holds it."""
    time.sleep(work_s / 2)
    if stalls:
        time.sleep(plan.lease_s * 2)
    else:
        started = time.perf_counter()
        lost = asked(log, plan, lambda queue: queue.renew_all({fleet_id: token}, plan.lease_s), reach)
        log.heartbeat_s.append(time.perf_counter() - started)
        log.lost_on_heartbeat += len(lost or ())
    time.sleep(work_s / 2)
    counted = None
    while counted is None:  # told nothing, the agent reports again (docs/fleet.md, "Failure cases")
        started = time.perf_counter()
        counted = asked(log, plan, lambda queue: queue.finish(fleet_id, token, "completed", RESULT), reach)
        log.finish_s.append(time.perf_counter() - started)
    if counted:
        log.done.append((fleet_id, token, time.monotonic()))
    else:
        log.refused.append((fleet_id, token))


def guarded(log: AgentLog, *args: Any) -> None:
    """An agent whose verb raised ends with its traceback: the run is broken, not measured."""
    try:
        agent(log, *args)
    except BaseException:
        log.error = traceback.format_exc()


# --- a process of agents ---------------------------------------------------------------------------


def open_pool(dsn: str, size: int) -> Any:
    """`size` connections as fleet_connect.connect makes each (autocommit, rows as dicts, bounded waits)."""
    import psycopg.rows
    from psycopg_pool import ConnectionPool

    kwargs = {"autocommit": True, "row_factory": psycopg.rows.dict_row, **fleet_connect.BOUNDED}
    pool = ConnectionPool(dsn, min_size=size, max_size=size, kwargs=kwargs, open=True, timeout=60)
    pool.wait(timeout=120)
    return pool


def unprepared(dsn: str) -> Any:
    """A connection as fleet_connect.connect makes it, but whose statements psycopg never prepares: PgBouncer
    before 1.21 (Debian 12 has 1.18) cannot carry a prepared statement across transaction pooling's server
    connections (DuplicatePreparedStatement once a statement has run five times on one client)."""
    import psycopg.rows

    return psycopg.connect(
        dsn, autocommit=True, row_factory=psycopg.rows.dict_row, prepare_threshold=None, **fleet_connect.BOUNDED
    )


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def serve(plan: Plan, dsn: str, names: list[str], start: Any, stop: Any, pipe: Connection) -> None:
    """A process of agents: connect them all, wait for the common start, run until stopped, send back what
    each saw; the connections stay open until the parent has read the server (a backend's CPU time is
    in /proc only while it lives)."""
    pool = reaches = None
    try:
        pool = open_pool(dsn, plan.pool) if plan.pool else None
        reaches = [Connections(dsn, pool, bool(plan.bouncer)) for _ in names]
        go = threading.Event()
        logs = [AgentLog(name) for name in names]
        threads = [
            threading.Thread(target=guarded, args=(log, reach, plan, go, stop, random.Random(f"{plan.seed}{log.name}")))
            for log, reach in zip(logs, reaches, strict=True)
        ]
        for thread in threads:
            thread.daemon = True  # a process whose start broke ends with its agents still waiting on `go`
            thread.start()
        start.wait(timeout=600)
        cpu = own_cpu_s()
        go.set()
        for thread in threads:
            thread.join()
        pipe.send(ProcessReport(logs, own_cpu_s() - cpu))
    except BaseException:
        start.abort()
        pipe.send(traceback.format_exc())
    pipe.recv()  # the parent has read the server: close
    for reach in reaches or []:
        reach.close()
    if pool is not None:
        pool.close()


# --- the server, from /proc ------------------------------------------------------------------------


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()


def server_pids(postmaster: int, beside: list[int]) -> list[int]:
    """The postmaster and every process it started (backends, checkpointer, WAL writer, autovacuum), and
    those `beside` it (PgBouncer)."""
    found = [postmaster, *beside]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int(_stat(int(entry))[1]) == postmaster:
                    found.append(int(entry))
    return found


def server_cpu_s(postmaster: int, beside: list[int]) -> float:
    """CPU time of the whole server: each live process's own, and the postmaster's children's that ended
    (cutime + cstime: the postmaster reaps them), so a backend gone between two readings is still counted."""
    total = 0
    for pid in server_pids(postmaster, beside):
        with contextlib.suppress(OSError, IndexError):
            fields = _stat(pid)
            total += int(fields[11]) + int(fields[12])
            if pid == postmaster:
                total += int(fields[13]) + int(fields[14])
    return total / TICKS_PER_S


def server_pss_mb(postmaster: int, beside: list[int]) -> float:
    """The server's memory, each shared page counted once (Pss of /proc/PID/smaps_rollup)."""
    total_kb = 0
    for pid in server_pids(postmaster, beside):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
            total_kb += next((int(line.split()[1]) for line in rollup if line.startswith("Pss:")), 0)
    return total_kb / 1024


# --- a run -----------------------------------------------------------------------------------------


def run(cluster: Any, plan: Plan) -> Run:
    """`measured` with the agents through PgBouncer (tests/pg.py `bouncer`) when the plan says so."""
    if not plan.bouncer:
        return measured(cluster, plan, lambda dsn: dsn, [])
    from tests import pg

    with pg.bouncer(cluster, plan.bouncer, max_clients=plan.agents + 100) as bouncer:
        return measured(cluster, plan, bouncer.through, [bouncer.pid])


def measured(cluster: Any, plan: Plan, through: Callable[[str], str], beside: list[int]) -> Run:
    """A fresh database with `plan.tasks` queued, the agents started in `plan.processes` processes, the run
    watched until done or its window closes, then measured and checked.

    :raises BrokenRun: an agent raised, or the history breaks a guarantee the bench cannot measure past.
    """
    dsn = cluster.new_database()
    submitted(dsn, plan.tasks)
    names = [f"agent-{n:04d}" for n in range(plan.agents)]
    shares = [names[n :: plan.processes] for n in range(plan.processes)]
    start, stop = SPAWN.Barrier(plan.processes + 1), SPAWN.Event()
    pipes = [SPAWN.Pipe() for _ in shares]
    workers = [
        SPAWN.Process(target=serve, args=(plan, through(dsn), share, start, stop, child), daemon=True)
        for share, (_, child) in zip(shares, pipes, strict=True)
    ]
    for worker in workers:
        worker.start()
    postmaster = cluster.process.pid
    try:
        with contextlib.suppress(threading.BrokenBarrierError):
            start.wait(timeout=600)
        began, cpu = time.monotonic(), server_cpu_s(postmaster, beside)
        if start.broken:  # a process failed before the start: its report says why
            stop.set()
        clients, max_connections = (0, 0) if start.broken else watch(dsn, plan, began, stop)
        reports = [mine.recv() for mine, _ in pipes]
        server_cpu, pss = server_cpu_s(postmaster, beside) - cpu, server_pss_mb(postmaster, beside)
        elapsed = time.monotonic() - began
    finally:
        stop.set()
        for mine, _ in pipes:
            with contextlib.suppress(OSError):
                mine.send("close")
        for worker in workers:
            worker.join(timeout=60)
    failures = [report for report in reports if isinstance(report, str)]
    logs = [log for report in reports if not isinstance(report, str) for log in report.logs]
    failures += [log.error for log in logs if log.error]
    if failures:
        raise BrokenRun(f"{len(failures)} agents or processes failed; the first:\n{failures[0]}")
    last = max((at for log in logs for *_, at in log.done), default=began)
    agents_cpu = sum(report.cpu_s for report in reports if not isinstance(report, str))
    return Run(
        plan,
        dsn,
        logs,
        began,
        max(0.0, last - began - plan.ramp_s),
        elapsed,
        agents_cpu,
        server_cpu,
        pss,
        clients,
        max_connections,
        check(dsn),
    )


def watch(dsn: str, plan: Plan, began: float, stop: Any) -> tuple[int, int]:
    """Until every task is done or the window closes, then stop the agents: the most clients seen at once,
    and the server's max_connections."""
    peak = 0
    with fleet_connect.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT current_setting('max_connections')::int AS n")
        max_connections = cur.fetchone()["n"]
        while time.monotonic() - began < plan.window_s:
            cur.execute(CLIENTS)
            peak = max(peak, cur.fetchone()["n"])
            cur.execute(LEFT)
            if cur.fetchone()["n"] == 0:
                break
            time.sleep(0.25)
    stop.set()
    return peak, max_connections


def check(dsn: str) -> Checked:
    with fleet_connect.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(CHECK)
        return Checked(**{key: int(value) for key, value in cur.fetchone().items()})
