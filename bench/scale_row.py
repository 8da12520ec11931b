"""`make bench`'s "fleet at scale" row (issue 55): bench/fleet_scale.py's simulated agents at each count, one
connection per agent and pooled, once per bench run (not per repetition: a run is minutes), against a
PostgreSQL of its own at a deployment's durability; the goals judged at the largest count, and the table
docs/fleet.md ("Scale, as measured") copies."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

from bench import fleet, fleet_scale
from bench.fleet_scale import RESERVED, BrokenRun, Plan, Run
from bench.report import Goal, Samples

ROW = "fleet at scale"


@dataclass(frozen=True)
class ScaleSizes:
    agents: tuple[int, ...]  # one run per count and way of connecting
    tasks: int  # queued at each run's start
    window_s: float  # a run ends when its tasks are done or this has passed
    work_s: float  # a simulated attempt's mean length
    ramp_s: float  # every agent's first claim within this of the start; rates are measured past it
    processes: int  # the agents' processes
    pool: int  # connections per process, pooled
    max_connections: int  # the server's: room for the largest count with a connection each
    slow_work_s: float  # the largest count again with attempts this long: its connections, not its load


FULL = ScaleSizes((100, 300, 1_000), 50_000, 40.0, 0.75, 5.0, 4, 24, 1_100, 3.0)
QUICK = ScaleSizes((8,), 300, 10.0, 0.05, 0.5, 2, 2, 200, 0.2)


def plans(sizes: ScaleSizes) -> list[Plan]:
    """Each count with a connection per agent (where the server has room for them) and pooled; the largest
    also through PgBouncer, with as many server connections as the pools hold; then the largest count again
    with attempts `slow_work_s` long, so that it asks about as much of the server as the count before it
    (300 agents at 0.75 s, 1,000 at 3 s): what its connections cost, apart from its load."""
    found = []
    largest = max(sizes.agents)
    counts = [(agents, sizes.work_s) for agents in sizes.agents] + [(largest, sizes.slow_work_s)]
    for agents, work_s in counts:
        each = Plan(agents, sizes.tasks, sizes.window_s, work_s, sizes.processes, ramp_s=sizes.ramp_s)
        if agents + 1 <= sizes.max_connections - RESERVED:  # the run's monitor holds one more
            found.append(each)
        found.append(replace(each, pool=sizes.pool))
        if agents == largest:
            found.append(replace(each, bouncer=sizes.processes * sizes.pool))
    return found


def why_not(plan: Plan) -> str | None:
    """Why this plan cannot run here, or None."""
    reason = fleet.why_not()
    if reason is None and plan.bouncer and fleet.pg is not None and fleet.pg.bouncer_bin() is None:
        reason = "PgBouncer is not installed (apt-get install pgbouncer)"
    return reason


def subject(plan: Plan, what: str) -> str:
    return f"{ROW}, {plan.agents:,} agents, {plan.work_s:g} s attempts, {plan.describe()}: {what}"


def goals(sizes: ScaleSizes) -> list[Goal]:
    """Issue 55's, at the largest count, for each way of connecting."""
    found = []
    for plan in plans(sizes):
        if plan.agents != max(sizes.agents) or plan.work_s != sizes.work_s:
            continue
        at = f"{plan.agents:,} agents, {plan.describe()}"
        found += [
            Goal(f"fleet at scale, {at}: claim p99 ≤ 50 ms", subject(plan, "claim p99"), None, 50, False),
            Goal(
                f"fleet at scale, {at}: 0 duplicates (every task done once)",
                subject(plan, "done exactly once"),
                None,
                100,
                True,
            ),
            Goal(f"fleet at scale, {at}: ≥ 1,000 completions/s", subject(plan, "completions"), None, 1_000, True),
        ]
    return found


