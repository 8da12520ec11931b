"""The fleet at scale's simulator (bench/fleet_scale.py, `make bench`'s "fleet at scale" row) run small against a
real PostgreSQL, so the bench cannot rot: every task done exactly once, no task held by two live leases, and
fencing respected (an agent that stalls past its lease has its late report refused; the rescuer's counts)."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

import pg
import pytest
from support import REPO, missing

sys.path.insert(0, str(REPO))

from agentd.store import fleet_connect
from agentd.store.fleet import FleetQueue
from agentd.store.fleet_connect import FleetUnavailable
from bench import fleet_scale, scale_row
from bench.fleet_scale import AgentLog, Plan

pytestmark = pytest.mark.process

TASKS = 500


def finals(dsn: str) -> dict[int, tuple[str, int | None]]:
    """Each task's status and the token it holds, as PostgreSQL has them."""
    with fleet_connect.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, status, lease_token FROM fleet_tasks")
        return {row["id"]: (row["status"], row["lease_token"]) for row in cur.fetchall()}


def refusals(dsn: str) -> set[tuple[int, int]]:
    with fleet_connect.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT task_id, token FROM fleet_events WHERE type = 'refused'")
        return {(row["task_id"], row["token"]) for row in cur.fetchall()}


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("pool", "bouncer"), [(0, 0), (3, 0), (0, 6)], ids=["a connection per agent", "pooled", "through PgBouncer"]
)
def test_simulated_agents_do_every_task_once_and_a_stalled_agents_late_report_is_refused(
    pg_cluster: Any, pool: int, bouncer: int
) -> None:
    if bouncer and pg.bouncer_bin() is None:
        missing("PGBOUNCER", "PgBouncer for the fleet at scale: apt-get install pgbouncer")
    # 20 agents in 2 processes; every 10th task an agent takes, it freezes for twice its 1 s lease.
    plan = Plan(20, TASKS, 120, 0.02, 2, pool, bouncer, lease_s=1.0, stall_every=10, ramp_s=0.1)
    run = fleet_scale.run(pg_cluster, plan)

    told = {fleet_id: token for log in run.logs for fleet_id, token, _ in log.done}
    assert run.completions == len(told) == TASKS  # no task reported counted to two agents, none left out
    held = finals(run.dsn)
    assert held == {fleet_id: ("completed", token) for fleet_id, token in told.items()}  # ended by the token told
    refused = [pair for log in run.logs for pair in log.refused]
    assert refused, "no agent stalled past its lease: the fencing was not exercised"
    for fleet_id, token in refused:  # each late report was a stale token's: another claim took the task since
        assert held[fleet_id][1] > token
    assert refusals(run.dsn) == set(refused)  # each refusal the agent saw is in the task's history, and no other

    checked = run.checked
    assert (checked.completed, checked.queued, checked.unfinished) == (TASKS, 0, 0)
    assert (checked.duplicate_completions, checked.double_claims, checked.stale_completions) == (0, 0, 0)
    assert checked.expired >= len(refused) and run.duplicates == 0 and run.unanswered == 0
    assert run.clients_peak <= plan.connections and run.server_cpu_s > 0
    if pool or bouncer:  # the agents shared their processes' pools, or PgBouncer's: no more server connections
        assert run.clients_peak <= plan.connections < plan.agents


@pytest.mark.timeout(120)
def test_a_run_without_a_stall_refuses_nothing_and_lets_no_lease_run_out(pg_cluster: Any) -> None:
    run = fleet_scale.run(pg_cluster, Plan(8, 200, window_s=60, work_s=0.01, processes=2, pool=2, ramp_s=0.1))
    assert run.completions == 200 and run.duplicates == 0
    assert (run.checked.refused, run.checked.expired) == (0, 0)
    assert sum(len(log.claim_s) for log in run.logs) == 200 and run.latency_ms("claim", 0.99) > 0


def test_fairness_is_one_when_agents_did_alike_and_one_over_n_when_one_did_all() -> None:
    def did(*counts: int) -> fleet_scale.Run:
        logs = [AgentLog(f"a{n}", done=[(n * 100 + i, 1, 0.0) for i in range(k)]) for n, k in enumerate(counts)]
        checked = fleet_scale.Checked(sum(counts), 0, 0, 0, 0, 0, 0, 0, 0)
        return fleet_scale.Run(Plan(len(counts), sum(counts), 1.0), "", logs, 0.0, 1.0, 1.0, 0, 0, 0, 0, 0, checked)

    assert did(5, 5, 5, 5).fairness == 1.0
    assert did(20, 0, 0, 0).fairness == 0.25
    assert did(20, 0, 0, 0).per_agent == [0, 0, 0, 20]
    assert did(3, 3).duplicates == 0


@pytest.mark.timeout(120)
def test_an_agent_with_a_connection_of_its_own_is_refused_past_the_unreserved_connections() -> None:
    """Where one connection per agent stops (bench/scale_row.py plans by it; docs/fleet.md, "Scale, as measured"):
    an agent that is not a superuser gets max_connections less superuser_reserved_connections, the next is refused."""
    pg.require()
    with pg.cluster(max_connections=10) as small:
        with fleet_connect.connect(small.dsn()) as conn:
            conn.execute("CREATE ROLE agent LOGIN")
        held: list[FleetQueue] = []
        try:
            with pytest.raises(FleetUnavailable, match="remaining connection slots are reserved"):
                while len(held) <= 10:
                    held.append(FleetQueue.open(f"{small.dsn()} user=agent"))
            assert len(held) == 10 - fleet_scale.RESERVED
        finally:
            for queue in held:
                queue.close()


def test_the_bench_row_gives_each_agent_a_connection_only_where_the_server_has_room_for_them() -> None:
    sizes = replace(scale_row.FULL, agents=(100, 300, 1_000), max_connections=400)  # 397 unreserved
    planned = [(plan.agents, plan.describe().split(" (")[0]) for plan in scale_row.plans(sizes)]
    own, pooled, bounced = "one connection per agent", "pooled", "through PgBouncer"
    assert planned == [
        (100, own), (100, pooled), (300, own), (300, pooled),
        (1_000, pooled), (1_000, bounced), (1_000, pooled), (1_000, bounced),  # 0.75 s attempts, then 3 s
    ]  # fmt: skip
    assert [plan.work_s for plan in scale_row.plans(sizes)][-2:] == [sizes.slow_work_s] * 2
    titles = [goal.title for goal in scale_row.goals(sizes)]
    assert len(titles) == 6 and all(title.startswith("fleet at scale, 1,000 agents, ") for title in titles)
