"""Storage and file-system faults are one clear line, never a traceback (issue: poison-proof, finding 5).

Real faults: a tmpfs that is full, a read-only bind mount, a user who may not read the state dir,
a write lock held by another connection. Mounting needs root; without it those tests are skipped.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support import agent_config

from agentd.clock import FakeClock
from agentd.errors import StorageError
from agentd.records import TaskIntent
from agentd.store import base as store_base
from agentd.store import migrate, open_store
from agentd.work.intake import admit_task

pytestmark = pytest.mark.process

ROOT = os.geteuid() == 0 and shutil.which("mount") is not None
needs_root = pytest.mark.skipif(not ROOT, reason="needs root to mount a full or read-only file system")


@contextmanager
def mount(*args: str, target: Path) -> Iterator[None]:
    subprocess.run(["mount", *args, str(target)], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False, capture_output=True)


def agentd(config: Path, *args: str, without_dac: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "agentd", "--config", str(config), *args]
    if without_dac:
        caps = "-dac_override,-dac_read_search"
        argv = ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", *argv]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd="/")


def one_clear_line(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("agentd:")]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    config = agent_config(tmp_path)
    assert agentd(config, "init").returncode == 0
    assert agentd(config, "task", "add", "--type", "example", "--subject", "before").returncode == 0
    return config


@needs_root
def test_a_full_disk_is_one_line_for_commands_and_services(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    with mount("-t", "tmpfs", "-o", "size=2m", "tmpfs", target=state):
        config = agent_config(tmp_path)
        assert agentd(config, "init").returncode == 0
        # Fill every last block, unbuffered: a buffered file would hold what did not fit and raise at close.
        with open(state / "filler", "wb", buffering=0) as filler:
            try:
                while True:
                    filler.write(b"\0" * 65536)
            except OSError:
                pass
        added = agentd(config, "task", "add", "--type", "example")
        one_clear_line(added, 2, str(state), "the disk is full")
        service = agentd(config, "dispatch", "--until-idle")
        one_clear_line(service, 1, "the disk is full")  # exit 1: systemd restarts it once there is space
        listed = agentd(config, "task", "list", "--json")
        assert listed.returncode == 0, listed.stderr  # reading still works on a full disk
        (state / "filler").unlink()
        assert agentd(config, "task", "add", "--type", "example").returncode == 0


@needs_root
def test_a_read_only_state_dir_still_answers_read_only_commands(agent: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with mount("--bind", "-o", "ro", str(state), target=state):
        for args in (("status",), ("task", "list"), ("task", "show", "1"), ("events",), ("workflow", "list")):
            result = agentd(agent, *args)
            assert result.returncode == 0 and "Traceback" not in result.stderr, (args, result.stderr)
        assert "before" in agentd(agent, "task", "list").stdout
        one_clear_line(agentd(agent, "task", "add", "--type", "example"), 2, "read-only")
        one_clear_line(agentd(agent, "init"), 2, "read-only")
        one_clear_line(agentd(agent, "dispatch", "--until-idle"), 1, "read-only")


@needs_root
def test_a_read_only_copy_of_a_state_dir_can_be_inspected(agent: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "state", copy)
    (copy / "agentd.db-shm").unlink(missing_ok=True)  # a copy taken without the live -shm file
    config = agent_config(tmp_path / "copied", lambda raw: raw["paths"].update(state_dir=str(copy)))
    with mount("--bind", "-o", "ro", str(copy), target=copy):
        shown = agentd(config, "task", "show", "1", "--json")
        assert shown.returncode == 0, shown.stderr
        assert '"subject": "before"' in shown.stdout


@pytest.mark.deep
@needs_root
def test_a_user_who_cannot_read_the_state_dir_gets_one_line(agent: Path, tmp_path: Path) -> None:
    """The state dir belongs to another user; agentd runs without the power to override that
    (root with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped: the checks an ordinary user meets)."""
    state = tmp_path / "state"
    owned = [state, *state.rglob("*")]
    for path in owned:
        os.chown(path, 65534, 65534)
    try:
        for args in (("status",), ("task", "list"), ("task", "add", "--type", "example"), ("events",), ("init",)):
            one_clear_line(agentd(agent, *args, without_dac=True), 2, "permission denied", "sudo -u agentd")
    finally:  # leave nothing pytest's own cleanup (run in a user namespace by make test-harness) cannot remove
        for path in owned:
            os.chown(path, 0, 0)


def test_a_write_lock_held_past_the_busy_timeout_is_waited_for(
    config: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_base, "BUSY_TIMEOUT_MS", 50)  # SQLite's own wait: shorter than the hold
    migrate(config.db_path, clock)
    store = open_store(config.db_path, clock)
    holder = sqlite3.connect(config.db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.6, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        intent = TaskIntent(task_type="example", source="test", payload={})
        task = store.enqueue_task(admit_task(intent, config, clock.now(), trusted=True), clock.now())
        assert task.task_id == 1  # retried with backoff until the lock was free
        holder.execute("BEGIN IMMEDIATE")
        store.busy_retry_s = 0.3
        with pytest.raises(StorageError, match="another process holds its write lock"):
            store.enqueue_task(admit_task(intent, config, clock.now(), trusted=True), clock.now())
    finally:
        release.join()
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
        store.close()


def test_the_units_keep_restarting_through_a_disk_full_lasting_minutes() -> None:
    """A service exits 1 on an unusable disk; systemd must keep restarting it for 10+ minutes, and
    must not restart on exit 2 (a configuration error a restart cannot fix)."""
    from support import REPO

    for unit in ("agentd-dispatch@.service", "agentd-sensors@.service"):
        settings = dict(
            line.split("=", 1) for line in (REPO / "units" / unit).read_text().splitlines() if "=" in line[:40]
        )
        restart_s = float(settings["RestartSec"].removesuffix("s"))
        burst, window = int(settings["StartLimitBurst"]), float(settings["StartLimitIntervalSec"])
        assert restart_s * burst >= 600 and window >= restart_s * burst * 0.9, unit
        assert settings["RestartPreventExitStatus"] == "2", unit
