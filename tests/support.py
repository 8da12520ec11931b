"""Helpers the tests share: config variants in a temp dir and an in-process CLI runner."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest
import tomli_w

if TYPE_CHECKING:
    from agentd.records import TaskRecord

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_CONFIG = REPO / "config" / "identity.example.toml"
HARNESS_FIXTURES = REPO / "tests" / "fixtures" / "harness"  # recorded by `make record-fixtures`
REFERENCE_DIR = "AGENTD_REFERENCE_DIR"


# --- what the suite needs from outside the repo ---------------------------------------------------


def missing(what: str, reason: str) -> NoReturn:
    """Skip the test, naming what is missing, unless AGENTD_REQUIRE_<WHAT> is set: then it fails.

    CI sets the variables (.ci/run), so what a developer's machine may lack is never skipped there.
    """
    variable = f"AGENTD_REQUIRE_{what}"
    if os.environ.get(variable, "") not in ("", "0"):
        pytest.fail(f"{reason} ({variable} is set: this is required here)")
    pytest.skip(f"{reason} (set {variable}=1 to make this a failure)")


def reference_dir(part: str) -> Path:
    """A folder of the third-party reference (the Agent Runtime schemas, the harness samples captured
    elsewhere): not part of this repo, found only through $AGENTD_REFERENCE_DIR. The one place the suite
    looks outside the checkout; without it the test skips by name (fails with AGENTD_REQUIRE_REFERENCE=1)."""
    root = os.environ.get(REFERENCE_DIR, "")
    if not root:
        missing("REFERENCE", f"{REFERENCE_DIR} is not set: the third-party reference ({part}) is not part of this repo")
    path = Path(root) / part
    if not path.is_dir():
        missing("REFERENCE", f"{path} is not a directory ({REFERENCE_DIR}={root})")
    return path


def harness_fixture(name: str) -> Path:
    """One recorded harness output in tests/fixtures/harness/ (always there: it is part of the repo)."""
    path = HARNESS_FIXTURES / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: `make record-fixtures` records it (tests/harness/README.md)")
    return path


def example_raw() -> dict[str, Any]:
    return tomllib.loads(EXAMPLE_CONFIG.read_text())


def write_config(
    directory: Path,
    mutate: Callable[[dict[str, Any]], None] | None = None,
    *,
    text: str | None = None,
    name: str = "agent.toml",
) -> Path:
    """A copy of the example config folder in `directory`, its TOML changed by `mutate`.

    State and workspace go under `directory`; skills and sensors stay the repository's.
    """
    config_dir = directory / "config"
    if not config_dir.exists():
        shutil.copytree(REPO / "config", config_dir)
    path = config_dir / name
    if text is not None:
        path.write_text(text)
        return path
    raw = example_raw()
    # The example's force-push rules are docs/policy.md's; a test agent has no tool policy unless the test
    # gives it one (its claude and codex stand-ins run no hook, and the contract's traces hold no decisions).
    raw.pop("policy", None)
    raw["paths"] = {
        "state_dir": str(directory / "state"),
        "workspace": str(directory / "workspace"),
        "skills_dir": str(REPO / "skills"),
        "sensors_dir": str(REPO / "sensors"),
    }
    if mutate is not None:
        mutate(raw)
    path.write_text(tomli_w.dumps(raw))
    return path


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


def run_main(capsys: Any, config: Path, *args: str) -> CliResult:
    """`agentd --config CONFIG ARGS…` in-process (capsys: pytest's): its exit code and what it printed."""
    from agentd.cli import main

    capsys.readouterr()
    code = main(["--config", str(config), *args])
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


ADAPTERS = REPO / "tests" / "adapters"


def agent_config(directory: Path, mutate: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """The example config with test adapters and task types added:

    - task type `example` on adapter `script` (tests/adapters/complete.sh): completes with a report
    - task type `scripted` on adapter `scripted` (tests/adapters/scripted.py): does what its payload says
    - task type `flaky` on adapter `fails` (tests/adapters/always_fails.sh): always a retryable failure
    - task types `plan`, `execute`, `verify` (the goal-loop) on adapter `stepper` (tests/adapters/stepper.py)
    """

    def add(raw: dict[str, Any]) -> None:
        scripts = {
            "script": "complete.sh",
            "scripted": "scripted.py",
            "fails": "always_fails.sh",
            "stepper": "stepper.py",
        }
        raw["adapters"] = [
            {"adapter_id": name, "kind": "script", "command": str(ADAPTERS / file), "timeout_ms": 30_000}
            for name, file in scripts.items()
        ]
        for spec in raw["task_types"]:
            if spec["task_type"] in ("plan", "execute", "verify"):
                spec["default_adapter_id"] = "stepper"
                spec["payload_schema_id"] = "agent-runtime/payload.any-object/v1"
        raw["task_types"] += [
            {
                "task_type": "scripted",
                "payload_schema_id": "agent-runtime/payload.any-object/v1",
                "default_profile_id": "operator",
                "default_adapter_id": "scripted",
                "artifact_roles": ["output"],
            },
            {
                "task_type": "flaky",
                "payload_schema_id": "agent-runtime/payload.any-object/v1",
                "default_profile_id": "operator",
                "default_adapter_id": "fails",
            },
        ]
        raw["dispatch"].update(kill_grace_s=1.0, lock_heartbeat_s=1.0)
        if mutate is not None:
            mutate(raw)

    return write_config(directory, add)


def adapter_env_file(path: Path, text: str, adapter_id: str = "scripted") -> Callable[[dict[str, Any]], None]:
    """`text` written to `path` (its owner's only, as an env_file must be) and `with_env_file(path)`."""
    path.write_text(text)
    path.chmod(0o600)
    return with_env_file(path, adapter_id)


def with_env_file(path: Path, adapter_id: str = "scripted") -> Callable[[dict[str, Any]], None]:
    """A config change giving adapter `adapter_id` the file `path` as its env_file."""

    def mutate(raw: dict[str, Any]) -> None:
        for adapter in raw["adapters"]:
            if adapter["adapter_id"] == adapter_id:
                adapter["env_file"] = str(path)

    return mutate


# --- sensors --------------------------------------------------------------------------------

EVENT = """
def event(key, **extra):
    from datetime import datetime, timezone
    body = {{"event_id": "e-" + str(key), "observed_at": datetime.now(timezone.utc).isoformat(),
             "source_ref": "test", "dedupe_key": str(key), "payload": {{"key": key}},
             "proposed_task": {{"task_type": "example", "source": "x", "subject": "task " + str(key),
                                "payload": {{}}}}}}
    body.update(extra)
    return json.dumps(body)
"""


def write_sensor(
    root: Path, sensor_id: str, body: str, *, interval: float = 60, timeout: float = 30, **manifest: Any
) -> None:
    folder = root / sensor_id
    folder.mkdir(parents=True)
    script = folder / "sense.py"
    script.write_text(f"#!{sys.executable}\nimport json, os, sys, time\n{EVENT.format()}\n{body}\n")
    script.chmod(0o755)
    fields = {
        "description": f"test sensor {sensor_id}",
        "interval_seconds": interval,
        "timeout_seconds": timeout,
        "command": ["./sense.py"],
        **manifest,
    }
    (folder / "sensor.toml").write_text(tomli_w.dumps(fields))


# --- outcomes and tasks ---------------------------------------------------------------------


def ok(**fields: Any) -> dict[str, Any]:
    """A completed outcome as an adapter reports one, with `fields` added or replaced."""
    return {"status": "completed", "machine_status": "ok", "operator_summary": "did it", **fields}


def task_record(at: datetime, **fields: Any) -> TaskRecord:
    """A running task's record as the store hands one over, every time `at`, with `fields` replaced."""
    base = {
        "task_id": 7, "task_type": "example", "source": "test", "subject": "write the report", "description": None,
        "priority": 5, "payload": {"note": "hello"}, "requested_profile_id": "operator", "requested_adapter_id": None,
        "requested_model": None, "status": "running", "max_attempts": 3, "attempt_count": 1,
        "available_at": at, "created_at": at, "updated_at": at, "started_at": at,
        "finished_at": None, "outcome": None, "last_error": None, "skill_ids": [], "evidence_requirements": None,
        "workflow_ref": None, "workflow_iteration": None, "schedule_id": None, "free_attempt_count": 0,
        "rate_limit_count": 0, "cancel_requested_at": None,
    }  # fmt: skip
    from agentd.records import TaskRecord

    return TaskRecord(**{**base, **fields})


def waiting(**counts: int) -> dict[str, int]:
    """`agentd status`'s counts of the tasks that wait, by reason: 0 but for `counts`."""
    reasons = ("claimable", "retry_waiting", "delayed", "approval", "paused", "after", "budget", "resting")
    return {**dict.fromkeys(reasons, 0), **counts}


def plain_env(tmp_path: Path) -> dict[str, str]:
    """An environment of only the system's PATH and a state dir and workspace under `tmp_path`: what a newcomer's
    shell gives a real `agentd` process, with nothing of the test run's."""
    return {
        "PATH": "/usr/bin:/bin",
        "AGENTD_PATHS__STATE_DIR": str(tmp_path / "s"),
        "AGENTD_PATHS__WORKSPACE": str(tmp_path / "w"),
    }


def budgeted(**budget: Any) -> Callable[[dict[str, Any]], None]:
    """A config change setting the [budget] table to `budget`."""

    def mutate(raw: dict[str, Any]) -> None:
        raw["budget"] = budget

    return mutate


def sql(rig: Any, statement: str, *params: Any) -> None:
    """One statement straight into the rig's database, past the store (what tampering or an old build leaves)."""
    import sqlite3

    with sqlite3.connect(rig.config.db_path) as conn:
        conn.execute(statement, params)


def events_of(rig: Any, kind: str, task_id: int | None = None) -> list[Any]:
    """The rig's events of type `kind` (of one task if given), oldest first."""
    return [e for e in rig.events(task_id) if e.type == kind]


def port_of(web: Any) -> int:
    """The port a served console (tests/webrig.py) listens on."""
    from urllib.parse import urlsplit

    port = urlsplit(web.url).port
    assert port is not None
    return port


def harness_sample(name: str) -> str:
    """The text of one recorded harness output (harness_fixture)."""
    return harness_fixture(name).read_text(encoding="utf-8")


def fleet_cli(capsys: Any, dsn: str, *args: str) -> CliResult:
    """`agentd fleet ARGS… --dsn DSN` in-process against the example config."""
    return run_main(capsys, EXAMPLE_CONFIG, "fleet", *args, "--dsn", dsn)


def attempt_planner(rig: Any) -> Any:
    """`plan_attempt` bound to the rig's config: what the dispatcher calls to plan a claimed task's attempt."""
    import functools

    from agentd.attempt.prepare import plan_attempt

    return functools.partial(plan_attempt, rig.config)


def task_subjects(rig: Any) -> list[str]:
    return sorted(t.subject for t in rig.store.list_tasks(limit=100_000))


def outcome_disagreements(tasks: list[Any]) -> list[str]:
    """Tasks whose stored outcome does not say their status (issue 21): every task waiting for a retry
    or ended must carry an outcome, and its status must be the task's."""
    waiting_or_ended = ("retryable_failure", "completed", "permanent_failure", "blocked", "operator_canceled")
    return [
        f"task {t.task_id} is {t.status}; its outcome says {t.outcome.status if t.outcome else 'nothing'}"
        for t in tasks
        if t.status in waiting_or_ended and (t.outcome is None or t.outcome.status != t.status)
    ]


def alive(pid: int) -> bool:
    """Running now, not a zombie: what a test asserts of a process that was meant to escape."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone(pid: int, within_s: float = 2.0) -> bool:
    """Dead (or a zombie) within `within_s`: a SIGKILLed process closes its files before the kernel
    reports it dead, so the caller's EOF can come a moment earlier. Looks every 5 ms."""
    deadline, pause = time.monotonic() + within_s, threading.Event()
    while alive(pid):
        if time.monotonic() >= deadline:
            return False
        pause.wait(0.005)
    return True


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `condition` every 50 ms until it is truthy (its value is returned) or `timeout` seconds
    pass (AssertionError naming `what`): a hard deadline, never a fixed sleep."""
    deadline, pause = time.monotonic() + timeout, threading.Event()
    while time.monotonic() < deadline:
        if result := condition():
            return result
        pause.wait(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def run_in_threads(target: Callable[..., Any], args: list[tuple[Any, ...]], timeout: float) -> None:
    """`target(*each)` for each of `args`, each in a thread of its own, all started before any is joined
    (each join waits at most `timeout` seconds)."""
    threads = [threading.Thread(target=target, args=each) for each in args]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)


def reading_stdin(pid: int) -> bool:
    """The process is blocked reading its stdin, a pipe (the kernel's own word for where it sleeps)."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text()
        fd = Path(f"/proc/{pid}/syscall").read_text().split()[1]
    except (OSError, IndexError):
        return False
    return "pipe" in wchan and fd == "0x0"


def stopped_while_reading(argv: list[str], given: bytes, signal_name: str) -> None:
    """`argv`, a batch command reading stdin, is given `given` with stdin kept open (more could come) and is
    sent `signal_name` while it waits: it ends at once, by that signal, saying it wrote nothing."""
    import signal
    import subprocess

    running = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ)
    )
    try:
        assert running.stdin is not None
        running.stdin.write(given)
        running.stdin.flush()  # and kept open: more could come
        wait_until(lambda: reading_stdin(running.pid), 60, "the batch waiting on stdin")
        running.send_signal(getattr(signal, signal_name))
        code = running.wait(timeout=30)
    finally:
        running.kill()
        out, err = running.communicate()
    assert code == 128 + getattr(signal, signal_name), err
    assert err.decode() == f"agentd: stopped by {signal_name}; nothing was written\n" and out == b""


def examples(full: int) -> int:
    """A property test's example count: `make test` runs a quarter, `make test-fast` (AGENTD_TEST_TIER=fast,
    the inner loop) a tenth, both at least 10; `make test-slow` (AGENTD_TEST_TIER=slow, which CI runs) all
    of them (docs/testing.md, "Property tests")."""
    tier = os.environ.get("AGENTD_TEST_TIER")
    return full if tier == "slow" else max(full // (10 if tier == "fast" else 4), 10)


def serve_in_thread(server: Any) -> Any:
    """A loopback test server serving in a daemon thread; `server.shutdown()` returns within one poll
    (10 ms here, where socketserver's default half second was what many tests waited for at their end)."""
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    return thread


def accept_each(listener: socket.socket, each: Callable[[socket.socket], None]) -> None:
    """Accept on `listener` in a daemon thread, handing `each` every connection, until the listener is closed."""

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            each(conn)

    threading.Thread(target=serve, daemon=True).start()


def tree(root: Path) -> dict[str, str]:
    """Every file below `root` (but SQLite's -shm and -wal) and its SHA-256: what a read-only command must leave."""
    import hashlib

    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(("-shm", "-wal"))
    }


def ran_ok(done: Any) -> str:
    """A finished process (subprocess.CompletedProcess) that exited 0; its stdout."""
    assert done.returncode == 0, done.stdout + done.stderr
    return str(done.stdout)


def nest(root: Path, depth: int, leaf: str | None = None) -> None:
    """`depth` folders `d`, one inside another, in `root` (each made relative to the last, so past what
    one path may name: PATH_MAX), and a file `leaf` in the innermost if given. What an attempt may leave."""
    folder = os.open(root, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=folder)
        inner = os.open("d", os.O_RDONLY, dir_fd=folder)
        os.close(folder)
        folder = inner
    if leaf is not None:
        (Path(f"/proc/self/fd/{folder}") / leaf).write_text("the attempt's")
    os.close(folder)


# Issue 50, finding 2: a call held for a person whose command hides its tail behind padding. Each padding
# below, between a harmless head and the tail, must leave the tail in view wherever the call is shown.
HIDDEN_HEAD, HIDDEN_TAIL = "curl -s https://docs.example.org/readme", "; touch hidden_marker"
PADDINGS = {
    "spaces": " " * 520,
    "tabs": "\t" * 520,
    "newlines": "\n" * 520,
    "unicode spaces": "\u2003\u00a0\u3000\u200b" * 130,
    "ansi escape": "\x1b[2K\r",
}


def in_view(text: str, padding: str) -> bool:
    """Each line of `text` that shows the command's head shows its hidden tail too, and nothing of the
    padding but a space (or a line's end) is in `text` as itself."""
    lines = [line for line in text.splitlines() if HIDDEN_HEAD in line]
    raw = {char for char in padding if not char.isprintable()} - {"\n"}
    return bool(lines) and all("touch hidden_marker" in line for line in lines) and not raw & set(text)


def new_agent(directory: Path, tasks: int, sleep_s: float = 0.0) -> tuple[Path, Any]:
    """An agent with `tasks` script tasks waiting (each sleeping `sleep_s`), its store open."""
    from agentd.clock import SystemClock
    from agentd.records import TaskIntent
    from agentd.store import init_state_dir, migrate, open_store
    from agentd.work.intake import admit_task
    from agentd.work.validation import load_config

    directory.mkdir(parents=True, exist_ok=True)
    path = agent_config(directory)
    config = load_config(path)
    init_state_dir(config.paths.state_dir, config.paths.workspace)
    migrate(config.db_path, SystemClock())
    store = open_store(config.db_path, SystemClock())
    now = SystemClock().now()
    for n in range(tasks):
        payload = {"outcome": ok(), "stdout": f"task {n}", "sleep_s": sleep_s}
        intent = TaskIntent(task_type="scripted", source="test", payload=payload)
        store.enqueue_task(admit_task(intent, config, now, trusted=True), now)
    return path, store
