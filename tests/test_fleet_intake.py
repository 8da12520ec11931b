"""An agent's side of the fleet against a real PostgreSQL (tests/pg.py) and its real SQLite: intake claims
what this agent can run into its own queue, every attempt starts only once its lease is confirmed with its
token, results go back with the token, and a token the fleet no longer honours is a lease lost here."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inprocess import in_process
from rig import Rig
from support import CliResult, attempt_planner, examples

from agentd.config.settings import FleetSection
from agentd.errors import InputError
from agentd.services.dispatch import Dispatcher
from agentd.services.fleet import FleetLink
from agentd.store import Store
from agentd.store.fleet import FleetQueue
from agentd.store.fleet_rows import FleetTask, Lease

pytestmark = pytest.mark.process

CONTEXT = {"originSurface": "web", "originProductId": "console", "dispatchMode": "queued"}
ORIGIN = {"submitted_by": "alice", "dispatch_context": {**CONTEXT, "initiatedAt": "2026-11-25T00:00:00Z"}}


@pytest.fixture
def dsn_file(dsn: str, tmp_path: Path) -> Path:
    """The test's database named in a file only its owner reads, as [fleet] dsn_file wants it."""
    path = tmp_path / "fleet.dsn"
    path.write_text(dsn + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def fleet_rig(rig_factory: Callable[..., Rig], dsn_file: Path) -> Callable[..., Rig]:
    """A rig whose [fleet] points at the test's database; `labels`, `max_local` as the test says."""

    def make(**fleet: Any) -> Rig:
        def mutate(raw: dict[str, Any]) -> None:
            raw["fleet"] = {"dsn_file": str(dsn_file), "lease_s": 30, "poll_s": 1, "max_local": 5, **fleet}

        return rig_factory(mutate)

    return make


def submit(queue: FleetQueue, n: int = 1, task_type: str = "example", **fields: Any) -> list[int]:
    return [queue.submit(task_type, f"s{i}", {}, origin=ORIGIN, **fields)[0].fleet_id for i in range(n)]


@pytest.fixture
def dispatcher_of() -> Iterator[Callable[[Rig], Dispatcher]]:
    """The rig's dispatcher; its fleet connections are closed when the test ends."""
    made: list[Dispatcher] = []

    def make(rig: Rig) -> Dispatcher:
        made.append(rig.dispatcher())
        return made[-1]

    yield make
    for dispatcher in made:
        if dispatcher.fleet is not None:
            dispatcher.fleet.close()


async def claimed_here(
    fleet_rig: Callable[..., Rig], queue: FleetQueue, dispatcher_of: Callable[[Rig], Dispatcher]
) -> tuple[Rig, int, Dispatcher, FleetLink]:
    """One fleet task submitted and taken into a new agent's queue by one round of its link."""
    rig = fleet_rig()
    [fleet_id] = submit(queue)
    dispatcher = dispatcher_of(rig)
    assert dispatcher.fleet is not None
    await dispatcher.fleet.round()
    return rig, fleet_id, dispatcher, dispatcher.fleet


def lost_lease(rig: Rig, task_id: int, why: str) -> None:
    lease = rig.store.fleet_lease_of(task_id)
    assert lease is not None and lease["state"] == "lost" and why in lease["lost_reason"]


@pytest.mark.asyncio
async def test_intake_takes_what_this_agent_can_run_into_its_own_queue(
    fleet_rig: Callable[..., Rig],
    queue: FleetQueue,
    rig_cli: Callable[..., CliResult],
    dispatcher_of: Callable[[Rig], Dispatcher],
) -> None:
    rig = fleet_rig(labels=["linux"], max_local=2)
    mine = submit(queue, 3, labels=["linux"])
    gpu = submit(queue, labels=["gpu"])  # a label this agent lacks
    alien = submit(queue, task_type="not-here")  # a type this agent does not have
    await dispatcher_of(rig).fleet.round()  # type: ignore[union-attr]
    local = rig.store.list_tasks()
    assert len(local) == 2  # max_local
    assert {t.source for t in local} == {f"fleet:{mine[0]}", f"fleet:{mine[1]}"}
    for fleet_id in [mine[2], *gpu, *alien]:
        assert queue.get(fleet_id).status == "queued"
    task = local[-1]
    lease = rig.store.fleet_lease_of(task.task_id)
    assert lease is not None and lease["state"] == "held" and lease["origin"] == ORIGIN
    assert queue.get(lease["fleet_id"]).lease_token == lease["token"]
    [enqueued] = [e for e in rig.events(task.task_id) if e.type == "task_enqueued"]
    assert enqueued.payload["fleet_id"] == lease["fleet_id"] and enqueued.payload["origin"] == ORIGIN
    shown = rig_cli(rig, "task", "show", str(task.task_id))
    assert f"fleet task {lease['fleet_id']}, token {lease['token']}, lease held" in shown.out
    assert "alice via web (console, queued)" in shown.out


@pytest.mark.asyncio
async def test_a_fleet_task_runs_once_confirmed_and_its_result_goes_back_with_the_evidence(
    fleet_rig: Callable[..., Rig], queue: FleetQueue, dispatcher_of: Callable[[Rig], Dispatcher]
) -> None:
    rig, fleet_id, dispatcher, link = await claimed_here(fleet_rig, queue, dispatcher_of)
    assert await dispatcher.run_until_idle() == 1
    [task] = rig.store.list_tasks()
    assert task.status == "completed"
    assert rig.store.fleet_lease_of(task.task_id)["confirmed_at"]  # type: ignore[index]
    await link.round()  # the report
    done = queue.get(fleet_id)
    assert done.status == "completed" and done.result is not None
    [attempt] = rig.store.attempts_of(task.task_id)
    head = rig.store.chain_head()
    assert head is not None
    assert done.result["attempt_id"] == attempt.attempt_id and done.result["attempts"] == 1
    assert done.result["manifest_sha256"] == rig.store.sealed_manifests(attempt.attempt_id)[attempt.attempt_id][1]
    assert done.result["chain_head"]["sequence"] <= head[0] and done.result["agent"] == rig.config.agent.agent_id
    assert rig.store.fleet_lease_of(task.task_id)["state"] == "reported"  # type: ignore[index]
    assert [e["type"] for e in queue.events(fleet_id)] == ["submitted", "claimed", "completed"]
    await link.round()  # nothing more to say, nothing claimed again
    assert [e["type"] for e in queue.events(fleet_id)] == ["submitted", "claimed", "completed"]


def expire_and_rescue(queue: FleetQueue, fleet_id: int) -> Lease:
    """The lease runs out (the server's clock) and another agent claims the task."""
    with queue.conn.cursor() as cur:
        cur.execute("UPDATE fleet_tasks SET lease_expires_at = now() - interval '1 second' WHERE id = %s", (fleet_id,))
    [rescue] = queue.claim("rescuer", ["example"], [], lease_s=60)
    assert rescue.task.fleet_id == fleet_id
    return rescue


@pytest.mark.asyncio
async def test_a_lease_lost_before_the_attempt_means_no_attempt(
    fleet_rig: Callable[..., Rig], queue: FleetQueue, dispatcher_of: Callable[[Rig], Dispatcher]
) -> None:
    rig, fleet_id, dispatcher, link = await claimed_here(fleet_rig, queue, dispatcher_of)
    expire_and_rescue(queue, fleet_id)
    rig.clock.advance(link.confirmed_s + 1)  # the claim's confirmation runs out
    assert await dispatcher.run_until_idle() == 0  # unconfirmed: nothing started
    await link.round()  # the renewal is refused: the lease is lost
    assert await dispatcher.run_until_idle() == 0
    [task] = rig.store.list_tasks()
    assert task.status == "operator_canceled" and rig.store.attempts_of(task.task_id) == []
    lost_lease(rig, task.task_id, "renewal refused")
    assert [e.type for e in rig.events(task.task_id)][-2:] == ["fleet_lease_lost", "task_finished"]
    assert queue.get(fleet_id).status == "leased" and queue.get(fleet_id).lease_agent == "rescuer"
    assert [e["detail"]["write"] for e in queue.events(fleet_id) if e["type"] == "refused"] == ["renew"]


@pytest.mark.asyncio
async def test_a_rescuers_result_is_never_overwritten_by_the_agent_it_rescued(
    fleet_rig: Callable[..., Rig], queue: FleetQueue, dispatcher_of: Callable[[Rig], Dispatcher]
) -> None:
    rig, fleet_id, dispatcher, link = await claimed_here(fleet_rig, queue, dispatcher_of)
    assert await dispatcher.run_until_idle() == 1  # ran here, but was slow to report…
    rescue = expire_and_rescue(queue, fleet_id)
    assert queue.finish(fleet_id, rescue.token, "completed", {"summary": "the rescuer's"})
    await link.round()
    assert queue.get(fleet_id).result == {"summary": "the rescuer's"}
    [task] = rig.store.list_tasks()
    assert task.status == "completed"  # the local record stays what it was
    lost_lease(rig, task.task_id, "result refused")


@pytest.mark.asyncio
async def test_a_lease_lost_while_waiting_cancels_the_local_task(
    fleet_rig: Callable[..., Rig], queue: FleetQueue, dispatcher_of: Callable[[Rig], Dispatcher]
) -> None:
    rig = fleet_rig()
    [fleet_id] = submit(queue)
    link = dispatcher_of(rig).fleet
    assert link is not None
    await link.round()
    queue.cancel(fleet_id, by="alice")
    await link.round()
    [task] = rig.store.list_tasks()
    assert task.status == "operator_canceled" and "renewal refused" in (task.outcome.operator_summary or "")  # type: ignore[union-attr]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "broken",
    [
        "host={tmp} dbname=gone user=postgres connect_timeout=2",
        "postgresql://fleet:hunter2-Secret@[::1/fleet",  # one libpq cannot read: it was a crash, password shown
    ],
    ids=["nothing there", "not a connection string"],
)
async def test_an_unreachable_fleet_defers_fleet_work_and_local_work_goes_on(
    fleet_rig: Callable[..., Rig],
    queue: FleetQueue,
    tmp_path: Path,
    dispatcher_of: Callable[[Rig], Dispatcher],
    caplog: pytest.LogCaptureFixture,
    broken: str,
) -> None:
    rig, fleet_id, dispatcher, link = await claimed_here(fleet_rig, queue, dispatcher_of)
    assert rig.config.fleet.dsn_file is not None
    rig.config.fleet.dsn_file.write_text(broken.format(tmp=tmp_path) + "\n")
    link.close()  # the next call connects again, to nothing
    rig.clock.advance(link.confirmed_s + 1)  # the claim's confirmation runs out
    await link.step()  # it cannot be renewed: the fleet task is told it waits
    local = rig.add()
    assert await dispatcher.run_until_idle() == 1  # the local task ran; the fleet task waits
    assert rig.store.get_task_or_raise(local.task_id).status == "completed"
    fleet_task = next(t for t in rig.store.list_tasks() if t.source == f"fleet:{fleet_id}")
    assert fleet_task.status == "pending" and rig.store.attempts_of(fleet_task.task_id) == []
    assert "fleet_task_deferred" in [e.type for e in rig.events(fleet_task.task_id)]
    assert queue.get(fleet_id).status == "leased"
    [unreachable] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fleet_unreachable")]
    assert "hunter2" not in caplog.text and "fleet tasks wait, local work goes on" in unreachable


