"""Workflows an operator can steer (issue #12): `workflow signal`, `unblock` and `cancel`, and sensors
that wake an existing workflow (seed 000 §5). Real SQLite, the in-process dispatcher, a fake clock;
every act is an event naming who and why, and a refused act writes nothing."""

from __future__ import annotations

import functools
import getpass
import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rig import Rig
from support import examples, write_sensor

from agentd.attempt.prepare import plan_attempt
from agentd.clock import FakeClock
from agentd.config import GOAL_LOOP, Config
from agentd.records import RuntimeEvent, WorkflowRecord
from agentd.services.sensor_runs import parse_output
from agentd.store import migrate, open_store
from agentd.store.migrations import available_migrations
from agentd.work.workflows import accepted_signals, signal_move

# A workflow that waits for a signal before its one step: `wait` has no task type.
GATED = {
    "workflow_type": "gated",
    "initial_state": "wait",
    "states": [
        {"state_id": "wait", "transitions": [{"signal": "go", "next_state": "execute"}]},
        {"state_id": "execute", "task_type": "execute", "completion_signals": ["ok"]},
    ],
}


def with_gated(raw: dict[str, Any]) -> None:
    raw["workflows"] = [*raw.get("workflows", []), GATED]


@pytest.fixture
def gated(rig_factory: Callable[..., Rig]) -> Rig:
    return rig_factory(with_gated)


def events(rig: Rig, kind: str | None = None) -> list[RuntimeEvent]:
    return [e for e in rig.events() if kind is None or e.type == kind]


def start(rig: Rig, workflow_type: str, context: dict[str, Any] | None = None, key: str = "w1") -> WorkflowRecord:
    initial = rig.config.workflows[workflow_type].initial_state
    workflow, created = rig.store.create_workflow(workflow_type, key, initial, context or {}, rig.clock.now(), "test")
    assert created
    return workflow


@pytest.mark.asyncio
async def test_a_goal_loop_blocked_at_its_cap_is_unblocked_once_the_cap_is_raised_and_completes(
    rig: Rig, rig_factory: Callable[..., Rig], rig_cli: Any
) -> None:
    """The issue's acceptance: verify says continue five times (execute would be entered a 6th time,
    over the cap of 5), then complete. Unblocking refuses while the cap would block again; after the
    operator raises goal-loop's max_state_entries to 6, it re-enters verify and the workflow completes."""
    workflow = start(rig, "goal-loop", {"answers": {"verify": ["continue"] * 5 + ["complete"]}})
    await rig.drain()
    blocked = rig.store.get_workflow_or_raise(workflow.workflow_id)
    assert blocked.status == "blocked" and "(cap 5)" in (blocked.blocked_reason or "")
    before = len(rig.events())

    refused = rig_cli(rig, "workflow", "unblock", str(workflow.workflow_id))
    assert refused.code == 2
    assert "state verify would be entered 6 times (cap 5)" in refused.err
    assert "raise max_state_entries of goal-loop (or dispatch.workflow_state_cap) to at least 6" in refused.err
    assert len(rig.events()) == before and rig.store.get_workflow_or_raise(workflow.workflow_id) == blocked

    def raise_cap(raw: dict[str, Any]) -> None:  # the operator edits the config
        next(w for w in raw["workflows"] if w["workflow_type"] == "goal-loop")["max_state_entries"] = 6

    raised = rig_factory(raise_cap)
    unblocked = rig_cli(raised, "workflow", "unblock", str(workflow.workflow_id), "--reason", "one more round")
    assert unblocked.code == 0, unblocked.err
    assert f"unblocked by {getpass.getuser()}: it re-enters verify (iteration 12)" in unblocked.out
    [event] = events(raised, "workflow_unblocked")
    assert event.workflow_id == workflow.workflow_id
    assert {k: event.payload[k] for k in ("by", "reason", "from", "to", "iteration")} == {
        "by": getpass.getuser(),
        "reason": "one more round",
        "from": "verify",
        "to": "verify",
        "iteration": 12,
    }
    assert "(cap 5)" in event.payload["blocked_reason"]

    await raised.drain()
    done = raised.store.get_workflow_or_raise(workflow.workflow_id)
    assert done.status == "completed" and done.blocked_reason is None
    steps = raised.store.workflow_steps(workflow.workflow_id)
    assert [t.workflow_ref.state_id for t in steps if t.workflow_ref][-1] == "verify" and len(steps) == 12
    assert [e.type for e in events(raised) if e.workflow_id == workflow.workflow_id][-1] == "workflow_completed"


