from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import EXAMPLE_CONFIG, CliResult

from agentd.cli import main
from agentd.clock import FakeClock
from agentd.config import Config
from agentd.store import Store, migrate, open_store
from agentd.validation import load_config


@pytest.fixture(autouse=True)
def _clean_agentd_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's config overrides (AGENTD_CONFIG, AGENTD_<SECTION>__<KEY>);
    variables that steer the test run itself (AGENTD_HARNESS_CACHE, …) stay."""
    import os

    for name in list(os.environ):
        if name == "AGENTD_CONFIG" or (name.startswith("AGENTD_") and "__" in name):
            monkeypatch.delenv(name)


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the example config at a temp state dir and workspace, as tests and benchmarks do."""
    state = tmp_path / "state"
    monkeypatch.setenv("AGENTD_PATHS__STATE_DIR", str(state))
    monkeypatch.setenv("AGENTD_PATHS__WORKSPACE", str(tmp_path / "workspace"))
    return state


@pytest.fixture
def config(state_dir: Path) -> Config:
    return load_config(EXAMPLE_CONFIG)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(config: Config, clock: FakeClock) -> Iterator[Store]:
    migrate(config.db_path, clock)
    opened = open_store(config.db_path, clock)
    yield opened
    opened.close()


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], state_dir: Path) -> Callable[..., CliResult]:
    """Run `agentd --config <example> ARGS…` in-process against the temp state dir."""

    def run(*args: str, config: Path | None = None) -> CliResult:
        capsys.readouterr()
        code = main(["--config", str(config or EXAMPLE_CONFIG), *args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


class Rig:
    """A test agent: config, migrated store, and dispatchers on a fake clock."""

    def __init__(self, config: Config, clock: FakeClock) -> None:
        from agentd.store import AsyncStore, init_state_dir

        self.config, self.clock = config, clock
        init_state_dir(config.paths.state_dir, config.paths.workspace)
        migrate(config.db_path, clock)
        self.store = open_store(config.db_path, clock)
        self.db = AsyncStore(open_store(config.db_path, clock))

    def dispatcher(self, seed: int = 7) -> Any:
        import random

        from agentd.dispatch import Dispatcher

        return Dispatcher(self.config, self.db, clock=self.clock, rng=random.Random(seed))

    def add(self, task_type: str = "example", **fields: Any) -> Any:
        from agentd.intake import admit_task
        from agentd.records import TaskIntent

        intent = TaskIntent.model_validate({"task_type": task_type, "source": "test", "payload": {}, **fields})
        return self.store.enqueue_task(
            admit_task(intent, self.config, self.clock.now(), trusted=True), self.clock.now()
        )

    def events(self, task_id: int | None = None) -> list[Any]:
        return self.store.read_events(task_id=task_id, limit=100_000)

    def close(self) -> None:
        self.store.close()
        self.db.close()


@pytest.fixture
def rig_factory(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., Rig]]:
    from support import agent_config

    made: list[Rig] = []

    def make(mutate: Callable[[dict[str, Any]], None] | None = None) -> Rig:
        rig = Rig(load_config(agent_config(tmp_path, mutate)), clock)
        made.append(rig)
        return rig

    yield make
    for rig in made:
        rig.close()


@pytest.fixture
def rig(rig_factory: Callable[..., Rig]) -> Rig:
    return rig_factory()


@pytest.fixture
def sensors_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "sensors"
    folder.mkdir()
    return folder


@pytest.fixture
def sensing(rig_factory: Callable[..., Any], sensors_dir: Path) -> Callable[[], Any]:
    """A rig whose sensors_dir is the test's, and a SensorService on it."""

    def make() -> Any:
        rig = rig_factory(lambda raw: raw["paths"].update(sensors_dir=str(sensors_dir)))
        from agentd.sensor_service import SensorService

        rig.service = SensorService(rig.config, rig.db, clock=rig.clock)
        return rig

    return make
