"""Issue 41, finding 6: `status --format agent-runtime` carries each task's graph (its parent, follow-ups,
workflow step and links), its messages' delivery state, and the environment attempts run in (workspace,
run user, limits, policy); `task list --order claim` is tested in tests/test_task_steering.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rig import Rig

from agentd import control
from agentd.outlook.agent_runtime import session_snapshot
from agentd.outlook.status import snapshot

pytestmark = pytest.mark.timeout(60)


def exported(rig: Rig) -> dict[str, Any]:
    return session_snapshot(rig.config, rig.store, snapshot(rig.config, rig.store, rig.clock.now()), rig.clock.now())


@pytest.mark.asyncio
async def test_the_snapshot_carries_each_task_s_links_and_workflow_step(rig: Rig) -> None:
    flow = control.start_workflow(rig.config, rig.store, "goal-loop", "k1", {}, None, rig.clock.now())
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.run_until_idle()  # the workflow's steps run
    await dispatcher.stop()
    first, second = rig.add(subject="first"), rig.add(subject="second")
    rig.store.link_tasks(second.task_id, first.task_id, "op", rig.clock.now())
    found = exported(rig)
    tasks = {t["taskId"]: t for t in found["tasks"]}
    assert {"kind": "dependsOn", "targetId": str(first.task_id), "status": "pending"} in tasks[str(second.task_id)][
        "relationships"
    ]
    assert {"kind": "blocks", "targetId": str(second.task_id)} in tasks[str(first.task_id)]["relationships"]
    assert {"kind": "dependsOn", "from": str(second.task_id), "to": str(first.task_id)} in found["taskGraph"]["edges"]
    steps = [
        t["scope"]["workflowStep"]
        for t in found["tasks"]
        if t.get("scope", {}).get("workflowId") == str(flow.workflow_id)
    ]
    assert steps and steps[0] == "plan", steps


@pytest.mark.asyncio
async def test_the_snapshot_carries_a_task_s_messages_by_delivery_state(rig_factory: Callable[..., Rig]) -> None:
    from test_delivery import Receiver, saying, webhook, with_handlers

    receiver = Receiver()
    try:
        receiver.answers = [404]
        rig = rig_factory(with_handlers(webhook(receiver.url), default="hook"))
        dispatcher = rig.dispatcher()
        await dispatcher.start()
        task = rig.add("scripted", payload=saying({"text": "hello"}))
        assert await dispatcher.run_until_idle() == 1
        [shown] = [t for t in exported(rig)["tasks"] if t["taskId"] == str(task.task_id)]
        assert shown["deliveryState"] == {"messages": {"pending": 1}}
        assert await dispatcher.outbox.deliveries.deliver_due(rig.clock.now()) == 1
        await dispatcher.stop()
    finally:
        receiver.close()
    [shown] = [t for t in exported(rig)["tasks"] if t["taskId"] == str(task.task_id)]
    assert shown["deliveryState"] == {"messages": {"failed": 1}}


def test_the_environment_block_says_where_and_under_what_attempts_run(rig: Rig) -> None:
    env = exported(rig)["executionEnvironment"]
    config = rig.config
    assert env["cwd"] == str(config.paths.workspace) and env["runUser"] == config.dispatch.run_as
    assert env["limits"]["maxPids"] == config.dispatch.max_pids
    assert env["limits"]["maxMemoryMb"] == config.dispatch.max_memory_mb
    assert {a["adapterId"] for a in env["policy"]["adapters"]} == set(config.adapters)
    assert env["policy"]["boundary"]["enforced"] is (config.dispatch.run_as is not None)
