"""Backup and restore with real processes (docs/backup-and-archive.md): a backup taken while a dispatcher drains 200
script tasks, restored onto a fresh state dir whose services finish the rest; `agentd backup` SIGKILLed mid-way
leaves nothing `restore` accepts."""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import agent_config, new_agent, ok, wait_until

from agentd.clock import SystemClock
from agentd.evidence.verify import verify
from agentd.records import TaskIntent
from agentd.store import Store, open_store
from agentd.work.intake import admit_task
from agentd.work.validation import load_config

pytestmark = pytest.mark.process

ENV = {**os.environ, "AGENTD_DISPATCH__BACKOFF_BASE_S": "0", "AGENTD_DISPATCH__GRACE_S": "1"}


def agentd(config: Path, *args: str, **popen: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "agentd", "--config", str(config), *args], env=ENV, **popen)


def ran(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "agentd", "--config", str(config), *args]
    return subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120, check=False)


def add_long_task(config_path: Path, store: Store, sleep_s: float) -> int:
    """A task ahead of the rest (priority 1) that runs for `sleep_s`: the attempt running when the backup is taken."""
    config, now = load_config(config_path), SystemClock().now()
    payload = {"outcome": ok(), "sleep_s": sleep_s}
    intent = TaskIntent(task_type="scripted", source="test", payload=payload, priority=1)
    return store.enqueue_task(admit_task(intent, config, now, trusted=True), now).task_id


def running(store: Store, task_id: int) -> bool:
    return store.get_task_or_raise(task_id).status == "running"


def completed(store: Store) -> int:
    return sum(1 for t in store.list_tasks(limit=100_000) if t.status == "completed")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)


@pytest.mark.timeout(600)
def test_a_backup_taken_while_200_script_tasks_run_restores_and_the_services_finish_the_rest(tmp_path: Path) -> None:
    config, store = new_agent(tmp_path / "agent", 200, sleep_s=0.05)
    dispatcher = agentd(config, "dispatch", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: completed(store) >= 40, 120, "40 tasks done before the backup")
        long_task = add_long_task(config, store, 6.0)
        wait_until(lambda: running(store, long_task), 60, "the long task running")
        taken = ran(config, "backup", str(tmp_path / "backups"), "--json")
        assert taken.returncode == 0, taken.stderr
        backup = json.loads(taken.stdout)
        assert backup["open_attempts"] == 1 and running(store, long_task)
        wait_until(lambda: completed(store) == 201, 300, "the original agent drained")
    finally:
        stop(dispatcher)
    head = backup["chain_head"]["sequence"]
    original = [(e.sequence, e.type, e.task_id) for e in store.read_events(limit=1_000_000)]
    store.close()

    (tmp_path / "fresh").mkdir()
    fresh = agent_config(tmp_path / "fresh")
    restored = ran(fresh, "restore", str(tmp_path / "backups"), "--json")
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout)["verify"]["ok"]
    state = tmp_path / "fresh" / "state"
    copy = open_store(state / "agentd.db", SystemClock())
    try:
        assert [(e.sequence, e.type, e.task_id) for e in copy.read_events(limit=1_000_000)] == original[:head]
        assert len(copy.list_tasks(limit=100_000)) == 201
        assert completed(copy) <= 200 and copy.get_task_or_raise(long_task).status == "running"
        assert verify(copy, state).findings == []
        dispatcher = agentd(fresh, "dispatch", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: completed(copy) == 201, 300, "the restored agent finished the rest")
        finally:
            stop(dispatcher)
        assert verify(copy, state).findings == []
    finally:
        copy.close()
    swept = ran(fresh, "evidence", "verify", "--json")
    assert swept.returncode == 0, swept.stdout + swept.stderr
    attempts = copy_attempts(state, long_task)
    assert attempts[0].termination_reason is not None and attempts[-1].exit_status == "ok"  # swept, then run again


@pytest.mark.timeout(600)
@pytest.mark.parametrize("dest_name", ["backups", "agent.tar"])
def test_a_backup_killed_mid_way_leaves_nothing_restore_accepts(tmp_path: Path, dest_name: str) -> None:
    config, store = new_agent(tmp_path / "agent", 120)
    dispatcher = agentd(config, "dispatch", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: completed(store) == 120, 300, "120 attempts sealed")
    finally:
        stop(dispatcher)
    store.close()
    dest = tmp_path / dest_name
    (tmp_path / "fresh").mkdir()
    fresh = agent_config(tmp_path / "fresh")
    rng, cut_short, refused = random.Random(54), 0, 0
    for _ in range(4):
        backup = agentd(config, "backup", str(dest), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(functools.partial(started_or_done, backup, dest), 60, "the backup under way")
        time.sleep(rng.uniform(0.0, 0.02))  # somewhere in its copy
        killed = backup.poll() is None and unfinished(dest)
        backup.kill()
        backup.wait(timeout=30)
        if not killed:
            continue
        cut_short += 1
        answer = ran(fresh, "restore", str(dest))
        if answer.returncode == 2:  # nothing published: refused, in one line, nothing restored
            assert len(answer.stderr.strip().splitlines()) == 1, answer.stderr
            assert not (tmp_path / "fresh" / "state" / "agentd.db").exists()
            refused += 1
        else:  # a backup published whole before a later kill restores clean
            assert answer.returncode == 0, answer.stdout + answer.stderr
            break
    assert cut_short >= 1 and refused >= 1, "no backup was cut short: the test proves nothing"
    finished = ran(config, "backup", str(dest), "--json")  # the next backup clears what the kills left
    assert finished.returncode == 0, finished.stderr
    assert not list(tmp_path.glob(".*partial*")) and not list(dest.parent.glob(f".{dest.name}.partial-*"))
    if dest.is_dir():
        assert not list(dest.glob("snapshots/.partial-*")) and not list(dest.glob("evidence/*/.partial-*"))


def started_or_done(backup: subprocess.Popen[bytes], dest: Path) -> bool:
    return backup.poll() is not None or unfinished(dest)


def unfinished(dest: Path) -> bool:
    """What a backup under way has made and not yet published: its partial snapshot, or its partial archive."""
    return any(dest.glob("snapshots/.partial-*")) or any(dest.parent.glob(f".{dest.name}.partial-*"))


def copy_attempts(state: Path, task_id: int) -> list[Any]:
    store = open_store(state / "agentd.db", SystemClock(), readonly=True)
    try:
        return store.attempts_of(task_id)
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_backup_chaos_short_form(tmp_path: Path) -> None:
    """`make chaos`'s backup part, short: SIGKILLs during backups and of the dispatcher; each published one restores."""
    from backup_chaos import run_backup_chaos

    report = run_backup_chaos(tmp_path, kills=4, seed=54, tasks=150)
    assert report.kills >= 4 and report.failed == [], report.table()
    assert report.restored == len(report.published) >= 1, report.table()
