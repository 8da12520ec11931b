"""The fleet row (issue #25): claimer processes drawing from one PostgreSQL through agentd's own
FleetQueue, each looping claim → finish(completed) until a claim finds nothing. Rate = completions ÷
the wall time from their common start to the last one's stop; every drain is checked before it counts
(each task completed exactly once, each with a token of its own, no write refused, no lease expired).

Processes, not threads: each agent of a fleet is an interpreter of its own, so threads sharing one
GIL would add a contention no fleet has (psycopg releases the GIL while it waits, not while it builds
a query or reads a row). The processes start once per run; each drain gets a fresh database.
PostgreSQL is tests/pg.py's cluster, started as the tests start it but with a deployment's commit settings
(fsync=on, synchronous_commit=on: issue #43; the tests' fsync=off is no deployment's), checked before any drain."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import resource
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from agentd.store import fleet, fleet_connect

try:  # the cluster helper the tests use (importable from a checkout: bench/ runs from one)
    from tests import pg
except ImportError:  # pragma: no cover - a bench without the repo's tests/
    pg = None  # type: ignore[assignment]

TASK_TYPE = "example"
LEASE_S = 300.0  # far beyond a drain: no lease may expire, so any refusal is a bug, not a rescue
RESULT = {"status": "completed", "summary": "ok", "attempts": 1, "cost_usd": 0.0}
SPAWN = multiprocessing.get_context("spawn")  # fresh interpreters: nothing of this one's state forked
TICKS_PER_S = os.sysconf("SC_CLK_TCK")

# The tasks every drain starts from, written in one statement (the rows and `submitted` events
# `fleet submit` writes, without its per-task round trips: the row times the claims, not the intake).
SUBMITTED = """
    WITH made AS (
        INSERT INTO fleet_tasks (task_type, subject, payload, priority, origin)
        SELECT %(type)s, 't' || n, jsonb_build_object('n', n), 1 + n %% 10, '{"submitted_by": "bench"}'
        FROM generate_series(0, %(count)s - 1) AS n
        RETURNING id)
    INSERT INTO fleet_events (task_id, type, detail) SELECT id, 'submitted', '{"by": "bench"}' FROM made ORDER BY id"""
SERVER = """
    SELECT split_part(version(), ' on ', 1) AS version,
           (SELECT string_agg(name || '=' || setting, ', ' ORDER BY name) FROM pg_settings
            WHERE name IN ('fsync', 'synchronous_commit', 'shared_buffers', 'max_connections')) AS settings"""
DURABILITY = "SELECT current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS synchronous_commit"
CHECKED = """
    SELECT (SELECT count(*) FROM fleet_tasks WHERE status = 'completed') AS completed,
           (SELECT count(*) FROM fleet_tasks) AS tasks,
           (SELECT count(DISTINCT lease_token) FROM fleet_tasks WHERE status = 'completed') AS tokens,
           (SELECT jsonb_object_agg(type, jsonb_build_array(n, tasks)) FROM (
                SELECT type, count(*) AS n, count(DISTINCT task_id) AS tasks FROM fleet_events GROUP BY type) AS e
           ) AS events"""


class BrokenDrain(RuntimeError):
    """A drain whose checks failed: its number means nothing (and a guarantee of the queue broke)."""


def why_not() -> str | None:
    """Why the fleet row cannot run here (the report names it), or None."""
    if not fleet_connect.installed():
        return "psycopg is not installed (the `fleet` extra)"
    if pg is None:
        return "tests/pg.py (the PostgreSQL the tests start) is not importable"
    return pg.why_not()


@dataclass(frozen=True)
class Report:
    """One claimer's drain."""

    done: list[int]  # fleet ids it completed
    refused: int  # finish calls that returned False
    started: float  # time.monotonic() (one clock for every process on Linux)
    stopped: float
    cpu_s: float  # the claimer's own CPU time over the drain
    server_cpu_s: float  # its PostgreSQL backend's


@dataclass(frozen=True)
class Drained:
    """One drain: completions per second of wall time, and the CPU each completion cost."""

    per_s: float
    claimer_us: float  # the claimers' CPU time per completion
    server_us: float  # their backends' CPU time per completion


