"""The test agent: a config, a migrated SQLite file, dispatchers and a sensor service on a fake clock.

A rig's dispatcher runs its adapters in this process (tests/inprocess.py) unless a test asks for real
processes (`rig.dispatcher(processes=True)`): the fast tier needs no child processes."""

from __future__ import annotations

import os
import random
import tempfile
from datetime import datetime
from pathlib import Path

from inprocess import in_process
from support import ok

from agentd.clock import FakeClock
from agentd.config import Config
from agentd.records import RuntimeEvent, TaskIntent, TaskRecord
from agentd.services.dispatch import Dispatcher
from agentd.services.sensing import SensorService
from agentd.store import AsyncStore, Store, init_state_dir, migrate, open_store
from agentd.work.intake import admit_task


class Rig:
    def __init__(self, config: Config, clock: FakeClock) -> None:
        self.config, self.clock = config, clock
        init_state_dir(config.paths.state_dir, config.paths.workspace)
        migrated(config.db_path, clock)
        self.store: Store = open_store(config.db_path, clock)
        self.db = AsyncStore(open_store(config.db_path, clock))
        self.service = SensorService(config, self.db, clock=clock)

    def dispatcher(self, seed: int = 7, *, processes: bool = False) -> Dispatcher:
        """In-process adapters unless `processes`: then the real ones in tests/adapters/."""
        if processes:
            return Dispatcher(self.config, self.db, clock=self.clock, rng=random.Random(seed))
        return Dispatcher(self.config, self.db, clock=self.clock, rng=random.Random(seed), adapters=in_process)

    async def drain(self, *, processes: bool = False) -> int:
        """A fresh dispatcher started, run until nothing more is claimable, and stopped: how many it claimed."""
        dispatcher = self.dispatcher(processes=processes)
        await dispatcher.start()
        claimed = await dispatcher.run_until_idle()
        await dispatcher.stop()
        return claimed

    async def completed_task(self) -> int:
        """A scripted task run to completion by a fresh dispatcher (its evidence there to show): its id."""
        task_id = self.add("scripted", payload={"outcome": ok()}).task_id
        await self.drain()
        return task_id

    def add(self, task_type: str = "example", **fields: object) -> TaskRecord:
        intent = TaskIntent.model_validate({"task_type": task_type, "source": "test", "payload": {}, **fields})
        return self.store.enqueue_task(
            admit_task(intent, self.config, self.clock.now(), trusted=True), self.clock.now()
        )

    def events(self, task_id: int | None = None) -> list[RuntimeEvent]:
        return self.store.read_events(task_id=task_id, limit=100_000)

    def close(self) -> None:
        self.store.close()
        self.db.close()


_MIGRATED: dict[datetime, tuple[bytes, int]] = {}  # one freshly migrated file per clock instant, per worker


def migrated(path: Path, clock: FakeClock) -> None:
    """`path` as `agentd migrate` leaves a new database at the clock's now: migrated once per worker
    and instant, then copied (a real migrated SQLite file, without every migration's commits per test)."""
    if path.exists():  # a second rig on the same agent: what `agentd migrate` does to an existing file
        migrate(path, clock)
        return
    now = clock.now()
    if now not in _MIGRATED:
        with tempfile.TemporaryDirectory() as scratch:
            fresh = Path(scratch) / "agent.db"
            migrate(fresh, clock)  # its last connection closed: the WAL is checkpointed into the file
            _MIGRATED[now] = (fresh.read_bytes(), fresh.stat().st_mode & 0o777)
    data, mode = _MIGRATED[now]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
