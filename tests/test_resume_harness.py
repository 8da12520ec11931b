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
from test_adapter_contract import Harness, harness_factory, outcome_message, without_gateway  # noqa: F401

from agentd.adapters.base import RESUME_NOTE
from agentd.attempt.session import archive_path, unsealed_dir
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
    task, first, second = ran_again(harness)
    assert task.status == "completed", (task.last_error, second.diagnostics)
    return task, first, second


def ran_again(harness: Harness) -> tuple[Any, Any, Any]:
    """The dispatcher run again until idle (it exits 0): the task, its first attempt and its second."""
    again = dispatch(harness, "--until-idle")
    _, err = again.communicate(timeout=180)
    assert again.returncode == 0, err[-3000:]
    [task] = harness.store.list_tasks(limit=1)
    first, second = sorted(harness.store.attempts_of(task.task_id), key=lambda a: a.attempt_number)
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
    assert not (paths.root.parent / "harness_session.json").exists() and not archive_path(paths).exists()
    assert not unsealed_dir(paths, task.task_id).exists()


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


def evidence_of(harness: Harness, attempt: Any) -> AttemptPaths:
    runs = load_config(harness.config_path).paths.runs
    return AttemptPaths(Path(attempt.evidence_dir or ""), runs / attempt.attempt_id if runs else None)


def test_a_claude_session_changed_between_the_attempts_is_not_resumed_and_the_task_restarts(
    harness_factory: Any,
) -> None:
    """Issue 50, finding 9: the session is sealed when the attempt ends; a real second process changes the sealed copy
    before the next attempt, which then starts a new session (the task again, not the note) and says why."""
    turns = [ToolCall("Bash", {"command": "echo FIRST-STEP > first.txt"}), Hang(), Reply(outcome_message())]
    harness = harness_factory("claude-code", turns, more=no_grace)
    first = interrupted_mid_task(harness)
    sealed = archive_path(evidence_of(harness, first))
    assert first.diagnostics["harness_session"]["sealed"]["bytes"] == sealed.stat().st_size
    script = "import sys; open(sys.argv[1], 'ab').write(b'a turn the model never took')"
    assert subprocess.run([sys.executable, "-c", script, str(sealed)], check=False).returncode == 0
    task, first, second = dispatched_again(harness)
    [session_id] = stream_session_ids(first)
    assert stream_session_ids(second) != {session_id}  # a new session, as claude printed it
    events = harness.store.read_events(task_id=task.task_id)
    assert not [e for e in events if e.type == "harness_session_resumed"]
    [discarded] = [e for e in events if e.type == "harness_session_discarded"]
    assert discarded.attempt_id == second.attempt_id and discarded.payload["session_id"] == session_id
    assert (
        discarded.payload["kept_by"] == first.attempt_id and "changed after it was sealed" in discarded.payload["why"]
    )
    assert RESUME_NOTE[:60] not in json.dumps(harness.model_calls()[-1].body)  # the task from its start
    assert not sealed.exists()


# The interrupted attempt plants, under codex's own sessions/, a rollout of another thread with the newest name and a
# huge running total: read as the thread's, the resumed attempt would take it off its own counts (usage 0) and its
# meter would see nothing spent (issue 50, finding 6).
OTHER_THREAD = "01a251be-0000-7000-8000-000000000000"
HUGE = {"input_tokens": 10**12, "cached_input_tokens": 0, "output_tokens": 10**12}
PLANT = (
    'd="$CODEX_HOME/sessions/9999/12/31" && mkdir -p "$d" && printf \'%s\\n\' '
    + "'"
    + json.dumps({"type": "event_msg", "payload": {"type": "token_count", "info": {"total_token_usage": HUGE}}})
    + "'"
    + f' > "$d/rollout-9999-12-31T23-59-59-{OTHER_THREAD}.jsonl"'
)


def test_a_rollout_the_attempt_planted_neither_changes_the_resumed_usage_nor_blinds_its_meter(
    harness_factory: Any,
) -> None:
    """The resumed attempt's first call costs past the day's budget left ($0.01): its meter stops it in the second
    call, and what it spent is its own call's tokens, not 0."""

    def more(raw: dict[str, Any]) -> None:
        no_grace(raw)
        raw["budget"] = {"daily_usd": 0.01}

    turns = [
        ToolCall("exec_command", {"cmd": f"echo FIRST-STEP > first.txt; {PLANT}"}),
        Hang(),
        ToolCall("exec_command", {"cmd": "echo second"}, input_tokens=20_000, output_tokens=100),
        ToolCall("exec_command", {"cmd": "sleep 25; touch late_marker"}),
        Reply(outcome_message()),
    ]
    harness = harness_factory("codex", turns, more=without_gateway(more))  # the session file is the meter's
    first = interrupted_mid_task(harness)
    kept = first.diagnostics["harness_session"]
    assert kept["kept"] is True and kept["spent_before"]["input_tokens"] == 11, kept  # the thread's, not the plant's
    _, _, second = ran_again(harness)
    assert second.termination_reason == "budget_exceeded", (second.termination_reason, second.diagnostics)
    assert not (harness.workspace / "late_marker").exists()
    usage = second.usage or {}
    assert (usage["input_tokens"], usage["output_tokens"]) == (20_000, 100), usage  # its own call's