def poisoned(**changes: Any) -> Lease:
    """A claimed row as a read hands it over (agentd/store/fleet_rows.py): its JSON columns as text."""
    row = {
        "id": 7, "idempotency_key": None, "task_type": "example", "subject": "s", "payload": {}, "labels": [],
        "priority": 5, "origin": ORIGIN, "status": "leased", "lease_agent": "a", "lease_token": 3,
        "lease_expires_at": None, "claims": 1, "result": None, "created_at": None, "updated_at": None,
        "finished_at": None, **changes,
    }  # fmt: skip
    row["payload"], row["origin"] = json.dumps(row["payload"]), json.dumps(row["origin"])
    return Lease(FleetTask.of(row), 3)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    origin=JSON | st.fixed_dictionaries({"submitted_by": JSON, "dispatch_context": JSON}),
    subject=st.none() | st.text(max_size=600),
    priority=st.integers(-(2**40), 2**40),
    payload=JSON,
)
def test_whatever_a_fleet_row_holds_is_admitted_judged_or_refused_with_a_reason(
    rig: Rig, origin: Any, subject: Any, priority: int, payload: Any
) -> None:
    """Anyone with the DSN can write a row: intake admits a task only as `task add` would, and refuses
    everything else with a reason (reported failed to the fleet), never an exception of another kind."""
    link = FleetLink.__new__(FleetLink)
    link.config, link.clock = rig.config, rig.clock
    lease = poisoned(origin=origin, subject=subject, priority=priority, payload=payload)
    try:
        taken = link._admit(lease)
    except InputError as exc:
        assert str(exc)
        return
    assert 1 <= taken.new.priority <= 10 and taken.origin["dispatch_context"]["originSurface"]


