"""The rows an operator waits on (issue #43): how long after `agentd task add` commits a task the
idle dispatcher has claimed it (`task_claimed` committed) and its adapter runs (`task_started`).

A real `agentd dispatch` service on an agent of its own, idle between probes (the gap lets the kernel
forget the last cgroup move, as between two operators' commands); each probe enqueues one no-op task
through agentd's own intake, rings the doorbell as `task add` does, waits for the task to finish and
reads the two events' timestamps (microseconds, the same wall clock as this process)."""

from __future__ import annotations

import math
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from agentd.clock import SystemClock
from agentd.config import Config
from agentd.process.wake import poke, socket_path
from agentd.records import TaskIntent
from agentd.store import Store
from agentd.vocabulary import TERMINAL_STATUSES
from agentd.work.intake import admit_task
from bench.agent import agentd_argv, cli_env, open_agent, with_noop_task_type, write_config, write_noop_script

DEADLINE_S = 30.0  # one no-op task, however loaded the machine: past this the service is broken


@dataclass
class Waits:
    """Per probe, in ms from the enqueue's commit: to `task_claimed` and to `task_started`."""

    claimed_ms: list[float] = field(default_factory=list)
    started_ms: list[float] = field(default_factory=list)


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (p99 of 40 values is the largest: no interpolation invents one)."""
    ranked = sorted(values)
    return ranked[max(0, math.ceil(share * len(ranked)) - 1)]


def enqueue_to_start(directory: Path, probes: int, gap_s: float) -> Waits:
    """`probes` tasks, one at a time, each `gap_s` after the last one ended, through a real dispatcher."""
    config_path = write_config(directory, with_noop_task_type(write_noop_script(directory / "bin")))
    config, store = open_agent(config_path, SystemClock())
    waits = Waits()
    try:
        with dispatcher(directory, config_path, config):
            for _ in range(probes):
                threading.Event().wait(gap_s)
                probe(store, config, waits)
    finally:
        store.close()
    return waits


def probe(store: Store, config: Config, waits: Waits) -> None:
    """One task through intake, the doorbell rung after its commit, its two events read once it ends."""
    clock = SystemClock()
    intent = TaskIntent(task_type="noop", source="bench", payload={})
    task_id = store.enqueue_task(admit_task(intent, config, clock.now(), trusted=True), clock.now()).task_id
    committed = clock.now()
    poke(config.paths.state_dir)
    until_done(store, task_id)
    stamps = {event.type: event.timestamp for event in store.read_events(task_id=task_id)}
    waits.claimed_ms.append(ms_between(committed, stamps["task_claimed"]))
    waits.started_ms.append(ms_between(committed, stamps["task_started"]))


def ms_between(earlier: datetime, later: datetime) -> float:
    return (later - earlier).total_seconds() * 1e3


def until_done(store: Store, task_id: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while store.get_task_or_raise(task_id).status not in TERMINAL_STATUSES:
        if time.monotonic() > deadline:
            raise RuntimeError(f"task {task_id} did not finish within {DEADLINE_S:.0f} s")
        threading.Event().wait(0.005)


@contextmanager
def dispatcher(directory: Path, config_path: Path, config: Config) -> Iterator[None]:
    """`agentd dispatch` as a service until the block ends, once its doorbell listens."""
    with open(directory / "dispatch.log", "wb") as log:
        process = subprocess.Popen(agentd_argv(config_path, "dispatch"), env=cli_env(), stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not socket_path(config.paths.state_dir).exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"agentd dispatch did not start:\n{(directory / 'dispatch.log').read_text()}")
            threading.Event().wait(0.01)
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)
