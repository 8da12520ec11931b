"""Issue 41, finding 3: the states seed 002 names beyond agentd's own status, derived once
(agentd/outlook/taskstate.py) so `status`, `task show`, the API, the console and the export agree:
preparing (claimed, its adapter not started), streaming (its harness reported within STREAMING_S),
timed_out (failed because its last attempt ran out of time)."""

from __future__ import annotations

import pytest
from rig import Rig
from test_lost_task import dispatcher_live
from test_tracecore import five_rig, run_until_idle  # noqa: F401 (a fixture)
from test_web_live import running

from agentd.outlook.agent_runtime import session_snapshot
from agentd.outlook.status import snapshot
from agentd.outlook.taskstate import STREAMING_S

pytestmark = pytest.mark.timeout(90)


def states(rig: Rig) -> tuple[str, dict[str, str]]:
    """The running task's state in `status --json`, and every task's in the export."""
    status = snapshot(rig.config, rig.store, rig.clock.now())
    exported = session_snapshot(rig.config, rig.store, status, rig.clock.now())
    [shown] = status["running"]
    return shown["state"]["status"], {t["taskId"]: t["status"] for t in exported["tasks"]}


def test_a_claimed_task_is_preparing_then_running_and_a_script_never_streams(rig: Rig) -> None:
    """A script's progress line is not a stream (issue 52): its task reads running, the reason says it
    reported; a harness's activity reads streaming (tests/test_one_state.py holds the rule over each kind)."""
    task_id, attempt_id = running(rig)
    dispatcher_live(rig)
    assert states(rig) == ("preparing", {str(task_id): "preparing"})
    rig.store.mark_attempt_started(task_id, attempt_id, 4242, rig.clock.now())
    assert states(rig) == ("running", {str(task_id): "running"})
    rig.store.record_activity(task_id, attempt_id, [("attempt_progress", {"text": "half"})], rig.clock.now())
    assert states(rig) == ("running", {str(task_id): "running"})
    [shown] = snapshot(rig.config, rig.store, rig.clock.now())["running"]
    assert shown["state"]["reason"] == "its script reported progress just now"
    rig.clock.advance(STREAMING_S + 1)
    dispatcher_live(rig)  # the dispatcher still reports; its harness has gone quiet
    assert states(rig) == ("running", {str(task_id): "running"})


@pytest.mark.asyncio
@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
async def test_a_task_whose_last_attempt_ran_out_of_time_is_timed_out(five_rig: Rig) -> None:  # noqa: F811
    rig = five_rig
    task_id = rig.add("scripted", payload={"sleep_s": 30}, requested_adapter_id="quick").task_id
    for _ in range(10):  # each attempt runs out of its 1 s, until the task is out of attempts
        await run_until_idle(rig)
        if rig.store.get_task_or_raise(task_id).status != "retryable_failure":
            break
        rig.clock.advance(86_400)
    assert rig.store.get_task_or_raise(task_id).status == "permanent_failure"
    status = snapshot(rig.config, rig.store, rig.clock.now())
    exported = session_snapshot(rig.config, rig.store, status, rig.clock.now())
    [task] = [t for t in exported["tasks"] if t["taskId"] == str(task_id)]
    assert task["status"] == "timed_out"


def test_an_attempt_that_runs_no_process_is_running_once_started_not_preparing(rig: Rig) -> None:
    """ollama-generate speaks HTTP and starts no process: its start records no pid, and it read "preparing"
    for its whole run. Its start records its bundle, as every start does."""
    from agentd.records.work import CompiledBundle

    task_id, attempt_id = running(rig)
    dispatcher_live(rig)
    assert states(rig) == ("preparing", {str(task_id): "preparing"})
    bundle = CompiledBundle("0" * 64, "/nowhere/prompt.md", {"chars": 10})
    rig.store.mark_attempt_started(task_id, attempt_id, None, rig.clock.now(), bundle)
    assert states(rig) == ("running", {str(task_id): "running"})