def measure(samples: Samples, sizes: ScaleSizes) -> tuple[list[Run], str]:
    """Every plan once on one PostgreSQL (tests/pg.py, durable, `max_connections` raised for the agents);
    without one, the goals' rows say why not. The runs, and the server as found."""
    runnable = []
    for plan in plans(sizes):
        reason = why_not(plan)
        if reason is None:
            runnable.append(plan)
            continue
        for what, unit in (("claim p99", "ms"), ("done exactly once", "%"), ("completions", "tasks/s")):
            samples.skip(subject(plan, what), unit, reason)
    if not runnable:
        return [], f"none ({fleet.why_not()})"
    runs = []
    assert fleet.pg is not None
    with fleet.pg.cluster(durable=True, max_connections=sizes.max_connections) as cluster:
        fleet.require_durable(cluster.dsn())
        server = fleet.describe(cluster.dsn())
        for plan in runnable:
            print(f"bench: {ROW}: {plan.agents:,} agents, {plan.describe()}", file=sys.stderr, flush=True)
            run = fleet_scale.run(cluster, plan)
            record(samples, run)
            runs.append(run)
    return runs, server


def record(samples: Samples, run: Run) -> None:
    plan = run.plan
    if run.checked.unfinished or run.checked.stale_completions:
        raise BrokenRun(f"{plan.agents} agents, {plan.describe()}: PostgreSQL holds {run.checked}")
    once = 100 * (run.completions - run.duplicates) / run.completions if run.completions else 0.0
    samples.add(subject(plan, "completions"), "tasks/s", run.per_s)
    samples.add(subject(plan, "claim p50"), "ms", run.latency_ms("claim", 0.5))
    samples.add(subject(plan, "claim p99"), "ms", run.latency_ms("claim", 0.99))
    samples.add(subject(plan, "done exactly once"), "%", once)


def table(runs: list[Run], sizes: ScaleSizes) -> list[str]:
    """One line per run: what docs/fleet.md's "Scale, as measured" shows."""
    if not runs:
        return []
    lines = [
        "## The fleet at scale (issue 55)",
        "",
        f"bench/fleet_scale.py: {sizes.tasks:,} tasks queued per run; each simulated agent claims one task, "
        f"works the attempts' time on average (0.5..1.5 of it) with a heartbeat halfway, then reports; agents are "
        f"threads in {sizes.processes} processes, starting within {sizes.ramp_s:g} s, and each run ends when its "
        f"tasks are done or after {sizes.window_s:g} s. Completions/s from the ramp's end; latencies nearest-rank "
        "over every claim that took a task (a pooled agent's wait for a connection included); CPU from /proc over "
        "the run (PostgreSQL: the postmaster and every process it started). One run each, on a machine shared "
        "with other work: the load average is in the header.",
        "",
        "| agents | attempts | connections | completions/s | claim p50 | claim p99 | heartbeat p99 | report p99 "
        "| unanswered | duplicates | tasks per agent (fairness) | PostgreSQL CPU | per completion | agents' CPU "
        "| server PSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [line(run) for run in runs]
    return [*lines, ""]


def line(run: Run) -> str:
    plan, spread = run.plan, run.per_agent
    took = run.elapsed_s
    cells = [
        f"{plan.agents:,}",
        f"{plan.work_s:g} s",
        f"{plan.describe()}: {run.clients_peak:,} of max_connections {run.max_connections:,}",
        f"{run.per_s:,.0f}",
        *(f"{run.latency_ms(verb, share):,.1f} ms" for verb, share in (("claim", 0.5), ("claim", 0.99))),
        *(f"{run.latency_ms(verb, 0.99):,.1f} ms" for verb in ("heartbeat", "finish")),
        f"{run.unanswered:,}",
        f"{run.duplicates:,}",
        f"{spread[0]}..{spread[-1]} ({run.fairness:.3f})",
        f"{100 * run.server_cpu_s / took:,.0f}% of a core",
        f"{1e6 * run.server_cpu_s / max(1, run.completions):,.0f} µs",
        f"{100 * run.agents_cpu_s / took:,.0f}% of a core",
        f"{run.server_pss_mb:,.0f} MB",
    ]
    return "| " + " | ".join(cells) + " |"