@pytest.mark.asyncio
async def test_unblock_is_refused_while_it_would_still_block_or_the_state_is_unknown(rig: Rig, rig_cli: Any) -> None:
    workflow = start(rig, "goal-loop", {"answers": {"verify": ["continue"]}})
    await rig.drain()
    blocked = rig.store.get_workflow_or_raise(workflow.workflow_id)
    assert blocked.status == "blocked"
    before = len(rig.events())
    wid = str(workflow.workflow_id)
    over = rig_cli(rig, "workflow", "unblock", wid, "--state", "execute")
    assert over.code == 2 and "state execute would be entered 6 times (cap 5)" in over.err
    unknown = rig_cli(rig, "workflow", "unblock", wid, "--state", "nowhere")
    assert unknown.code == 2 and "goal-loop has no state 'nowhere'; its states: plan, execute, verify" in unknown.err
    assert len(rig.events()) == before and rig.store.get_workflow_or_raise(workflow.workflow_id) == blocked

    # Into a state the cap still allows, it goes: plan was entered once.
    moved = rig_cli(rig, "workflow", "unblock", wid, "--state", "plan", "--reason", "rethink")
    assert moved.code == 0, moved.err
    active = rig.store.get_workflow_or_raise(workflow.workflow_id)
    assert (active.status, active.current_state, active.iteration) == ("active", "plan", blocked.iteration + 1)
    again = rig_cli(rig, "workflow", "unblock", wid)
    assert again.code == 2 and "only a blocked workflow is unblocked" in again.err
    assert len(events(rig, "workflow_unblocked")) == 1


@pytest.mark.asyncio
async def test_a_state_without_a_task_type_advances_on_workflow_signal(gated: Rig, rig_cli: Any) -> None:
    started = rig_cli(gated, "workflow", "start", "gated", "release-7")
    assert started.code == 0, started.err
    [workflow] = gated.store.list_workflows()
    assert await gated.drain() == 0  # `wait` has no task: the workflow waits for a signal
    assert gated.store.workflow_steps(workflow.workflow_id) == []

    signaled = rig_cli(gated, "workflow", "signal", str(workflow.workflow_id), "go", "--reason", "QA passed")
    assert signaled.code == 0, signaled.err
    assert f"moved to execute (iteration 2) on signal 'go' from {getpass.getuser()}" in signaled.out
    [event] = events(gated, "workflow_signaled")
    assert event.workflow_id == workflow.workflow_id and event.sensor_id is None
    assert event.payload == {
        "signal": "go",
        "by": getpass.getuser(),
        "reason": "QA passed",
        "origin": "operator:cli",
        "state": "wait",
        "iteration": 1,
        "applied": True,
        "move": "transition",
        "to": "execute",
    }
    [moved] = events(gated, "workflow_transitioned")
    assert moved.payload == {"from": "wait", "to": "execute", "signal": "go", "iteration": 2}
    assert event.sequence < moved.sequence

    assert await gated.drain() == 1  # the execute step, which completes the workflow
    assert gated.store.get_workflow_or_raise(workflow.workflow_id).status == "completed"


