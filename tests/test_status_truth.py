"""Every number `status`, metrics and exports show is true (issue 21, findings 2, 3, 4, 5 and 7).

Held tasks are not claimable; the service row never contradicts the attempt rows; a message that failed
for good is seen; a task's stored outcome says the task's status; held tasks export as held."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inprocess import InProcessAdapter
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rig import Rig
from support import budgeted, examples, outcome_disagreements, waiting

from agentd.adapters import AdapterRun
from agentd.attempt.prepare import plan_attempt
from agentd.clock import format_ts
from agentd.config.budget import AdapterSpend, Spend, budget_hold, day_start
from agentd.config.settings import BudgetSection
from agentd.outlook.metrics import DispatchMetrics
from agentd.outlook.status import snapshot
from agentd.records import TERMINAL_STATUSES, CredentialGroup, ProviderReset, TaskIntent, TaskOutcome, TaskRecord
from agentd.services.dispatch import Dispatcher
from agentd.store.resets import record_reset
from agentd.work.intake import admit_task

REASONS = ("claimable", "retry_waiting", "delayed", "approval", "paused", "after", "budget", "resting")


def add_held(rig: Rig, task_type: str = "example", **fields: object) -> TaskRecord:
    """A task held for an operator's approval before its first claim (`task add --require-approval`)."""
    intent = TaskIntent.model_validate({"task_type": task_type, "source": "test", "payload": {}, **fields})
    new = admit_task(intent, rig.config, rig.clock.now(), trusted=True, require_approval=True)
    return rig.store.enqueue_task(new, rig.clock.now())


def gauge(rig: Rig, name: str, config: Any = None, **labels: str) -> float:
    metrics = DispatchMetrics(rig.config.agent.agent_id, rig.config.db_path, rig.clock, config or rig.config)
    try:
        text = generate_latest(metrics.registry).decode()
    finally:
        metrics.close()
    found = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert found, f"{name}{labels} is not exported"
    return sum(found)


# --- 2. held tasks are not claimable ------------------------------------------------------------


def test_a_task_held_for_approval_is_not_claimable_nor_its_age_the_oldest_claimable(rig: Rig, rig_cli: Any) -> None:
    add_held(rig)
    rig.clock.advance(3 * 3600)
    shown = snapshot(rig.config, rig.store, rig.clock.now())
    assert shown["waiting"] == waiting(approval=1)
    assert shown["oldest_pending_age_s"] is None
    assert gauge(rig, "agentd_oldest_pending_task_age_seconds") == 0, "AgentdQueueStuck would fire for it"
    assert gauge(rig, "agentd_tasks_waiting", reason="claimable") == 0
    assert gauge(rig, "agentd_tasks_waiting", reason="approval") == 1
    assert gauge(rig, "agentd_approval_oldest_age_seconds") == 3 * 3600


def test_a_task_held_for_the_budget_is_not_claimable_nor_its_age_the_oldest_claimable(
    rig_factory: Callable[..., Rig],
) -> None:
    rig = rig_factory(budgeted(daily_usd=1, urgent_priority=1))
    rig.store._conn.execute(  # an attempt of today that spent the whole day's budget
        """INSERT INTO task_attempts (attempt_id, task_id, attempt_number, adapter_id, adapter_kind, runner_id,
               started_at, ended_at, cost_usd) VALUES ('a', ?, 1, 'script', 'script', 'r', ?, ?, 2.0)""",
        (rig.add("example").task_id, "2026-11-22T09:00:00.000000Z", "2026-11-22T09:30:00.000000Z"),
    )
    rig.store._conn.execute("UPDATE tasks SET status = 'completed'")
    rig.add("example", priority=5)
    rig.clock.advance(3600)
    shown = snapshot(rig.config, rig.store, rig.clock.now())
    assert shown["waiting"] == waiting(budget=1)
    assert shown["oldest_pending_age_s"] is None
    assert gauge(rig, "agentd_oldest_pending_task_age_seconds") == 0
    assert gauge(rig, "agentd_tasks_waiting", reason="claimable") == 0


def test_status_text_does_not_call_a_held_task_claimable(rig: Rig, rig_cli: Any) -> None:
    add_held(rig)
    out = rig_cli(rig, "status").out
    assert "waiting  0 claimable now, 0 waiting to retry, 0 delayed, 1 waiting for approval" in out, out
    assert "oldest claimable task: none" in out