@pytest.mark.asyncio
async def test_a_row_this_agent_cannot_admit_is_reported_refused_and_never_queued(
    fleet_rig: Callable[..., Rig], queue: FleetQueue, dispatcher_of: Callable[[Rig], Dispatcher]
) -> None:
    rig = fleet_rig()
    with queue.conn.cursor() as cur:  # written straight into PostgreSQL, past `fleet submit`'s judgment
        cur.execute(
            "INSERT INTO fleet_tasks (task_type, payload, origin) VALUES ('example', %s, %s) RETURNING id",
            ('{"bogus": 1}', '{"submitted_by": "x\\u0001y"}'),
        )
        fleet_id = cur.fetchone()["id"]
    await dispatcher_of(rig).fleet.round()  # type: ignore[union-attr]
    assert rig.store.list_tasks() == []
    refused = queue.get(fleet_id)
    assert refused.status == "failed" and refused.result is not None and refused.result["status"] == "refused"
    assert "cannot run it" in refused.result["summary"]


@pytest.mark.asyncio
async def test_a_repeated_report_is_the_same_write(fleet_rig: Callable[..., Rig], queue: FleetQueue) -> None:
    """The agent died after PostgreSQL took its result but before it noted so: the next report is a no-op."""
    [fleet_id] = submit(queue)
    [lease] = queue.claim("a1", ["example"], [], lease_s=60)
    assert queue.finish(fleet_id, lease.token, "completed", {"summary": "once"})
    assert queue.finish(fleet_id, lease.token, "completed", {"summary": "twice"})
    assert queue.get(fleet_id).result == {"summary": "once"}
    assert [e["type"] for e in queue.events(fleet_id)] == ["submitted", "claimed", "completed"]


