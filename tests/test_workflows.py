"""Workflows and schedules through the real dispatcher: real SQLite, real adapters, a fake clock."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rig import Rig

from agentd.clock import FakeClock
from agentd.config import GOAL_LOOP
from agentd.records import StepResult, WorkflowRecord
from agentd.work.workflows import next_move

pytestmark = pytest.mark.asyncio


async def run_workflow(rig: Rig, context: dict[str, Any], key: str = "w1") -> tuple[WorkflowRecord, list[Any]]:
    workflow, created = rig.store.create_workflow("goal-loop", key, "plan", context, rig.clock.now(), "test")
    assert created
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    for _ in range(40):  # far more ticks than any healthy run needs: a livelock would show
        if not await dispatcher.tick(rig.clock.now()):
            break
    await dispatcher.stop()
    return rig.store.get_workflow_or_raise(workflow.workflow_id), rig.store.workflow_steps(workflow.workflow_id)


def states(steps: list[Any]) -> list[str]:
    return [t.workflow_ref.state_id for t in steps]


async def test_goal_loop_continue_then_complete_takes_exactly_five_tasks(rig: Rig) -> None:
    workflow, steps = await run_workflow(rig, {"answers": {"verify": ["continue", "complete"]}})
    assert workflow.status == "completed" and workflow.completed_at is not None
    assert states(steps) == ["plan", "execute", "verify", "execute", "verify"]
    assert [t.workflow_iteration for t in steps] == [1, 2, 3, 4, 5]
    assert all(t.status == "completed" for t in steps)
    kinds = [e.type for e in rig.store.read_events(workflow_id=workflow.workflow_id)]
    assert kinds.count("workflow_task_created") == 5 and kinds.count("workflow_transitioned") == 4
    assert kinds[-1] == "workflow_completed"


async def test_verify_continue_forever_is_blocked_at_the_cap(rig: Rig) -> None:
    workflow, steps = await run_workflow(rig, {"answers": {"verify": ["continue"]}})
    assert workflow.status == "blocked"
    assert "state execute would be entered 6 times (cap 5)" in (workflow.blocked_reason or "")
    assert states(steps).count("execute") == 5 and len(steps) == 1 + 5 + 5


@pytest.mark.parametrize(("answer", "reason"), [(None, "got signal None"), ("maybe", "got signal 'maybe'")])
async def test_verify_without_a_known_signal_blocks_rather_than_spins(
    rig: Rig, answer: str | None, reason: str
) -> None:
    workflow, steps = await run_workflow(rig, {"answers": {"verify": [answer]}})
    assert workflow.status == "blocked" and reason in (workflow.blocked_reason or "")
    assert "it accepts: continue, revise_plan, complete" in (workflow.blocked_reason or "")
    assert len(steps) == 3


async def test_a_permanently_failed_step_blocks_the_workflow(rig: Rig) -> None:
    workflow, steps = await run_workflow(rig, {"fail": "execute"})
    assert workflow.status == "blocked" and "ended permanent_failure" in (workflow.blocked_reason or "")
    assert states(steps) == ["plan", "execute"]


async def test_the_bundle_tells_a_step_which_signals_it_may_give(rig: Rig) -> None:
    _, steps = await run_workflow(rig, {"answers": {"verify": ["complete"]}})
    prompt = Path(rig.store.attempts_of(steps[-1].task_id)[0].prompt_path).read_text()
    assert "step 'verify' (iteration 3)" in prompt
    assert '"workflow_signal": one of continue, revise_plan, complete' in prompt


async def test_a_signal_from_an_older_iteration_is_ignored() -> None:
    now = FakeClock().now()
    workflow = WorkflowRecord(
        workflow_id=1,
        workflow_type="goal-loop",
        instance_key="k",
        current_state="execute",
        context={},
        status="active",
        created_at=now,
        updated_at=now,
        completed_at=None,
        iteration=4,
        blocked_reason=None,
    )
    stale = StepResult(1, "verify", 3, "continue", "completed", 9)
    assert next_move(GOAL_LOOP, workflow, stale, {"execute": 2}, 5).kind == "ignore"
    current = StepResult(1, "execute", 4, "ok", "completed", 10)
    assert next_move(GOAL_LOOP, workflow, current, {"execute": 2, "verify": 1}, 5).next_state == "verify"


async def test_config_refuses_to_strand_a_live_workflow(rig: Rig, tmp_path: Path, cli: Any) -> None:
    workflow, _ = rig.store.create_workflow("goal-loop", "stranded", "verify", {}, rig.clock.now(), "test")
    from support import agent_config

    def drop_verify(raw: dict[str, Any]) -> None:
        loop = raw["workflows"][0]
        loop["states"] = [s for s in loop["states"] if s["state_id"] != "verify"]
        loop["states"][1]["transitions"] = [{"signal": "ok", "next_state": "plan"}]

    path = agent_config(tmp_path, drop_verify)
    result = cli("config", "check", config=path)
    assert result.code == 2
    assert (
        f"live workflow {workflow.workflow_id} (goal-loop 'stranded') is in state 'verify', "
        "which goal-loop no longer has"
    ) in result.err
    assert cli("dispatch", "--until-idle", config=path).code == 2


async def test_a_schedule_coalesces_missed_runs_and_waits_for_its_open_task(rig_factory: Callable[..., Rig]) -> None:
    schedule = {"schedule_id": "beat", "interval_seconds": 60, "task": {"task_type": "example", "subject": "beat"}}
    rig = rig_factory(lambda raw: raw.update(schedules=[schedule]))
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.run_due_schedules(rig.clock.now())
    assert [t.subject for t in rig.store.list_tasks()] == ["beat"]
    rig.clock.advance(3600)  # the dispatcher was away for an hour; the task still waits
    await dispatcher.run_due_schedules(rig.clock.now())
    assert len(rig.store.list_tasks()) == 1, "no new task while the previous one is still pending"
    await dispatcher.run_until_idle()  # runs the one task (schedules are due again only in 60 s)
    rig.clock.advance(3600)
    await dispatcher.run_due_schedules(rig.clock.now())
    tasks = rig.store.list_tasks()
    assert len(tasks) == 2, "an hour of missed 60 s slots is one task, not sixty"
    assert tasks[0].schedule_id == "beat" and tasks[0].source == "schedule:beat"
    [record] = rig.store.list_schedules()
    assert record.next_run_at == rig.clock.now() + (record.next_run_at - rig.clock.now())
    assert (record.next_run_at - rig.clock.now()).total_seconds() == 60
    created = [e for e in rig.events() if e.type == "schedule_task_created"]
    assert len(created) == 2
    await dispatcher.stop()


async def test_config_schedules_are_upserted_and_removed_with_the_config(
    rig_factory: Callable[..., Rig], tmp_path: Path
) -> None:
    schedule = {"schedule_id": "beat", "interval_seconds": 60, "task": {"task_type": "example"}}
    rig = rig_factory(lambda raw: raw.update(schedules=[schedule]))
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.stop()
    await rig.dispatcher().start()  # unchanged: no second upsert event
    assert [e.type for e in rig.events()].count("schedule_upserted") == 1
    from support import agent_config

    from agentd.work.validation import load_config

    rig.config = load_config(agent_config(tmp_path))  # the schedule is gone from the TOML
    rig.store.release_dispatch_lock(rig.store.dispatch_lock_holder().holder_id)  # type: ignore[union-attr]
    await rig.dispatcher().start()
    assert rig.store.list_schedules() == []
    assert any(e.type == "schedule_removed" for e in rig.events())