TASK_MIX = st.lists(
    st.fixed_dictionaries(
        {
            "task_type": st.sampled_from(["example", "scripted", "flaky"]),
            "adapter": st.sampled_from([None, "script", "scripted", "fails"]),
            "priority": st.integers(1, 10),
            "status": st.sampled_from(["pending", "retryable_failure"]),
            "due_in_s": st.sampled_from([-600, -1, 0, 1, 600]),
            "held": st.booleans(),
            "paused": st.booleans(),
            "after": st.sampled_from([None, "completed", "operator_canceled"]),  # a task it is linked after
        }
    ),
    max_size=14,
)
HOLDS = st.one_of(
    st.none(),
    st.tuples(st.just("everything"), st.integers(1, 10)),
    st.tuples(st.sets(st.sampled_from(["script", "scripted", "fails"]), min_size=1), st.integers(1, 10)),
)


# A credential resting until its provider's reset (docs/gateway.md): its adapters, and whether the reset is ahead.
RESETS = st.one_of(
    st.none(), st.tuples(st.sets(st.sampled_from(["script", "scripted", "fails"]), min_size=1), st.booleans())
)


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tasks=TASK_MIX, hold_spec=HOLDS, reset_spec=RESETS)
def test_the_waiting_reasons_partition_the_waiting_tasks_and_claimable_is_what_the_claim_takes(
    rig: Rig, tasks: list[dict[str, Any]], hold_spec: tuple[Any, int] | None, reset_spec: tuple[Any, bool] | None
) -> None:
    """For any mix of tasks, approvals, delays, retries, pauses, links, budget holds and provider resets: each
    waiting task has one reason; the reasons sum to pending + retryable_failure; `claimable` is how many tasks
    repeated claims take (a paused task, one after a task that did not complete, or one on a credential waiting
    for its provider's reset is never taken), and the oldest claimable age is the oldest of those."""
    rig.store._conn.execute(
        "UPDATE tasks SET status = 'operator_canceled', awaiting_approval = 0"
    )  # the last example's
    rig.store._conn.execute("UPDATE approvals SET status = 'rejected'")
    rig.store._conn.execute("DELETE FROM task_pauses")
    rig.store._conn.execute("DELETE FROM task_links")
    rig.store._conn.execute("DELETE FROM provider_resets")
    config, hold = _budget(rig, hold_spec)
    now = rig.clock.now()
    resting = _resting(rig, config, reset_spec, now)
    steered: set[int] = set()
    for spec in tasks:
        add = functools.partial(add_held, rig) if spec["held"] else rig.add
        task = add(spec["task_type"], requested_adapter_id=spec["adapter"], priority=spec["priority"])
        at = (now + timedelta(seconds=spec["due_in_s"])).isoformat().replace("+00:00", "Z")
        rig.store._conn.execute(
            "UPDATE tasks SET status = ?, available_at = ? WHERE id = ?", (spec["status"], at, task.task_id)
        )
        if spec["paused"] or spec["after"] == "operator_canceled":
            steered.add(task.task_id)
        if spec["paused"]:
            rig.store.pause_task(task.task_id, "test", None, now)
        if spec["after"] is not None:
            before = rig.add("example")
            rig.store._conn.execute("UPDATE tasks SET status = ? WHERE id = ?", (spec["after"], before.task_id))
            rig.store.link_tasks(task.task_id, before.task_id, "test", now)
    shown = snapshot(config, rig.store, now)
    waiting = shown["waiting"]
    assert set(waiting) == set(REASONS)
    assert sum(waiting.values()) == shown["counts"]["pending"] + shown["counts"]["retryable_failure"] == len(tasks)
    assert waiting["approval"] == sum(t["held"] for t in tasks)
    assert gauge_values(rig, config) == waiting, "the gauges say what status says"
    plan = functools.partial(plan_attempt, config)
    taken: list[TaskRecord] = []
    while claim := rig.store.claim_next_task(now, "test", plan, rig.config.paths.state_dir / "attempts", hold):
        taken.append(claim.task)
    assert waiting["claimable"] == len(taken)
    assert not {t.task_id for t in taken} & steered, "a paused task, or one after a task that did not complete"
    assert not [t for t in taken if plan(t).adapter_id in resting], "a task on a credential waiting for its reset"
    oldest = min((t.available_at for t in taken), default=None)
    assert shown["oldest_pending_age_s"] == ((now - oldest).total_seconds() if oldest else None)


