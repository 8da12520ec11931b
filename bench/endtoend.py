"""The end-to-end row: N no-op script tasks through a real `agentd dispatch --until-idle` with full
evidence, the same script spawned bare from Python, and `agentd evidence verify --all` over the
attempts the dispatcher left. (huey_consumer's side is in bench/peers.py.)"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from agentd.clock import SystemClock
from agentd.evidence.verify import verify
from agentd.store import open_store
from agentd.work.validation import load_config
from bench.agent import agentd_argv, cli_env, enqueue, open_agent, with_noop_task_type, write_config, write_noop_script


@dataclass(frozen=True)
class Drained:
    """One `agentd dispatch --until-idle` over `tasks` no-op tasks: its rate and the agent it left."""

    tasks: int
    tasks_per_s: float
    config_path: Path


def agentd_dispatch(directory: Path, count: int) -> Drained:
    """Tasks/s of `agentd dispatch --until-idle` from its start to its exit, the queue filled first."""
    config_path = write_config(directory, with_noop_task_type(write_noop_script(directory / "bin")))
    config, store = open_agent(config_path, SystemClock())
    enqueue(store, config, "noop", count)
    with open(directory / "dispatch.log", "wb") as log:
        started = time.perf_counter()
        subprocess.run(
            agentd_argv(config_path, "dispatch", "--until-idle"), env=cli_env(), stdout=log, stderr=subprocess.STDOUT
        )
        elapsed = time.perf_counter() - started
    done = len(store.list_tasks(statuses=("completed",), limit=count + 1))
    store.close()
    if done != count:
        tail = (directory / "dispatch.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"agentd dispatch completed {done} of {count} tasks:\n{tail}")
    return Drained(count, count / elapsed, config_path)


def bare_spawn_per_s(directory: Path, count: int) -> float:
    """The floor: the same script spawned from Python, one after another, each its own result path."""
    script = write_noop_script(directory / "bin")
    results = directory / "results"
    results.mkdir()
    started = time.perf_counter()
    for n in range(count):
        env = {"PATH": "/usr/bin:/bin", "AGENTD_RESULT_PATH": str(results / f"{n}.json")}
        subprocess.run([str(script)], env=env, stdin=subprocess.DEVNULL, check=True)
    return count / (time.perf_counter() - started)


def evidence_verify_s(config_path: Path, attempts: int) -> float:
    """Seconds of `agentd evidence verify --all` (the whole CLI, start-up included)."""
    started = time.perf_counter()
    result = subprocess.run(
        agentd_argv(config_path, "evidence", "verify", "--all"), env=cli_env(), capture_output=True, text=True
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0 or f"{attempts} attempts checked" not in result.stdout:
        raise RuntimeError(f"agentd evidence verify: exit {result.returncode}\n{result.stdout[-2000:]}{result.stderr}")
    return elapsed


def evidence_verify_per_s(drained: Drained) -> tuple[float, float]:
    """Attempts/s of `agentd evidence verify --all` over the attempts one dispatch left: the whole
    command (start-up included), and the verification itself — `agentd.evidence.verify.verify`, the function
    the command runs, timed in this process on the same database and folders."""
    whole = evidence_verify_s(drained.config_path, drained.tasks)
    config = load_config(drained.config_path)
    store = open_store(config.paths.state_dir / "agentd.db", SystemClock(), readonly=True)
    try:
        started = time.perf_counter()
        result = verify(store, config.paths.state_dir)
        elapsed = time.perf_counter() - started
    finally:
        store.close()
    if result.findings or result.attempts != drained.tasks:
        raise RuntimeError(f"evidence verify in-process: {result.attempts} attempts, findings {result.findings[:3]}")
    return drained.tasks / whole, drained.tasks / elapsed