@pytest.mark.asyncio
async def test_a_signal_the_state_does_not_accept_is_refused_and_nothing_is_written(gated: Rig, rig_cli: Any) -> None:
    workflow = start(gated, "gated")
    before = len(gated.events())
    wid = str(workflow.workflow_id)
    refused = rig_cli(gated, "workflow", "signal", wid, "stop", "--reason", "typo")
    assert refused.code == 2
    assert f"workflow {wid}: state wait got signal 'stop'; it accepts: go; nothing was changed" in refused.err
    assert len(gated.events()) == before and gated.store.get_workflow_or_raise(workflow.workflow_id) == workflow

    assert rig_cli(gated, "workflow", "cancel", wid).code == 0
    after_cancel = len(gated.events())
    inactive = rig_cli(gated, "workflow", "signal", wid, "go")
    assert inactive.code == 2 and f"workflow {wid} is canceled, not active" in inactive.err
    assert len(gated.events()) == after_cancel
    assert rig_cli(gated, "workflow", "signal", "999", "go").code == 2


@pytest.mark.asyncio
async def test_a_signal_to_a_state_with_a_queued_step_cancels_that_step(rig: Rig, rig_cli: Any) -> None:
    workflow = start(rig, "goal-loop", {"answers": {"verify": ["complete"]}})
    await rig.dispatcher().advance_workflows(rig.clock.now())  # the plan step exists, not yet run
    [plan] = rig.store.workflow_steps(workflow.workflow_id)
    assert plan.status == "pending"
    signaled = rig_cli(rig, "workflow", "signal", str(workflow.workflow_id), "ok", "--reason", "plan is known")
    assert signaled.code == 0, signaled.err
    skipped = rig.store.get_task_or_raise(plan.task_id)
    assert skipped.status == "operator_canceled" and skipped.outcome is not None
    assert skipped.outcome.operator_summary == (
        f"workflow {workflow.workflow_id} left plan on signal 'ok' from {getpass.getuser()}"
    )
    [event] = events(rig, "workflow_signaled")
    assert event.payload["canceled_task_id"] == plan.task_id and event.payload["to"] == "execute"
    assert await rig.drain() == 2  # execute, then verify completes it; the canceled plan never runs
    done = rig.store.get_workflow_or_raise(workflow.workflow_id)
    assert done.status == "completed"
    assert [t.workflow_ref.state_id for t in rig.store.workflow_steps(workflow.workflow_id) if t.workflow_ref] == [
        "plan",
        "execute",
        "verify",
    ]


@pytest.mark.asyncio
async def test_a_running_step_refuses_a_signal_and_outlives_a_cancel(rig: Rig, rig_cli: Any) -> None:
    """A running step gives its own signal: an operator's is refused (nothing written); a cancel
    leaves it running and ignores the signal it gives."""
    workflow = start(rig, "goal-loop")
    await rig.dispatcher().advance_workflows(rig.clock.now())
    plan = functools.partial(plan_attempt, rig.config)
    claim = rig.store.claim_next_task(rig.clock.now(), "holder", plan, rig.config.paths.state_dir / "attempts")
    assert claim is not None and claim.task.workflow_ref is not None
    step = claim.task.task_id
    wid = str(workflow.workflow_id)
    before = len(rig.events())
    refused = rig_cli(rig, "workflow", "signal", wid, "ok")
    assert refused.code == 2 and f"its plan step, task {step}, is running" in refused.err
    assert len(rig.events()) == before

    canceled = rig_cli(rig, "workflow", "cancel", wid, "--json").json()
    assert canceled["running_task_ids"] == [step] and canceled["canceled_task_ids"] == []
    assert rig.store.get_task_or_raise(step).status == "running"