def _resting(rig: Rig, config: Any, reset_spec: tuple[Any, bool] | None, now: datetime) -> set[str]:
    """The adapters whose credential waits for its provider's reset now, recorded as an outcome commit would."""
    if reset_spec is None:
        return set()
    adapters, ahead = reset_spec
    types = [t for t, spec in config.task_types.items() if spec.default_adapter_id in adapters]
    open_types = [t for t, spec in config.task_types.items() if spec.default_adapter_id is None]
    profiles = [p for p, profile in config.profiles.items() if profile.default_adapter_id in adapters]
    group = CredentialGroup("test-credential", tuple(adapters), tuple(types), tuple(open_types), tuple(profiles))
    until = now + timedelta(seconds=40 if ahead else -1)
    with rig.store.transaction():
        record_reset(rig.store.tx, ProviderReset(group, until, "429: rate limited"), now)
    return set(adapters) if ahead else set()


def _budget(rig: Rig, hold_spec: tuple[Any, int] | None) -> tuple[Any, Any]:
    """A config whose [budget] is spent as `hold_spec` says, and the hold the claim gets from it."""
    if hold_spec is None:
        return rig.config, None
    held, urgent = hold_spec
    if held == "everything":
        budget = BudgetSection(daily_usd=1, urgent_priority=urgent)
        spend = Spend(rig.clock.now(), {"script": AdapterSpend(2.0, 2.0)})
    else:
        budget = BudgetSection(adapter_daily_usd=dict.fromkeys(held, 0.5), urgent_priority=urgent)
        spend = Spend(rig.clock.now(), {a: AdapterSpend(0.5, 0.5) for a in held})
    config = replace(rig.config, budget=budget)
    rig.store._conn.execute("UPDATE task_attempts SET cost_usd = NULL")  # the last example's spend
    for adapter_id, used in spend.by_adapter.items():
        spent(rig, adapter_id, used.total_usd)
    hold = budget_hold(config, rig.store.spend_since(day_start(rig.clock.now())), rig.clock.now())
    assert hold is not None
    return config, hold


def spent(rig: Rig, adapter_id: str, usd: float) -> None:
    """An attempt of today's that cost `usd` on `adapter_id` (of a task long finished)."""
    task = rig.add("example")
    at = format_ts(rig.clock.now())
    rig.store._conn.execute("UPDATE tasks SET status = 'completed' WHERE id = ?", (task.task_id,))
    rig.store._conn.execute(
        """INSERT INTO task_attempts (attempt_id, task_id, attempt_number, adapter_id, adapter_kind, runner_id,
               started_at, ended_at, cost_usd) VALUES (?, ?, 1, ?, 'script', 'r', ?, ?, ?)""",
        (f"spent-{task.task_id}", task.task_id, adapter_id, at, at, usd),
    )


def gauge_values(rig: Rig, config: Any) -> dict[str, float]:
    return {reason: gauge(rig, "agentd_tasks_waiting", config, reason=reason) for reason in REASONS}


# --- 3. the dispatcher's service row changes when its state does, not at its next refresh ---------


def dispatch_row(rig: Rig) -> dict[str, Any] | None:
    return next((row for row in rig.store.service_statuses() if row["service"] == "dispatch"), None)


class PeekingAdapter(InProcessAdapter):
    """The in-process adapter, noting what `agentd status` would read from the service row while it runs."""

    def __init__(self, adapter_id: str, rig: Rig, seen: list[str | None]) -> None:
        super().__init__(adapter_id)
        self.rig, self.seen = rig, seen

    async def execute(self, ctx: Any, on_started: Any) -> Any:
        row = dispatch_row(self.rig)
        self.seen.append(row["status"] if row else None)
        return await super().execute(ctx, on_started)


@pytest.mark.asyncio
async def test_the_service_row_says_running_while_an_attempt_runs_and_not_after_it_ends(rig: Rig) -> None:
    seen: list[str | None] = []
    dispatcher = Dispatcher(
        rig.config, rig.db, clock=rig.clock, adapters=lambda config: PeekingAdapter(config.adapter_id, rig, seen)
    )
    await dispatcher.start()  # no status refresh runs: only the boundaries write the row
    first, second = rig.add("example"), rig.add("flaky")
    assert await dispatcher.run_until_idle() == 2
    assert [line and line.split(" (")[0] for line in seen] == [
        f"running task {first.task_id}",
        f"running task {second.task_id}",
    ]
    row = dispatch_row(rig)
    assert row is not None and row["status"].startswith("idle"), row