def backend_cpu_s(pid: int) -> float:
    """utime + stime of a PostgreSQL backend (another user's process: /proc/PID/stat is readable)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def drain(dsn: str, agent: str, limit: int, start: Any) -> Report:
    """One agent: connect, wait for the others, then claim → finish until a claim finds nothing."""
    queue = fleet.FleetQueue.open(dsn)
    backend = queue.conn.info.backend_pid
    done: list[int] = []
    refused = 0
    start.wait(timeout=120)
    started, cpu, server_cpu = time.monotonic(), own_cpu_s(), backend_cpu_s(backend)
    while leases := queue.claim(agent, [TASK_TYPE], [], LEASE_S, limit):
        for lease in leases:
            if queue.finish(lease.task.fleet_id, lease.token, "completed", RESULT):
                done.append(lease.task.fleet_id)
            else:
                refused += 1
    stopped = time.monotonic()
    report = Report(done, refused, started, stopped, own_cpu_s() - cpu, backend_cpu_s(backend) - server_cpu)
    queue.close()
    return report


def serve(jobs: Connection, start: Any) -> None:
    """A claimer process: one drain per job (dsn, agent, limit) until told None; a failure goes back
    as its traceback, and breaks the start so that no one waits for it."""
    while (job := jobs.recv()) is not None:
        try:
            jobs.send(drain(*job, start))
        except BaseException:
            start.abort()
            jobs.send(traceback.format_exc())


class Claimers:
    """`count` claimer processes, started once (an interpreter's start-up is no part of a claim)."""

    def __init__(self, count: int) -> None:
        self.start = SPAWN.Barrier(count + 1)
        self.pipes = [SPAWN.Pipe() for _ in range(count)]
        self.workers = [SPAWN.Process(target=serve, args=(child, self.start), daemon=True) for _, child in self.pipes]
        for worker in self.workers:
            worker.start()

    def drain(self, dsn: str, limit: int) -> list[Report]:
        """Every claimer drains `dsn` from one common start."""
        for n, (mine, _) in enumerate(self.pipes):
            mine.send((dsn, f"bench-{n}", limit))
        # Every claimer connected (the first drain also waits for their imports); a broken start is a
        # claimer that failed before it, and its report says why.
        with contextlib.suppress(threading.BrokenBarrierError):
            self.start.wait(timeout=300)
        reports = [mine.recv() for mine, _ in self.pipes]
        failures = sorted((report for report in reports if isinstance(report, str)), key=_bystander)
        if failures:
            raise BrokenDrain("a claimer failed:\n" + failures[0])
        return reports

    def close(self) -> None:
        for mine, _ in self.pipes:
            mine.send(None)
        for worker in self.workers:
            worker.join(timeout=30)


def _bystander(failure: str) -> bool:
    """Those who only saw the start break sort after the one that broke it."""
    return "BrokenBarrierError" in failure


@dataclass
class Rig:
    """One PostgreSQL and the claimers, for a whole run."""

    cluster: Any
    claimers: Claimers

    def describe(self) -> str:
        return describe(self.cluster.dsn())

    def require_durable(self) -> None:
        require_durable(self.cluster.dsn())

    def claim_complete(self, count: int, limit: int) -> Drained:
        """Completions/s over `count` queued tasks in a fresh database, checked before it counts."""
        self.require_durable()
        dsn = self.cluster.new_database()
        ids = submitted(dsn, count)
        reports = self.claimers.drain(dsn, limit)
        done = sorted(fleet_id for report in reports for fleet_id in report.done)
        refused = sum(report.refused for report in reports)
        if refused or done != ids:
            raise BrokenDrain(f"{refused} writes refused; {len(done)} completions of {len(ids)} tasks, "
                              f"{len(set(done))} distinct")  # fmt: skip
        check_database(dsn, count)
        wall = max(report.stopped for report in reports) - min(report.started for report in reports)
        return Drained(
            per_s=count / wall,
            claimer_us=sum(report.cpu_s for report in reports) / count * 1e6,
            server_us=sum(report.server_cpu_s for report in reports) / count * 1e6,
        )


def describe(dsn: str) -> str:
    """The server as the row found it: its version and the settings that bear on a commit."""
    with fleet_connect.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(SERVER)
        found = cur.fetchone()
    return f"{found['version']}; {found['settings']}"


def require_durable(dsn: str) -> None:
    """The row is only meaningful at a deployment's durability: refuse a server that is not."""
    with fleet_connect.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(DURABILITY)
        found = cur.fetchone()
    if (found["fsync"], found["synchronous_commit"]) != ("on", "on"):
        raise BrokenDrain(f"the fleet row needs fsync=on and synchronous_commit=on; the server has {found}")


@contextmanager
def rig(claimers: int) -> Iterator[Rig]:
    """A PostgreSQL (tests/pg.py) and `claimers` processes, until the block ends."""
    assert pg is not None
    with pg.cluster(durable=True) as cluster:
        started = Claimers(claimers)
        try:
            yield Rig(cluster, started)
        finally:
            started.close()


def submitted(dsn: str, count: int) -> list[int]:
    """The schema migrated, `count` queued tasks (priorities 1..10 in turn), ANALYZEd: their ids."""
    queue = fleet.FleetQueue.open(dsn)
    try:
        queue.migrate()
        with queue.conn.cursor() as cur:
            cur.execute(SUBMITTED, {"type": TASK_TYPE, "count": count})
            cur.execute("ANALYZE")
            cur.execute("SELECT id FROM fleet_tasks ORDER BY id")
            return [row["id"] for row in cur.fetchall()]
    finally:
        queue.close()


def check_database(dsn: str, count: int) -> None:
    """What PostgreSQL holds after a drain: every task completed, each with a token of its own, and
    in the history exactly one submitted, claimed and completed event per task and nothing else (no
    refusal, no expired lease)."""
    queue = fleet.FleetQueue.open(dsn)
    try:
        with queue.conn.cursor() as cur:
            cur.execute(CHECKED)
            found = cur.fetchone()
    finally:
        queue.close()
    events = {kind: [count, count] for kind in ("submitted", "claimed", "completed")}
    if (found["completed"], found["tasks"], found["tokens"], found["events"]) != (count, count, count, events):
        raise BrokenDrain(f"after a drain of {count} tasks PostgreSQL holds {found}; expected events {events}")