@pytest.mark.asyncio
async def test_cancel_ends_a_workflow_and_its_queued_step_once(rig: Rig, rig_cli: Any) -> None:
    workflow = start(rig, "goal-loop")
    await rig.dispatcher().advance_workflows(rig.clock.now())
    [plan] = rig.store.workflow_steps(workflow.workflow_id)
    wid = str(workflow.workflow_id)
    canceled = rig_cli(rig, "workflow", "cancel", wid, "--reason", "wrong goal")
    assert canceled.code == 0, canceled.err
    assert f"workflow {wid} canceled by {getpass.getuser()}; step task {plan.task_id} ended operator_canceled" in (
        canceled.out
    )
    assert rig.store.get_workflow_or_raise(workflow.workflow_id).status == "canceled"
    task = rig.store.get_task_or_raise(plan.task_id)
    assert task.status == "operator_canceled" and task.outcome is not None
    assert task.outcome.operator_summary == f"workflow {wid} canceled by {getpass.getuser()}: wrong goal"
    [event] = events(rig, "workflow_canceled")
    assert event.payload == {
        "by": getpass.getuser(),
        "reason": "wrong goal",
        "from_status": "active",
        "state": "plan",
        "iteration": 1,
        "canceled_task_ids": [plan.task_id],
        "running_task_ids": [],
    }
    assert await rig.drain() == 0  # no step is claimed or created for a canceled workflow
    assert len(rig.store.workflow_steps(workflow.workflow_id)) == 1

    before = len(rig.events())
    again = rig_cli(rig, "workflow", "cancel", wid)
    assert again.code == 2 and "is already canceled" in again.err and len(rig.events()) == before
    listed = rig_cli(rig, "workflow", "list", "--status", "canceled", "--json").json()
    assert [w["workflow_id"] for w in listed] == [workflow.workflow_id]


@pytest.mark.asyncio
async def test_a_blocked_workflow_can_be_canceled(rig: Rig, rig_cli: Any) -> None:
    workflow = start(rig, "goal-loop", {"fail": "execute"})
    await rig.drain()
    assert rig.store.get_workflow_or_raise(workflow.workflow_id).status == "blocked"
    result = rig_cli(rig, "workflow", "cancel", str(workflow.workflow_id), "--json").json()
    assert result["workflow"]["status"] == "canceled" and result["canceled_task_ids"] == []
    [event] = events(rig, "workflow_canceled")
    assert event.payload["from_status"] == "blocked" and event.payload["reason"] is None


def test_an_outside_signal_never_blocks_a_workflow() -> None:
    """Unknown signals and the cap refuse an outside signal ("ignore" with the reason) instead of
    blocking the workflow, the way they would block it after a step."""
    workflow = WorkflowRecord.model_validate(
        {
            "workflow_id": 1,
            "workflow_type": "goal-loop",
            "instance_key": "k",
            "current_state": "verify",
            "context": {},
            "status": "active",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
            "completed_at": None,
            "iteration": 3,
            "blocked_reason": None,
        }
    )
    unknown = signal_move(GOAL_LOOP, workflow, "maybe", {}, 5)
    assert unknown.kind == "ignore" and "it accepts: continue, revise_plan, complete" in (unknown.reason or "")
    capped = signal_move(GOAL_LOOP, workflow, "continue", {"execute": 5}, 5)
    assert capped.kind == "ignore" and "(cap 5)" in (capped.reason or "")
    assert signal_move(GOAL_LOOP, workflow, "continue", {"execute": 4}, 5).next_state == "execute"
    assert signal_move(GOAL_LOOP, workflow, "complete", {}, 5).kind == "complete"
    blocked = workflow.model_copy(update={"status": "blocked"})
    assert signal_move(GOAL_LOOP, blocked, "complete", {}, 5).kind == "ignore"


# --- sensors wake workflows (seed 000 §5) ----------------------------------------------------------


def wake_line(signal: Any, key: str = "wake-1", template: str = "gated") -> str:
    proposal = {"template": template, "instance_key": "release-7", "signal": signal}
    return json.dumps(
        {
            "event_id": key,
            "observed_at": "2026-01-01T00:00:00Z",
            "source_ref": "ci",
            "dedupe_key": key,
            "payload": {},
            "proposed_workflow": proposal,
        }
    )


IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")  # records.base.Identifier
GOAL_LOOP_SIGNALS = {s for state in GOAL_LOOP.states for s in accepted_signals(state)}


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.one_of(
        st.sampled_from(sorted(GOAL_LOOP_SIGNALS)),
        st.from_regex(IDENTIFIER, fullmatch=True),
        st.text(max_size=40),
        st.integers(),
        st.none(),
        st.lists(st.text(max_size=3), max_size=2),
    )
)
def test_a_proposed_signal_is_accepted_only_if_a_state_of_the_workflow_takes_it(rig: Rig, signal: Any) -> None:
    """The edge: a sensor line's signal is an identifier some state of the template accepts, or the
    line is rejected with the reason (and never raises)."""
    accepted, rejected = parse_output("s", wake_line(signal, template="goal-loop"), rig.config, rig.clock.now())
    if signal is None or (isinstance(signal, str) and signal in GOAL_LOOP_SIGNALS):
        [item] = accepted
        assert item.workflow is not None and item.workflow.signal == signal and rejected == []
    else:
        [line] = rejected
        assert accepted == [] and "proposed_workflow" in line.reason and "signal" in line.reason
        if isinstance(signal, str) and IDENTIFIER.fullmatch(signal):
            assert line.reason == (
                f"proposed_workflow: no state of goal-loop accepts signal {signal!r}; "
                "its signals: ok, continue, revise_plan, complete"
            )


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_sensor_event_wakes_an_existing_workflow_and_a_signal_it_cannot_take_is_recorded(
    rig_factory: Callable[..., Rig], sensors_dir: Path, rig_cli: Any
) -> None:
    """Run 1 signals `go` to the workflow waiting in `wait`: applied (origin sensor:ci). Run 2 signals
    `go` again under a new key, but the workflow is in execute now: a recorded no-op with the reason;
    the repeated key of run 1 is a plain dedupe (its signal is never applied twice)."""
    body = """
state = os.path.join(os.environ["AGENTD_SENSOR_STATE_DIR"], "runs")
run = int(open(state).read()) + 1 if os.path.exists(state) else 1
open(state, "w").write(str(run))
wake = {"template": "gated", "instance_key": "release-7", "signal": "go"}
for n in range(1, run + 1):
    print(event("build-" + str(n), proposed_task=None, proposed_workflow=wake))
"""
    write_sensor(sensors_dir, "ci", body, interval=60)

    def sensing(raw: dict[str, Any]) -> None:
        with_gated(raw)
        raw["paths"].update(sensors_dir=str(sensors_dir))

    rig = rig_factory(sensing)
    assert rig_cli(rig, "workflow", "start", "gated", "release-7").code == 0
    [workflow] = rig.store.list_workflows()

    [first] = await rig.service.run_due(rig.clock.now())
    assert first.result == "ok" and first.counts.workflows_signaled == 1 and first.counts.signals_ignored == 0
    woken = rig.store.get_workflow_or_raise(workflow.workflow_id)
    assert (woken.current_state, woken.iteration) == ("execute", 2)
    [applied] = events(rig, "workflow_signaled")
    assert applied.sensor_id == "ci" and applied.workflow_id == workflow.workflow_id
    assert {k: applied.payload[k] for k in ("signal", "by", "origin", "applied", "to", "reason")} == {
        "signal": "go",
        "by": "sensor:ci",
        "origin": "sensor:ci",
        "applied": True,
        "to": "execute",
        "reason": "sensor event build-1 (test)",
    }

    rig.clock.advance(60)
    [second] = await rig.service.run_due(rig.clock.now())
    assert second.counts.deduped == 1 and second.counts.signals_ignored == 1
    assert second.counts.workflows_signaled == 0
    assert rig.store.get_workflow_or_raise(workflow.workflow_id) == woken
    noop = events(rig, "workflow_signaled")[-1]
    assert noop.payload["applied"] is False and noop.sensor_id == "ci"
    assert noop.payload["refusal"] == "state execute got signal 'go'; it accepts: ok"
    assert len(events(rig, "workflow_signaled")) == 2
    assert events(rig, "sensor_run_finished")[-1].payload["signals_ignored"] == 1

    assert await rig.drain() == 1
    assert rig.store.get_workflow_or_raise(workflow.workflow_id).status == "completed"