@pytest.mark.asyncio
async def test_an_agent_without_a_fleet_drops_the_leases_it_held(
    fleet_rig: Callable[..., Rig],
    queue: FleetQueue,
    rig_factory: Callable[..., Rig],
    dispatcher_of: Callable[[Rig], Dispatcher],
) -> None:
    rig = fleet_rig()
    submit(queue)
    await dispatcher_of(rig).fleet.round()  # type: ignore[union-attr]
    unfleeted = dataclasses.replace(rig.config, fleet=FleetSection())  # the operator removed [fleet]
    dispatcher = Dispatcher(unfleeted, rig.db, clock=rig.clock, adapters=in_process)
    assert dispatcher.fleet is None
    await dispatcher.start()  # no one renews or confirms its leases now: each is dropped
    assert await dispatcher.run_until_idle() == 0
    await dispatcher.stop()
    [task] = rig.store.list_tasks()
    assert task.status == "operator_canceled" and rig.store.attempts_of(task.task_id) == []
    lost_lease(rig, task.task_id, "no longer has a fleet")


def test_the_fleet_metrics_count_and_leave_the_agent_to_the_scrape_target(
    fleet_rig: Callable[..., Rig], queue: FleetQueue
) -> None:
    """No `agent` label of their own: the scrape job's target label names the agent (monitoring/README.md)."""
    from agentd.outlook.metrics import DispatchMetrics

    rig = fleet_rig()
    metrics = DispatchMetrics(rig.config.agent.agent_id, rig.config.db_path, rig.clock, rig.config)
    metrics.fleet_claimed(2, 0.004)
    metrics.fleet_lost()
    metrics.fleet_leases(1)
    metrics.fleet_reachable(True)
    metrics.fleet_reported("completed")
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    for line in (
        "agentd_fleet_claimed_total 2.0",
        "agentd_fleet_lease_lost_total 1.0",
        "agentd_fleet_leases_held 1.0",
        "agentd_fleet_reachable 1.0",
        'agentd_fleet_reported_total{status="completed"} 1.0',
        'agentd_fleet_reported_total{status="refused"} 0.0',
        "agentd_fleet_claim_seconds_count 1.0",
    ):
        assert line in text.splitlines()
    metrics.close()
    assert isinstance(rig.store, Store)


