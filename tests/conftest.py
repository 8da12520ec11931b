from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings
from rig import Rig, migrated
from support import EXAMPLE_CONFIG, CliResult, run_main

from agentd.clock import FakeClock
from agentd.config import Config
from agentd.process import containment
from agentd.store import Store, init_state_dir, open_store
from agentd.work.validation import load_config

if TYPE_CHECKING:
    from webrig import WebRig  # the console and its server: imported by the tests that use it

# No per-example deadline: a property test judges behaviour, and its speed on a loaded 2-core VM is no
# behaviour (performance targets live in `make bench`). The per-test timeout still bounds a run.
settings.register_profile("agentd", deadline=None)
settings.load_profile("agentd")


SESSION_STARTED: list[float] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    import time

    SESSION_STARTED.append(time.monotonic())


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The run's measurement, printed by the run itself (the docs give no number that was true once:
    docs/testing.md, "The tiers"): tests, wall time, and the CPU of this process and every process it
    started and waited for (the xdist workers, and through them the agentd processes the tests ran)."""
    import os
    import resource
    import time

    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    ran = sum(len(terminalreporter.stats.get(what, [])) for what in ("passed", "failed", "error"))
    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(usage.ru_utime + usage.ru_stime for usage in used)
    wall = time.monotonic() - SESSION_STARTED[0]
    terminalreporter.write_line(f"measured: {ran} tests in {wall:.0f} s of wall time, {cpu:.0f} s of CPU")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every hypothesis test is marked `property`: `make test-slow` runs them all at their full example
    count (tests/support.py `examples`)."""
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)


@pytest.fixture(autouse=True)
def _the_fast_tier_starts_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """`make test-fast` is the tier without child processes (docs/testing.md, "The tiers"): a test it runs
    that starts one fails at its end, naming what it started, so the test is marked `process` instead
    of the inner loop growing slow unseen."""
    import os
    import subprocess

    if os.environ.get("AGENTD_TEST_TIER") != "fast" or request.node.get_closest_marker("process"):
        yield
        return
    started: list[str] = []
    execute = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def noted(self: Any, args: Any, *rest: Any, **kwargs: Any) -> Any:
        started.append(str(args[0] if isinstance(args, list | tuple) else args))
        return execute(self, args, *rest, **kwargs)

    subprocess.Popen._execute_child = noted  # type: ignore[attr-defined]
    try:
        yield
    finally:
        subprocess.Popen._execute_child = execute  # type: ignore[attr-defined]
    if started:
        pytest.fail(f"the fast tier starts no process, and this test started {started[:3]}: mark it `process`")


@pytest.fixture(autouse=True)
def _clean_agentd_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's config overrides (AGENTD_CONFIG, AGENTD_<SECTION>__<KEY>);
    variables that steer the test run itself (AGENTD_HARNESS_CACHE, …) stay."""
    import os

    for name in list(os.environ):
        if name == "AGENTD_CONFIG" or (name.startswith("AGENTD_") and "__" in name):
            monkeypatch.delenv(name)
    # No test binds a fixed port: the suite passes beside a running agentd (and in parallel).
    monkeypatch.setenv("AGENTD_METRICS__DISPATCH_LISTEN", "127.0.0.1:0")
    monkeypatch.setenv("AGENTD_METRICS__SENSORS_LISTEN", "127.0.0.1:0")
    monkeypatch.setenv("AGENTD_WEB__LISTEN", "127.0.0.1:0")  # the console `agentd run` starts too


@pytest.fixture(autouse=True)
def _release_cgroups() -> Iterator[None]:
    """The runs a test made in-process leave no cgroup namespace behind on the machine (a service
    the test started as a process releases its own when it stops)."""
    yield
    containment.release_namespaces()


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
    init_state_dir(config.paths.state_dir)
    migrated(config.db_path, clock)  # a copy of one migrated file per worker (tests/rig.py)
    opened = open_store(config.db_path, clock)
    yield opened
    opened.close()


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], state_dir: Path) -> Callable[..., CliResult]:
    """Run `agentd --config <example> ARGS…` in-process against the temp state dir."""

    def run(*args: str, config: Path | None = None) -> CliResult:
        return run_main(capsys, config or EXAMPLE_CONFIG, *args)

    return run


@pytest.fixture
def initialised(cli: Callable[..., CliResult]) -> Callable[..., CliResult]:
    """`cli` after `agentd init` (it exited 0) made the temp state dir."""
    result = cli("init")
    assert result.code == 0, result.err
    return cli


@pytest.fixture
def rig_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliResult]:
    """Run `agentd --config <the rig's config> ARGS…` in-process: `rig_cli(rig, *args)`; with `state_dir=`,
    that run and every later one in the test read the state dir given (AGENTD_PATHS__STATE_DIR)."""

    def run(rig: Rig, *args: str, state_dir: Path | None = None) -> CliResult:
        if state_dir is not None:
            monkeypatch.setenv("AGENTD_PATHS__STATE_DIR", str(state_dir))
        return run_main(capsys, rig.config.path, *args)

    return run


@pytest.fixture
def rig_factory(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., Rig]]:
    from support import agent_config

    made: list[Rig] = []

    def make(mutate: Callable[[dict[str, Any]], None] | None = None, directory: Path | None = None) -> Rig:
        """A rig on the test's directory, or on `directory` (a second agent with a state of its own)."""
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
        rig = Rig(load_config(agent_config(directory or tmp_path, mutate)), clock)
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
def sensing(rig_factory: Callable[..., Rig], sensors_dir: Path) -> Callable[[], Rig]:
    """A rig whose sensors_dir is the test's (its `service` runs them)."""

    def make() -> Rig:
        return rig_factory(lambda raw: raw["paths"].update(sensors_dir=str(sensors_dir)))

    return make


@pytest.fixture
def web(rig: Rig) -> Iterator[WebRig]:
    """The rig's web console served on a loopback port (tests/webrig.py). A test module that
    needs another rig under its console defines its own `web`."""
    from webrig import serving

    with serving(rig) as served:
        yield served


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Any]:
    """A real PostgreSQL for this session (tests/pg.py); skips by name where none can run."""
    import pg

    pg.require()
    with pg.cluster() as running:
        yield running


@pytest.fixture
def dsn(pg_cluster: Any) -> str:
    """A database of the test's own in the session's PostgreSQL."""
    return str(pg_cluster.new_database())


@pytest.fixture
def queue(dsn: str) -> Iterator[Any]:
    """The fleet's queue, migrated, in the test's own database."""
    from agentd.store.fleet import FleetQueue

    opened = FleetQueue.open(dsn)
    opened.migrate()
    yield opened
    opened.close()
