"""What one attempt may hold at once (issue #38, finding 8; docs/reliability.md, "What one attempt may hold"):
[dispatch] max_pids and max_memory_mb on each attempt's own cgroup, so a fork bomb or a memory hog inside an
attempt ends that attempt, with its own termination reason, and never stalls the dispatcher. Real cgroups: on
this VM the pids and memory controllers are cgroup v1 hierarchies (the v2 hierarchy has none)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from rig import Rig
from support import missing
from test_dispatch import finish_one, ok

from agentd.process import limits
from agentd.records import TaskAttempt, TaskRecord

pytestmark = pytest.mark.process


def limited(max_pids: int = 0, max_memory_mb: int = 0) -> Callable[[dict[str, Any]], None]:
    def mutate(raw: dict[str, Any]) -> None:
        raw["dispatch"].update(max_pids=max_pids, max_memory_mb=max_memory_mb)
        next(a for a in raw["adapters"] if a["adapter_id"] == "scripted")["timeout_ms"] = 60_000

    return mutate


def require(controller: str) -> None:
    """A cgroup of the test's own that may hold the limit: a v1 hierarchy of the controller (this VM), or a v2
    cgroup that offers it."""
    if os.geteuid() != 0:
        missing("CGROUP_LIMITS", "not root: the limits are set on cgroups only root (or a delegated unit) may make")
    if controller not in limits.v1_hierarchies():
        from agentd.process.containment import cgroups

        found = cgroups()
        offered = (found.own / "cgroup.controllers").read_text().split() if found is not None else []
        if controller not in offered:
            missing("CGROUP_LIMITS", f"no cgroup here may take a {controller} limit (v1 hierarchy or v2 controller)")


async def ended_by(rig: Rig, reason: str, **work: Any) -> tuple[TaskRecord, TaskAttempt]:
    """A real attempt doing `work` (tests/adapters/scripted.py) that its limit ended for `reason`."""
    task = await finish_one(rig, processes=True, outcome=ok(), **work)
    [attempt] = rig.store.attempts_of(task.task_id)
    assert attempt.termination_reason == reason, (attempt.termination_reason, task.last_error)
    return task, attempt


@pytest.mark.asyncio
async def test_a_fork_bomb_ends_its_attempt_at_its_pids_limit(rig_factory: Callable[..., Rig]) -> None:
    require("pids")
    rig = rig_factory(limited(max_pids=24))
    task, attempt = await ended_by(rig, "pids_limit", forks=200)
    assert attempt.diagnostics["limit_hit"] == "pids" and attempt.diagnostics["failure_type"] == "resource_limit"
    assert task.status == "retryable_failure" and "[dispatch] max_pids" in (task.last_error or "")
    control = rig_factory(limited(max_pids=0))  # the control: no limit, the same children
    assert (await finish_one(control, processes=True, forks=200, outcome=ok())).status == "completed"


@pytest.mark.asyncio
async def test_a_memory_hog_ends_its_attempt_at_its_memory_limit(rig_factory: Callable[..., Rig]) -> None:
    require("memory")
    rig = rig_factory(limited(max_memory_mb=64))
    task, _ = await ended_by(rig, "memory_limit", hog_mb=256)
    assert "[dispatch] max_memory_mb" in (task.last_error or "")
    control = rig_factory(limited(max_memory_mb=0))
    assert (await finish_one(control, processes=True, hog_mb=256, outcome=ok())).status == "completed"


@pytest.mark.asyncio
async def test_within_its_limits_an_attempt_runs_as_before_and_leaves_no_cgroup(
    rig_factory: Callable[..., Rig],
) -> None:
    require("pids")
    rig = rig_factory(limited(max_pids=64, max_memory_mb=512))
    task = await finish_one(rig, processes=True, forks=8, hog_mb=16, outcome=ok())
    assert task.status == "completed", task.last_error
    [attempt] = rig.store.attempts_of(task.task_id)
    for own in limits.v1_hierarchies().values():
        assert not list(own.glob(f"agentd.*/attempt-{attempt.attempt_id}")), "its v1 cgroups went with it"


@pytest.mark.asyncio
async def test_the_dispatcher_says_at_its_start_what_holds(
    rig_factory: Callable[..., Rig], caplog: pytest.LogCaptureFixture
) -> None:
    require("pids")
    rig = rig_factory(limited(max_pids=24, max_memory_mb=100))
    dispatcher = rig.dispatcher(processes=True)
    with caplog.at_level("INFO", logger="agentd.services.dispatch"):
        await dispatcher.start()
        await dispatcher.stop()
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("limits: ")]
    assert line.startswith("limits: each attempt at most 24 processes and threads and 100 MiB, held in a cgroup")


@pytest.mark.deep
def test_status_says_whether_the_running_dispatchers_limits_hold() -> None:
    """Read from outside: a dispatcher with cgroups of its own (as its unit delegates them) holds them; one
    without says NOT held, and what that costs; none running: known while it runs."""
    import json
    import subprocess

    import privsep
    from support import wait_until

    privsep.require()
    with privsep.priv_agent() as agent:
        assert subprocess.run(agent.service_argv("init"), env=agent.env(), capture_output=True).returncode == 0

        def limits_line() -> str:
            done = agent.as_operator("status", "--json")
            return str(json.loads(done.stdout)["limits"]["line"])

        assert limits_line().endswith("whether they hold is known while the dispatcher runs")
        for delegated, said in ((True, "held in a cgroup of its own"), (False, "NOT held for pids, memory")):
            service = subprocess.Popen(agent.service_argv("dispatch", delegated=delegated), env=agent.env())
            try:
                found = wait_until(lambda said=said: said in (line := limits_line()) and line, 60, said)
                assert found.startswith("each attempt at most 384 processes and threads and 4,096 MiB"), found
            finally:
                service.terminate()
                service.wait(timeout=60)