@pytest.mark.asyncio
async def test_the_service_row_says_paused_and_resumed_and_held_by_the_budget_at_once(
    rig_factory: Callable[..., Rig],
) -> None:
    rig = rig_factory(budgeted(daily_usd=1, urgent_priority=1))
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    rig.store.pause_dispatch("op", "maintenance", rig.clock.now())
    assert not await dispatcher.tick(rig.clock.now())
    assert dispatch_row(rig)["status"].startswith("paused since") and "maintenance" in dispatch_row(rig)["status"]
    rig.store.resume_dispatch("op", rig.clock.now())
    assert not await dispatcher.tick(rig.clock.now())
    assert dispatch_row(rig)["status"].startswith("idle")
    spent(rig, "script", 2.0)
    rig.add("example", priority=5)
    assert not await dispatcher.tick(rig.clock.now())
    assert dispatch_row(rig)["status"].startswith("budget: 1 task(s) wait")


@pytest.mark.asyncio
async def test_an_idle_dispatcher_does_not_write_its_row_at_every_tick(rig: Rig) -> None:
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    rig.add("example")
    assert await dispatcher.tick(rig.clock.now())
    written = dispatch_row(rig)
    for _ in range(3):
        rig.clock.advance(60)
        assert not await dispatcher.tick(rig.clock.now())
    assert dispatch_row(rig) == written, "only a change of state writes the row between two refreshes"


@pytest.mark.asyncio
async def test_an_idle_dispatcher_reads_the_pause_once_per_tick_from_the_one_outlook(rig: Rig) -> None:
    """The tick that found nothing, its status line and its sleep are one read (issue 24, "one
    outlook"): the pause is not read again to say so, nor again before sleeping."""
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    rig.store.pause_dispatch("op", "maintenance", rig.clock.now())
    statements: list[str] = []
    dispatcher.db.store._conn.set_trace_callback(statements.append)
    try:
        assert not await dispatcher.tick(rig.clock.now())
        with anyio.move_on_after(0.05):
            await dispatcher.view.sleep_until_due(stopping=False)
    finally:
        dispatcher.db.store._conn.set_trace_callback(None)
    reads = [s for s in statements if "FROM dispatch_control" in s]
    assert len(reads) == 2, reads  # one inside the claim's own transaction, one for the outlook
    assert dispatch_row(rig)["status"].startswith("paused since")


def test_status_and_the_metrics_read_one_state_of_the_database(rig: Rig) -> None:
    """A commit by another process between two of the outlook's reads is not half seen: status and
    the gauges are made from one deferred read transaction."""
    from agentd.outlook import status as outlook
    from agentd.store import open_store

    other = open_store(rig.config.db_path, rig.clock)
    real_pause = rig.store.dispatch_pause

    def pause_then_read() -> Any:  # another process pauses, and adds a task, mid-read
        other.pause_dispatch("op", "mid-read", rig.clock.now())
        admitted = admit_task(
            TaskIntent.model_validate({"task_type": "example", "source": "test", "payload": {}}),
            rig.config,
            rig.clock.now(),
            trusted=True,
        )
        other.enqueue_task(admitted, rig.clock.now())
        return real_pause()

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(rig.store, "dispatch_pause", pause_then_read)
            seen = outlook.read_outlook(rig.store, rig.config, rig.clock.now())
        assert seen.pause is None and sum(seen.summary.counts.values()) == 0, "one state: before both commits"
        after = outlook.read_outlook(rig.store, rig.config, rig.clock.now())
        assert after.pause is not None and after.summary.counts == {"pending": 1}
    finally:
        other.close()


# --- 4. a message that failed for good is seen --------------------------------------------------


@pytest.mark.asyncio
async def test_a_message_that_failed_for_good_is_in_status_and_its_gauge_until_retried(
    rig_factory: Callable[..., Rig], rig_cli: Any
) -> None:
    from test_delivery import Receiver, saying, webhook, with_handlers

    receiver = Receiver()
    try:
        receiver.answers = [404]  # refused for good: no second attempt
        rig = rig_factory(with_handlers(webhook(receiver.url), default="hook"))
        dispatcher = rig.dispatcher()
        await dispatcher.start()
        rig.add("scripted", payload=saying({"text": "hello"}))
        assert await dispatcher.run_until_idle() == 1
        assert await dispatcher.outbox.deliveries.deliver_due(rig.clock.now()) == 1
    finally:
        receiver.close()
    [failed] = rig.store.list_outbox(state="failed")
    assert snapshot(rig.config, rig.store, rig.clock.now())["messages"] == {"failed": 1}
    assert rig_cli(rig, "status", "--json").json()["messages"] == {"failed": 1}
    text = rig_cli(rig, "status").out
    assert "MESSAGES 1 external message(s) failed for good" in text, text
    assert "`agentd outbox list --state failed`" in text and "`agentd outbox retry ID`" in text
    assert gauge(rig, "agentd_messages_failed") == 1

    assert rig_cli(rig, "outbox", "retry", str(failed.outbox_id)).code == 0
    assert snapshot(rig.config, rig.store, rig.clock.now())["messages"] == {"failed": 0}
    assert "MESSAGES" not in rig_cli(rig, "status").out
    assert gauge(rig, "agentd_messages_failed") == 0


