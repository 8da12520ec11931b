"""Resume, not restart, with the real pinned claude against the fake model server (issue 42's acceptance: "a
resumed claude attempt shows the same session id across its two attempts"; docs/reliability.md). The
dispatcher is stopped while claude waits on the model, mid-task; the free retry resumes claude's own session."""

# ruff: noqa: F811  (harness_factory is the adapter contract's fixture, imported to be used by name)

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakemodel import Hang, Reply, ToolCall
from support import wait_until
from test_adapter_contract import Harness, harness_factory, outcome_message  # noqa: F401

from agentd.adapters.base import RESUME_NOTE
from agentd.attempt.session import kept_dir
from agentd.cli import main
from agentd.evidence import AttemptPaths
from agentd.work.validation import load_config

pytestmark = [pytest.mark.harness, pytest.mark.process]


def no_grace(raw: dict[str, Any]) -> None:
    raw["dispatch"]["grace_s"] = 0  # a stop interrupts the running attempt at once


def stream_session_ids(attempt: Any) -> set[str]:
    """The session ids claude itself printed in the attempt's stdout.log (its init and result records)."""
    lines = (Path(attempt.evidence_dir) / "stdout.log").read_text().splitlines()
    return {json.loads(line)["session_id"] for line in lines if line.startswith("{") and '"session_id"' in line}


def dispatch(harness: Harness, *more: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "agentd", "--config", str(harness.config_path), "dispatch", *more]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def interrupted_mid_task(harness: Harness) -> Any:
    """One task, dispatched; the dispatcher stopped once the harness ran its tool and waits on the model (the
    middle of the task): the task's first attempt, ended interrupted."""
    assert main(["--config", str(harness.config_path), "task", "add", "--type", "work", "--payload", "{}"]) == 0
    running = dispatch(harness)
    try:
        wait_until(lambda: len(harness.model_calls()) >= 2, 60, "the harness's second model call")
        running.send_signal(signal.SIGTERM)
        _, err = running.communicate(timeout=60)
    finally:
        running.kill()
    assert running.returncode == 0, err[-3000:]
    [task] = harness.store.list_tasks(limit=1)
    [first] = harness.store.attempts_of(task.task_id)
    assert task.status == "retryable_failure" and first.termination_reason == "interrupted", task.last_error
    return first


def dispatched_again(harness: Harness) -> tuple[Any, Any, Any]:
    """The dispatcher run again until idle: the task (completed), its first attempt and its second."""
    again = dispatch(harness, "--until-idle")
    _, err = again.communicate(timeout=180)
    assert again.returncode == 0, err[-3000:]
    [task] = harness.store.list_tasks(limit=1)
    first, second = sorted(harness.store.attempts_of(task.task_id), key=lambda a: a.attempt_number)
    assert task.status == "completed", (task.last_error, second.diagnostics)
    return task, first, second


def resumed_not_restarted(harness: Harness, task: Any, first: Any, second: Any, session_id: str) -> list[Any]:
    """The second attempt said it resumed `session_id`, and did: the model heard the first attempt's tool call
    and the note, not the task again, and no call was made twice. The task_started events' session ids."""
    events = harness.store.read_events(task_id=task.task_id)
    [resumed] = [e for e in events if e.type == "harness_session_resumed"]
    assert resumed.attempt_id == second.attempt_id
    assert resumed.payload == {"session_id": session_id, "resumed_from": first.attempt_id}
    last = json.dumps(harness.model_calls()[-1].body)
    assert "echo FIRST-STEP > first.txt" in last and RESUME_NOTE[:60] in last
    assert len(harness.model_calls()) == 3  # no call was made twice
    assert (harness.workspace / "first.txt").read_text().strip() == "FIRST-STEP"
    assert "harness_session" not in second.diagnostics  # it ended: nothing of its session is kept
    return [e.payload.get("harness_session_id") for e in events if e.type == "task_started"]


def test_a_claude_attempt_interrupted_by_a_stop_is_resumed_in_the_same_session(harness_factory: Any) -> None:
    turns = [ToolCall("Bash", {"command": "echo FIRST-STEP > first.txt"}), Hang(), Reply(outcome_message())]
    harness = harness_factory("claude-code", turns, more=no_grace)
    first = interrupted_mid_task(harness)
    assert first.diagnostics["harness_session"]["kept"] is True
    task, first, second = dispatched_again(harness)
    # the same session, as claude printed it and as agentd recorded it
    [session_id] = stream_session_ids(first)
    assert stream_session_ids(second) == {session_id}
    assert resumed_not_restarted(harness, task, first, second, session_id) == [session_id, session_id]
    runs = load_config(harness.config_path).paths.runs
    paths = AttemptPaths(Path(second.evidence_dir or ""), runs / second.attempt_id if runs else None)
    assert not (paths.root.parent / "harness_session.json").exists() and not kept_dir(paths, task.task_id).exists()


def codex_threads(attempt: Any) -> list[str]:
    """The thread ids codex itself printed in the attempt's stdout.log (`thread.started`)."""
    lines = (Path(attempt.evidence_dir) / "stdout.log").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    return [record["thread_id"] for record in records if record.get("type") == "thread.started"]


def test_a_codex_attempt_interrupted_by_a_stop_is_resumed_in_the_same_thread(harness_factory: Any) -> None:
    """codex names its own thread: agentd reads the id from its stream when the attempt is interrupted, keeps
    its rollout, and the free retry runs `codex exec resume <id>`. codex's counts are the thread's running
    total, so the resumed attempt records only what it spent itself."""
    turns = [ToolCall("exec_command", {"cmd": "echo FIRST-STEP > first.txt"}), Hang(), Reply(outcome_message())]
    harness = harness_factory("codex", turns, more=no_grace)
    first = interrupted_mid_task(harness)
    [thread] = codex_threads(first)
    kept = first.diagnostics["harness_session"]
    assert kept["kept"] is True and kept["session_id"] == thread, kept
    assert (kept["spent_before"]["input_tokens"], kept["spent_before"]["output_tokens"]) == (11, 7)  # one call
    task, first, second = dispatched_again(harness)
    assert codex_threads(second) == [thread]  # the same thread, as codex printed it
    # a new thread has no id until codex names it
    assert resumed_not_restarted(harness, task, first, second, thread) == [None, thread]
    usage = second.usage or {}
    assert (usage["input_tokens"], usage["output_tokens"]) == (11, 7), usage  # its one call, not the thread's 33/21
