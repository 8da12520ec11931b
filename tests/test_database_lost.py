"""A database that is no longer the one a service opened (issue 23, finding 6): deleted (the file, its
-wal and -shm) or replaced by another file under a running service. The service must notice at its next
transaction or heartbeat and exit 1 with one line, claiming nothing more: a ghost that goes on writing to
an unlinked inode completes work whose results nobody will ever read, and holds the metrics port.

Real `agentd dispatch` and `agentd sensors` processes on a real state dir; the test deletes or replaces
the file under them."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from support import agent_config, wait_until

from agentd.clock import SystemClock
from agentd.config import Config
from agentd.records import TaskIntent
from agentd.store import init_state_dir, migrate, open_store
from agentd.work.intake import admit_task
from agentd.work.validation import load_config

pytestmark = pytest.mark.process


class Agent:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.config_path = agent_config(directory)
        self.config: Config = load_config(self.config_path)
        init_state_dir(self.config.paths.state_dir, self.config.paths.workspace)
        migrate(self.config.db_path, SystemClock())
        self.processes: list[subprocess.Popen[bytes]] = []

    def add(self, count: int, **payload: Any) -> None:
        store = open_store(self.config.db_path, SystemClock())
        try:
            for n in range(count):
                intent = TaskIntent(task_type="scripted", source="test", subject=f"task {n}", payload=payload)
                now = SystemClock().now()
                store.enqueue_task(admit_task(intent, self.config, now, trusted=True), now)
        finally:
            store.close()

    def start(self, service: str) -> subprocess.Popen[bytes]:
        self.log = self.directory / f"{service}.log"
        with open(self.log, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "agentd", "--config", str(self.config_path), service],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.processes.append(process)
        return process

    def seen(self, sql: str) -> bool:
        store = open_store(self.config.db_path, SystemClock(), readonly=True)
        try:
            return bool(store._conn.execute(sql).fetchone()[0])
        finally:
            store.close()

    def folders(self) -> set[Path]:
        return set((self.config.paths.state_dir / "attempts").glob("*/*"))

    def database_files(self) -> list[Path]:
        db = self.config.db_path
        return [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    made = Agent(tmp_path)
    yield made
    made.close()


def one_line_exit(agent: Agent, process: subprocess.Popen[bytes], needle: str, within: float) -> str:
    started = time.monotonic()
    try:
        code = process.wait(timeout=within)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running {within}s later (a ghost):\n{agent.log.read_text()[-2000:]}") from None
    took = time.monotonic() - started
    log = agent.log.read_text()
    lines = [line for line in log.splitlines() if line.startswith("agentd:")]
    assert code == 1, (code, log[-2000:])
    assert "Traceback" not in log, log[-3000:]
    assert len(lines) == 1 and needle in lines[0], log[-2000:]
    return f"{lines[0]} ({took:.1f}s)"


def lose_database(agent: Agent, how: str) -> None:
    """The database under a running service `deleted` (every file of it) or `replaced` (replace_database)."""
    if how == "deleted":
        for path in agent.database_files():
            path.unlink(missing_ok=True)
    else:
        replace_database(agent)


def replace_database(agent: Agent) -> None:
    """Another database file where the service's was (a restore done under it): a consistent copy,
    renamed over the path; the service's connection still has the old inode."""
    db = agent.config.db_path
    fresh = db.with_name("restored.db")
    with closing(sqlite3.connect(db)) as source, closing(sqlite3.connect(fresh)) as target:
        source.backup(target)
    os.replace(fresh, db)


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_dispatcher_whose_database_is_deleted_or_replaced_exits_1_and_claims_nothing_more(
    agent: Agent, how: str
) -> None:
    agent.add(40, sleep_s=0.2, outcome={"status": "completed", "machine_status": "ok", "operator_summary": "ok"})
    dispatcher = agent.start("dispatch")
    wait_until(lambda: agent.seen("SELECT count(*) FROM events WHERE type = 'task_started'"), 30, "a task to start")
    before = agent.folders()
    lose_database(agent, how)
    one_line_exit(agent, dispatcher, f"was {how}", within=20)
    claimed_after = agent.folders() - before
    assert len(claimed_after) <= 1, f"claimed after the database was {how}: {sorted(claimed_after)}"  # one in flight


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_the_sensor_service_exits_1_too(agent: Agent, how: str) -> None:
    sensors = agent.start("sensors")
    wait_until(lambda: agent.seen("SELECT count(*) FROM service_status WHERE service = 'sensors'"), 30, "its row")
    lose_database(agent, how)
    one_line_exit(agent, sensors, f"was {how}", within=20)