@pytest.mark.process
@pytest.mark.asyncio
async def test_two_events_waking_one_workflow_in_one_run_apply_once(
    rig_factory: Callable[..., Rig], sensors_dir: Path
) -> None:
    """Both are judged on the workflow as it was read; the second finds it moved on and is recorded
    as not applied, never applied twice. A signal for a workflow that does not exist yet starts it
    in its state (and says the signal was not applied)."""
    wake = '{"template": "gated", "instance_key": "release-7", "signal": "go"}'
    new = '{"template": "gated", "instance_key": "release-8", "signal": "go"}'
    body = "\n".join(
        f'print(event("{key}", proposed_task=None, proposed_workflow={proposal}))'
        for key, proposal in (("a", wake), ("b", wake), ("c", new))
    )
    write_sensor(sensors_dir, "ci", body)

    def sensing(raw: dict[str, Any]) -> None:
        with_gated(raw)
        raw["paths"].update(sensors_dir=str(sensors_dir))

    rig = rig_factory(sensing)
    workflow = start(rig, "gated", key="release-7")
    [report] = await rig.service.run_due(rig.clock.now())
    assert report.counts.workflows_signaled == 1 and report.counts.signals_ignored == 1
    applied, skipped = events(rig, "workflow_signaled")
    assert applied.payload["applied"] is True and skipped.payload["applied"] is False
    assert skipped.payload["refusal"].startswith("the workflow moved on while the signal was judged")
    assert len(events(rig, "workflow_transitioned")) == 1
    assert rig.store.get_workflow_or_raise(workflow.workflow_id).iteration == 2

    assert report.counts.workflows_created == 1
    [created] = events(rig, "sensor_workflow_created")
    assert created.payload["signal"] == "go" and created.payload["signal_applied"] is False
    started = rig.store.get_workflow_or_raise(created.workflow_id or 0)
    assert (started.instance_key, started.current_state, started.iteration) == ("release-8", "wait", 1)


def test_the_migration_keeps_workflows_their_ids_and_what_refers_to_them(tmp_path: Path, config: Config) -> None:
    """0008 rebuilds workflows to allow 'canceled': rows, ids (never reused) and the tasks that point
    at them survive it."""
    clock = FakeClock()
    db = tmp_path / "upgrade.db"
    [steering] = [m for m in available_migrations() if m.name == "workflow_steering"]
    before = [m for m in available_migrations() if m.version < steering.version]
    migrate(db, clock, before)
    store = open_store(db, clock, before)
    first, _ = store.create_workflow("goal-loop", "a", "plan", {"x": 1}, clock.now(), "test")
    second, _ = store.create_workflow("goal-loop", "b", "plan", None, clock.now(), "test")
    store.close()
    with sqlite3.connect(db) as conn:  # a step of the first (a row as that schema holds it); the second gone
        now = "2026-11-22T10:00:00.000000Z"
        task_id = conn.execute(
            """INSERT INTO tasks (task_type, source, requested_profile_id, max_attempts, available_at, created_at,
                   updated_at, workflow_id, workflow_state, workflow_iteration)
               VALUES ('example', 't', 'operator', 3, ?, ?, ?, ?, 'plan', 1)""",
            (now, now, now, first.workflow_id),
        ).lastrowid
        conn.execute("DELETE FROM workflows WHERE id = ?", (second.workflow_id,))
    conn.close()

    assert migrate(db, clock)[0] == steering
    store = open_store(db, clock)
    assert store.get_workflow_or_raise(first.workflow_id) == first
    assert [t.task_id for t in store.workflow_steps(first.workflow_id)] == [task_id]
    third, _ = store.create_workflow("goal-loop", "c", "plan", None, clock.now(), "test")
    assert third.workflow_id == second.workflow_id + 1
    assert store.cancel_workflow(third.workflow_id, "me", None, clock.now()).workflow.status == "canceled"
    store.close()
