"""`agentd dispatch` as a real process: kill -9, two at once, SIGTERM, cancel, huge output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import agent_config, alive, gone, ok, wait_until

from agentd.cli import main
from agentd.clock import SystemClock
from agentd.config import Config
from agentd.process.wake import poke
from agentd.records import RuntimeEvent, TaskIntent
from agentd.store import Store, init_state_dir, migrate, open_store
from agentd.work.intake import admit_task
from agentd.work.validation import load_config

pytestmark = pytest.mark.process


class Agent:
    """A test agent on disk, and `agentd dispatch` processes started against it."""

    def __init__(
        self, directory: Path, env: dict[str, str], mutate: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        self.config_path = agent_config(directory, mutate)
        self.config: Config = load_config(self.config_path)
        init_state_dir(self.config.paths.state_dir, self.config.paths.workspace)
        migrate(self.config.db_path, SystemClock())
        self.store: Store = open_store(self.config.db_path, SystemClock())
        self.env = {**os.environ, "AGENTD_DISPATCH__BACKOFF_BASE_S": "0", "AGENTD_DISPATCH__GRACE_S": "1", **env}
        self.directory = directory
        self.processes: list[subprocess.Popen[bytes]] = []

    def add(self, task_type: str = "scripted", **payload: Any) -> int:
        intent = TaskIntent(task_type=task_type, source="test", payload=payload)
        now = SystemClock().now()
        task_id = self.store.enqueue_task(admit_task(intent, self.config, now, trusted=True), now).task_id
        poke(self.config.paths.state_dir)  # as `agentd task add` does
        return task_id

    def start(self, *args: str, **env: str) -> subprocess.Popen[bytes]:
        log = open(self.directory / f"dispatch-{len(self.processes)}.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, "-m", "agentd", "--config", str(self.config_path), "dispatch", *args],
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.processes.append(process)
        return process

    def log(self, index: int) -> str:
        return (self.directory / f"dispatch-{index}.log").read_text()

    def event(self, kind: str, task_id: int | None = None, after: int = 0) -> RuntimeEvent | None:
        return next((e for e in self.store.read_events(task_id=task_id, after=after) if e.type == kind), None)

    def wait_event(self, kind: str, task_id: int | None = None, timeout: float = 20, after: int = 0) -> RuntimeEvent:
        return wait_until(lambda: self.event(kind, task_id, after), timeout, kind)  # type: ignore[no-any-return]

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
        self.store.close()


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    made = Agent(tmp_path, {})
    yield made
    made.close()


def test_kill_9_mid_attempt_then_restart_reclaims_and_completes(agent: Agent) -> None:
    task_id = agent.add(once_marker="first-attempt-was-here", sleep_first_s=600, outcome=ok())
    first = agent.start()
    adapter_pid = agent.wait_event("task_started", task_id).payload["pid"]
    marker = agent.config.paths.workspace / "first-attempt-was-here"
    wait_until(marker.exists, 20, "the first attempt's marker")  # else a slow start makes two "first" attempts
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    assert alive(adapter_pid), "the adapter outlives a kill -9 of its dispatcher: only the sweep can stop it"
    second = agent.start()
    agent.wait_event("task_finished", task_id, timeout=30)
    task = agent.store.get_task_or_raise(task_id)
    assert task.status == "completed"
    assert gone(adapter_pid), "the boot sweep killed the orphaned adapter"
    attempts = agent.store.attempts_of(task_id)
    assert [a.termination_reason for a in attempts] == ["boot_sweep", "exited"]
    assert agent.event("boot_sweep_reclaimed", task_id) is not None
    assert agent.event("dispatch_lock_stale_cleared") is not None
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=15) == 0


@pytest.mark.deep
def test_a_tree_nested_past_pythons_recursion_stops_neither_an_attempts_end_nor_the_boot_sweep(agent: Agent) -> None:
    """An attempt's HOME is its run dir, removed when it ends and by the boot sweep after a crash. 3,000
    folders one inside another made that removal raise RecursionError: the attempt stayed running, and
    every later start of the dispatcher failed in its boot sweep, for good."""
    ended = agent.add(nest=3000, outcome=ok())
    assert agent.start("--until-idle").wait(timeout=60) == 0, agent.log(0)
    assert agent.store.get_task_or_raise(ended).status == "completed"
    swept = agent.add(nest=3000, once_marker="nested-then-killed", sleep_first_s=600, outcome=ok())
    crashed = agent.start()
    wait_until((agent.config.paths.workspace / "nested-then-killed").exists, 30, "the attempt's marker")
    crashed.send_signal(signal.SIGKILL)
    crashed.wait(timeout=10)
    assert agent.start("--until-idle").wait(timeout=60) == 0, agent.log(2)
    assert agent.store.get_task_or_raise(swept).status == "completed"
    assert [a.termination_reason for a in agent.store.attempts_of(swept)] == ["boot_sweep", "exited"]
    assert list(agent.config.paths.runs.iterdir()) == [], "every run dir is gone, however deep"


def test_kill_9_after_the_outcome_commit_applies_the_follow_up_once(agent: Agent) -> None:
    follow_up = {"task_type": "example", "source": "model", "subject": "the follow-up", "payload": {}}
    task_id = agent.add(outcome=ok(follow_up_tasks=[follow_up]))
    crashed = agent.start("--until-idle", AGENTD_CHAOS__CRASH_AT="after_outcome_commit")
    assert crashed.wait(timeout=30) == -signal.SIGKILL
    assert agent.store.get_task_or_raise(task_id).status == "completed"
    assert [e["status"] for e in agent.store.outbox_of(task_id)] == ["pending"]
    assert len(agent.store.list_tasks()) == 1
    restarted = agent.start("--until-idle")
    assert restarted.wait(timeout=30) == 0, agent.log(1)
    assert [e["status"] for e in agent.store.outbox_of(task_id)] == ["applied"]
    follow_ups = [t for t in agent.store.list_tasks() if t.subject == "the follow-up"]
    assert len(follow_ups) == 1 and follow_ups[0].status == "completed"


def test_two_dispatchers_at_once_one_runs_the_other_names_the_holder(agent: Agent) -> None:
    agent.add(sleep_s=600, outcome=ok())
    one, two = agent.start(), agent.start()
    exited = wait_until(lambda: [i for i, p in enumerate((one, two)) if p.poll() is not None], 20, "a loser")
    assert len(exited) == 1, "exactly one of two dispatchers gives way"
    loser_index = exited[0]
    loser, winner = (one, two) if loser_index == 0 else (two, one)
    assert loser.returncode == 1
    assert winner.poll() is None
    text = agent.log(loser_index)
    assert "dispatch_locked" in text and f"pid {winner.pid} on" in text
    winner.send_signal(signal.SIGTERM)
    assert winner.wait(timeout=15) == 0


def test_sigterm_during_a_long_attempt_records_it_interrupted_and_requeues(agent: Agent) -> None:
    task_id = agent.add(sleep_s=600, outcome=ok())
    dispatcher = agent.start()
    adapter_pid = agent.wait_event("task_started", task_id).payload["pid"]
    started = time.monotonic()
    dispatcher.send_signal(signal.SIGTERM)
    assert dispatcher.wait(timeout=15) == 0
    grace, kill_grace, slack = 1.0, 1.0, 3.0
    assert time.monotonic() - started < grace + kill_grace + slack
    assert gone(adapter_pid)
    [attempt] = agent.store.attempts_of(task_id)
    assert attempt.termination_reason == "interrupted" and attempt.retry_class == "retryable"
    task = agent.store.get_task_or_raise(task_id)
    assert task.status == "retryable_failure" and task.free_attempt_count == 1  # a stop does not spend an attempt
    assert task.available_at <= SystemClock().now()


def test_operator_cancel_stops_a_running_adapter(
    agent: Agent, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    task_id = agent.add(sleep_s=600, outcome=ok())
    dispatcher = agent.start()
    adapter_pid = agent.wait_event("task_started", task_id).payload["pid"]
    asked = time.monotonic()
    assert main(["--config", str(agent.config_path), "task", "cancel", str(task_id)]) == 0
    assert "will stop its adapter" in capsys.readouterr().out
    agent.wait_event("task_finished", task_id, timeout=10)
    assert time.monotonic() - asked < 3.0
    assert gone(adapter_pid)
    task = agent.store.get_task_or_raise(task_id)
    assert task.status == "operator_canceled"
    assert agent.store.attempts_of(task_id)[0].termination_reason == "operator_canceled"
    dispatcher.send_signal(signal.SIGTERM)
    assert dispatcher.wait(timeout=15) == 0


def test_a_gigabyte_of_adapter_output_leaves_the_dispatcher_small(agent: Agent) -> None:
    code = (
        "import os, sys\nblock = b'y' * (1 << 20)\nfor _ in range(1024): sys.stdout.buffer.write(block)\n"
        "open(os.environ['AGENTD_RESULT_PATH'], 'w').write("
        '\'{"status": "completed", "machine_status": "ok", "operator_summary": "flooded"}\')\n'
    )
    script = agent.directory / "flood.py"
    script.write_text(f"#!{sys.executable}\n{code}")
    script.chmod(0o755)
    agent.env["AGENTD_DISPATCH__OUTPUT_CAP_BYTES"] = str(1 << 20)
    agent.config_path.write_text(
        agent.config_path.read_text().replace(str(Path(__file__).parent / "adapters" / "scripted.py"), str(script))
    )
    task_id = agent.add()
    dispatcher = agent.start()
    agent.wait_event("task_finished", task_id, timeout=120)
    with open(f"/proc/{dispatcher.pid}/status") as status:
        peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    dispatcher.send_signal(signal.SIGTERM)
    assert dispatcher.wait(timeout=15) == 0
    [attempt] = agent.store.attempts_of(task_id)
    assert attempt.diagnostics["stdout_bytes"] == 1 << 30 and attempt.diagnostics["stdout_truncated"]
    assert Path(attempt.stdout_path).stat().st_size < (1 << 20) + 200
    assert peak_kib < 150 * 1024, f"dispatcher peak RSS {peak_kib} KiB"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_an_idle_dispatcher_sleeps_and_a_poke_wakes_it(agent: Agent, capsys: pytest.CaptureFixture[str]) -> None:
    dispatcher = agent.start(AGENTD_DISPATCH__POLL_CEILING_S="300")
    agent.wait_event("dispatch_idle")
    before = cpu_seconds(dispatcher.pid)
    threading.Event().wait(2.0)  # measuring idleness needs wall time to pass
    assert cpu_seconds(dispatcher.pid) - before < 0.1, "an idle dispatcher must not spin"
    asked = time.monotonic()
    assert main(["--config", str(agent.config_path), "task", "add", "--type", "example", "--json"]) == 0
    task_id = json.loads(capsys.readouterr().out)["task_id"]
    agent.wait_event("task_finished", task_id, timeout=10)
    assert time.monotonic() - asked < 3.0, "task add pokes the dispatcher; it must not wait for the 300 s ceiling"
    dispatcher.send_signal(signal.SIGTERM)
    assert dispatcher.wait(timeout=15) == 0
