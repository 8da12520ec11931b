from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import EXAMPLE_CONFIG, CliResult

from agentd.cli import main
from agentd.clock import FakeClock
from agentd.config import Config, load_config
from agentd.store import Store, migrate, open_store


@pytest.fixture(autouse=True)
def _clean_agentd_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's AGENTD_* variables."""
    import os

    for name in list(os.environ):
        if name.startswith("AGENTD_"):
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