# --- 5. a task's stored outcome says the task's status, whichever way it ended ---------------------


class RateLimited(InProcessAdapter):
    """An adapter whose provider always says slow down (as a harness reports HTTP 429)."""

    async def execute(self, ctx: Any, on_started: Any) -> Any:
        await super().execute(ctx, on_started)
        return AdapterRun(exit_status="error", ok=False, failure="HTTP 429", final_message=None, rate_limited=True)


async def run_out(rig: Rig, task: TaskRecord, dispatcher: Dispatcher | None = None) -> TaskRecord:
    """Run `task` until it ends, the clock moved on to each retry."""
    dispatcher = dispatcher or rig.dispatcher()
    await dispatcher.start()
    while (current := rig.store.get_task_or_raise(task.task_id)).status not in TERMINAL_STATUSES:
        rig.clock.advance(max((current.available_at - rig.clock.now()).total_seconds(), 0))
        assert await dispatcher.run_until_idle() >= 1
    await dispatcher.stop()
    return current


@pytest.mark.asyncio
async def test_a_task_out_of_attempts_has_a_permanent_failure_outcome_that_says_why(rig: Rig) -> None:
    task = await run_out(rig, rig.add("flaky"))
    assert task.status == "permanent_failure" and task.outcome is not None
    assert (task.outcome.status, task.outcome.machine_status) == ("permanent_failure", "failed")
    summary = task.outcome.operator_summary
    assert summary.startswith(f"out of attempts ({task.max_attempts} of {task.max_attempts})"), summary
    assert "the attempt reported retryable_failure" in summary and "could not reach the thing" in summary
    assert task.last_error and task.last_error.startswith("out of attempts")
    [finished] = [e for e in rig.events(task.task_id) if e.type == "task_finished"]
    assert finished.payload["summary"].startswith("out of attempts")
    attempts = [e.payload["outcome"] for e in rig.events(task.task_id) if e.type == "task_attempt_finished"]
    assert set(attempts) == {"retryable_failure"}, "each attempt's own outcome stays what it reported"

    retried = rig.store.retry_task(task.task_id, 1, rig.clock.now())  # and once more, after a retry
    assert retried.outcome is None
    again = await run_out(rig, retried)
    assert again.outcome is not None and again.outcome.status == again.status == "permanent_failure"


@pytest.mark.asyncio
async def test_a_task_past_the_rate_limit_cap_has_a_permanent_failure_outcome(rig: Rig) -> None:
    dispatcher = Dispatcher(rig.config, rig.db, clock=rig.clock, adapters=lambda c: RateLimited(c.adapter_id))
    task = await run_out(rig, rig.add("example"), dispatcher)
    assert task.status == "permanent_failure" and task.outcome is not None
    assert task.outcome.status == "permanent_failure" and task.outcome.operator_summary.startswith("rate limited")
    assert "the attempt reported retryable_failure: rate limited" in task.outcome.operator_summary


@pytest.mark.asyncio
async def test_a_task_that_keeps_crashing_the_runtime_has_a_permanent_failure_outcome(rig: Rig) -> None:
    task = rig.add("example")
    for _ in range(rig.config.dispatch.crash_limit):  # claimed, then the runtime dies under it
        claim = rig.store.claim_next_task(
            rig.clock.now(), "dead", functools.partial(plan_attempt, rig.config), rig.config.paths.state_dir
        )
        assert claim is not None and claim.task.task_id == task.task_id
        swept = rig.dispatcher()
        await swept.start()  # the boot sweep
        await swept.stop()
    ended = rig.store.get_task_or_raise(task.task_id)
    assert ended.status == "permanent_failure" and ended.outcome is not None
    assert ended.outcome.status == "permanent_failure" and ended.outcome.operator_summary.startswith("crashed_runtime")


