"""The dispatch lock: pid and heartbeat both count, and a stale lock is cleared exactly once."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from rig import Rig
from support import run_in_threads

from agentd.errors import DispatchLocked
from agentd.process import procs
from agentd.records import LockHolder
from agentd.store import open_store

pytestmark = [pytest.mark.process, pytest.mark.asyncio]


def holder(
    rig: Rig, pid: int, *, started: int | None = None, heartbeat_age_s: float = 0, host: str | None = None
) -> LockHolder:
    here = procs.this_process()
    beat = rig.clock.now() - timedelta(seconds=heartbeat_age_s)
    ticks = started if started is not None else (procs.start_ticks(pid) or 0)
    return LockHolder("someone-else", pid, ticks, host or here.host, here.boot_id, beat, beat)


def plant(rig: Rig, planted: LockHolder) -> None:
    assert rig.store.acquire_dispatch_lock(planted, planted.heartbeat_at).acquired


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that is not a dispatcher."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield process
    process.kill()
    process.wait()


async def test_a_lock_from_a_dead_pid_is_cleared(rig: Rig) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    plant(rig, holder(rig, dead.pid, started=123))
    await rig.dispatcher().lock.take()
    [cleared] = [e for e in rig.events() if e.type == "dispatch_lock_stale_cleared"]
    assert cleared.payload["pid"] == dead.pid and "is not running" in cleared.payload["reason"]


async def test_a_live_unrelated_pid_with_an_old_heartbeat_is_cleared(rig: Rig, sleeper: Any) -> None:
    plant(rig, holder(rig, sleeper.pid, heartbeat_age_s=3600))
    await rig.dispatcher().lock.take()
    [cleared] = [e for e in rig.events() if e.type == "dispatch_lock_stale_cleared"]
    assert "heartbeat 3600s old" in cleared.payload["reason"]


async def test_a_reused_pid_is_not_mistaken_for_the_holder(rig: Rig, sleeper: Any) -> None:
    real_start = procs.start_ticks(sleeper.pid) or 0
    plant(rig, holder(rig, sleeper.pid, started=real_start - 1))  # same pid, different process
    await rig.dispatcher().lock.take()
    assert any(e.type == "dispatch_lock_stale_cleared" for e in rig.events())


async def test_a_live_holder_with_a_fresh_heartbeat_keeps_the_lock(rig: Rig, sleeper: Any) -> None:
    plant(rig, holder(rig, sleeper.pid, heartbeat_age_s=5))
    with pytest.raises(DispatchLocked, match=rf"dispatch_locked: .*pid {sleeper.pid} on"):
        await rig.dispatcher().lock.take()
    assert any(e.type == "dispatch_locked" for e in rig.events())


async def test_a_long_attempt_does_not_age_the_lock_out(rig: Rig) -> None:
    """The heartbeat is fed independently of the attempt (the ancestor's age-only lock expired)."""
    dispatcher = rig.dispatcher()
    await dispatcher.lock.take()
    for _ in range(10):  # ten minutes of heartbeats during one attempt
        rig.clock.advance(60)
        assert rig.store.heartbeat_dispatch_lock(dispatcher.holder_id, rig.clock.now())
    with pytest.raises(DispatchLocked):
        await rig.dispatcher().lock.take()


async def test_two_processes_clearing_the_same_stale_lock_one_wins(rig: Rig) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    plant(rig, holder(rig, dead.pid, started=1))
    barrier = threading.Barrier(2)
    results: list[bool] = []

    def contender(name: str) -> None:
        store = open_store(rig.config.db_path, rig.clock)
        me = LockHolder(name, 10**6, 1, "elsewhere", "x", rig.clock.now(), rig.clock.now())
        judged = store.dispatch_lock_holder()  # both judge the same holder stale, then race
        barrier.wait()
        results.append(store.acquire_dispatch_lock(me, rig.clock.now(), judged, "dead").acquired)
        store.close()

    run_in_threads(contender, [(f"c{i}",) for i in range(2)], 30)
    assert sorted(results) == [False, True]
    assert [e.type for e in rig.events()].count("dispatch_lock_stale_cleared") == 1