@pytest.mark.asyncio
async def test_a_providers_reset_one_agent_heard_holds_every_agent_on_the_same_key(
    rig_factory: Callable[..., Rig],
    dsn_file: Path,
    tmp_path: Path,
    queue: FleetQueue,
    dispatcher_of: Callable[[Rig], Dispatcher],
) -> None:
    """docs/gateway.md, "Quotas and resets": agent A's 429 rests its credential; the fleet tells agent B, whose
    adapter reads the same key from a file of its own, and B claims nothing on it until the reset (its other
    adapters' tasks go on); a key B does not hold is none of B's business."""
    from datetime import UTC, datetime, timedelta

    from agentd.adapters.routes import key_digest
    from agentd.records import CredentialGroup, ProviderReset
    from agentd.store.resets import record_reset

    def agent(name: str, key: str) -> Rig:
        keys = tmp_path / f"{name}.env"
        keys.write_text(f"ANTHROPIC_API_KEY={key}\n")
        keys.chmod(0o600)

        def mutate(raw: dict[str, Any]) -> None:
            raw["agent"]["agent_id"] = raw["agent"]["internal_name"] = name
            raw["fleet"] = {"dsn_file": str(dsn_file), "lease_s": 30, "poll_s": 1, "max_local": 5}
            raw["adapters"].append(
                {"adapter_id": "claude", "kind": "claude-code", "command": "claude", "timeout_ms": 60_000,
                 "env_file": str(keys), "env": {"ANTHROPIC_BASE_URL": "https://api.anthropic.com"}}
            )  # fmt: skip

        return rig_factory(mutate, directory=tmp_path / name)

    heard_it, same_key, other_key = agent("agent-a", "sk-shared"), agent("agent-b", "sk-shared"), agent("c", "sk-own")
    shared = key_digest("https://api.anthropic.com", "sk-shared")
    until = datetime.now(UTC) + timedelta(seconds=40)  # the fleet judges it by its server's clock
    limit = ProviderReset(CredentialGroup("local-a", ("claude",)), until, "429 from Anthropic", shared)
    with heard_it.store.transaction():
        record_reset(heard_it.store.tx, limit, heard_it.clock.now())
    await dispatcher_of(heard_it).fleet.round()  # type: ignore[union-attr]
    assert [r[0] for r in queue.provider_resets()] == [shared]
    for rig in (same_key, other_key):
        await dispatcher_of(rig).fleet.round()  # type: ignore[union-attr]
    [told] = same_key.store.resting_credentials(same_key.clock.now())
    assert told.group.adapters == ("claude",) and told.fleet_credential == shared and "agent-a" in told.reason
    assert other_key.store.resting_credentials(other_key.clock.now()) == []
    poisoned = key_digest("https://api.anthropic.com", "sk-own")  # a row no provider would say: ten years ahead
    queue.publish_reset(poisoned, datetime.now(UTC) + timedelta(days=3650), "written by hand", "agent-a")
    await dispatcher_of(other_key).fleet.round()  # type: ignore[union-attr]
    assert other_key.store.resting_credentials(other_key.clock.now()) == []
    on_claude = same_key.add("example", requested_adapter_id="claude")
    on_script = same_key.add("example")
    root, now = same_key.config.paths.state_dir, same_key.clock.now()
    claimed = same_key.store.claim_next_task(now, "t", attempt_planner(same_key), root)
    assert claimed is not None and claimed.task.task_id == on_script.task_id  # the other adapter's work goes on
    assert on_claude.task_id != claimed.task.task_id
    assert same_key.store.claim_next_task(now, "t", attempt_planner(same_key), root) is None