@pytest.mark.asyncio
async def test_a_task_refused_at_the_claim_has_a_permanent_failure_outcome_not_its_last_attempts(
    rig: Rig,
) -> None:
    task = rig.add("flaky")
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    assert await dispatcher.run_until_idle() == 1  # a retryable failure: the outcome says so
    rig.clock.advance(3600)
    gone = replace(rig.config, adapters={k: v for k, v in rig.config.adapters.items() if k != "fails"})
    claim = rig.store.claim_next_task(
        rig.clock.now(), "x", functools.partial(plan_attempt, gone), rig.config.paths.state_dir
    )
    assert claim is not None and claim.attempt is None and claim.refused
    ended = rig.store.get_task_or_raise(task.task_id)
    assert ended.status == "permanent_failure" and ended.outcome is not None
    assert ended.outcome.status == "permanent_failure" and ended.outcome.operator_summary == ended.last_error


@pytest.mark.asyncio
async def test_every_task_of_a_mixed_run_has_an_outcome_that_says_its_status(rig: Rig) -> None:
    failing = {"status": "permanent_failure", "machine_status": "failed", "operator_summary": "no"}
    blocked = {"status": "blocked", "machine_status": "blocked", "operator_summary": "stuck"}
    for task_type, payload in (
        ("example", {}),
        ("flaky", {}),
        ("scripted", {"outcome": failing}),
        ("scripted", {"outcome": blocked}),
        ("scripted", {"outcome": {"status": "completed", "machine_status": "ok", "operator_summary": "x"}}),
        ("scripted", {"raw_result": "not json"}),
        ("scripted", {"exit": 3}),
    ):
        rig.add(task_type, payload=payload)
    rig.store.cancel_task(rig.add("example").task_id, TaskOutcome.failure("no", "operator_canceled"), rig.clock.now())
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    for _ in range(5):
        await dispatcher.run_until_idle()
        assert outcome_disagreements(rig.store.list_tasks(limit=1000)) == []
        rig.clock.advance(3600)
    statuses = {t.status for t in rig.store.list_tasks(limit=1000)}
    assert statuses == {"completed", "permanent_failure", "blocked", "operator_canceled"}


# --- 7. a held task exports as held, in the Agent Runtime's words ----------------------------------


@pytest.mark.asyncio
async def test_held_tasks_export_as_waiting_permission_and_waiting_resource_never_queued(
    rig_factory: Callable[..., Rig],
) -> None:
    from agentd.outlook.agent_runtime import runtime_event, session_snapshot

    rig = rig_factory(budgeted(daily_usd=1, urgent_priority=1))
    spent(rig, "script", 2.0)
    by_person = add_held(rig, priority=5)
    by_budget = rig.add("example", priority=5)
    urgent = rig.add("example", priority=1)
    later = rig.add("example", priority=5, schedule={"delay_minutes": 10})
    rig.clock.advance(1)
    now = rig.clock.now()
    shown = session_snapshot(rig.config, rig.store, snapshot(rig.config, rig.store, now), now)
    tasks = {int(t["taskId"]): t for t in shown["tasks"]}
    assert tasks[by_person.task_id]["status"] == "waiting_permission"
    assert "approve" in tasks[by_person.task_id]["statusReason"]
    assert tasks[by_budget.task_id]["status"] == "waiting_resource"  # issue 41: a quota, not a missing dependency
    assert "budget" in tasks[by_budget.task_id]["statusReason"]
    assert tasks[urgent.task_id]["status"] == tasks[later.task_id]["status"] == "queued"
    assert tasks[by_person.task_id]["nativeStatus"] == tasks[by_budget.task_id]["nativeStatus"] == "pending"

    dispatcher = rig.dispatcher()
    await dispatcher.start()
    assert await dispatcher.run_until_idle() == 1  # the urgent one; the budget holds the rest
    exported = [runtime_event(e, "demo") for e in rig.events()]
    enqueued = {x["taskId"]: x for x in exported if x["nativeStatus"] == "task_enqueued"}
    assert (enqueued[str(by_person.task_id)]["type"], enqueued[str(by_person.task_id)]["status"]) == (
        "task.waiting",
        "waiting_permission",
    )
    assert enqueued[str(by_budget.task_id)]["type"] == "task.queued"
    [requested] = [x for x in exported if x["nativeStatus"] == "approval_requested"]
    assert requested["status"] == "waiting_permission"
    [held] = [x for x in exported if x["nativeStatus"] == "budget_held"]
    assert (held["type"], held["status"]) == ("quota.blocked", "waiting_resource")
