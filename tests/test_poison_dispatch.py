"""Poisoned outcomes, leaked secrets and dead attempts (issue: poison-proof, findings 1, 3 and 4).

In-process against a real SQLite file and real adapter processes, on a fake clock.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from support import adapter_env_file, ok

from agentd.evidence import verify_attempt_dir
from agentd.records import AttemptEnd, TaskOutcome
from agentd.store import Store

pytestmark = pytest.mark.asyncio


def evidence_root(rig: Rig) -> Path:
    return Path(rig.config.paths.state_dir) / "attempts"


async def run_one(rig: Rig, **payload: Any) -> Any:
    task = rig.add("scripted", payload=payload)
    await rig.drain()
    return rig.store.get_task_or_raise(task.task_id)


# --- finding 1: an outcome no store can hold ---------------------------------------------------------

POISONED_OUTCOMES = {
    "nan_in_external_messages": '{"status": "completed", "machine_status": "ok", "operator_summary": "x",'
    ' "external_messages": [{"value": NaN}]}',
    "infinity_in_a_follow_up": '{"status": "completed", "machine_status": "ok", "operator_summary": "x",'
    ' "follow_up_tasks": [{"task_type": "example", "source": "x", "payload": {"n": -Infinity}}]}',
    "lone_surrogate_in_summary": '{"status": "completed", "machine_status": "ok", "operator_summary": "bad \\ud800"}',
    "lone_surrogate_in_a_follow_up_subject": '{"status": "completed", "machine_status": "ok",'
    ' "operator_summary": "x", "follow_up_tasks": [{"task_type": "example", "source": "x",'
    ' "subject": "\\udfff", "payload": {}}]}',
    "integer_beyond_int64": '{"status": "completed", "machine_status": "ok", "operator_summary": "x",'
    ' "external_messages": [{"n": 99999999999999999999999}]}',
    "a_key_written_twice": '{"status": "failed", "machine_status": "error", "operator_summary": "x",'
    ' "status": "completed", "machine_status": "ok"}',
    "nested_2000_deep": '{"status": "completed", "machine_status": "ok", "operator_summary": "x",'
    ' "external_messages": [' + "[" * 2000 + "]" * 2000 + "]}",
}


@pytest.mark.parametrize("raw", POISONED_OUTCOMES.values(), ids=POISONED_OUTCOMES.keys())
async def test_a_poisoned_outcome_is_a_recorded_failure_and_dispatch_goes_on(rig: Rig, raw: str) -> None:
    poisoned = rig.add("scripted", payload={"raw_result": raw})
    after = rig.add("scripted", payload={"outcome": ok()})
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    assert await dispatcher.run_until_idle() == 2  # neither raised: both attempts were recorded
    await dispatcher.stop()
    task = rig.store.get_task_or_raise(poisoned.task_id)
    assert task.status == "retryable_failure"
    [attempt] = rig.store.attempts_of(task.task_id)
    assert attempt.ended_at is not None and attempt.termination_reason == "exited"
    assert "result file" in (task.last_error or "")
    assert rig.store.get_task_or_raise(after.task_id).status == "completed"
    assert rig.store.verify_event_chain() == []


async def test_an_outcome_sqlite_refuses_is_recorded_as_internal_error_naming_why(rig: Rig) -> None:
    """The commit boundary: whatever the outcome commit raises (here a NaN that slipped into the
    diagnostics) becomes the attempt's internal_error, and the task never stays running."""
    task = rig.add("scripted", payload={})
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    claim = await dispatcher.db.call(
        Store.claim_next_task, rig.clock.now(), dispatcher.holder_id, dispatcher._plan, evidence_root(rig)
    )
    poisoned = AttemptEnd(
        attempt_id=claim.attempt.attempt_id,
        task_id=task.task_id,
        ended_at=rig.clock.now(),
        exit_status="ok",
        retry_class="none",
        termination_reason="exited",
        outcome=TaskOutcome(status="completed", machine_status="ok", operator_summary="fine"),
        status="completed",
        available_at=None,
        last_error=None,
        diagnostics={"elapsed_s": float("nan")},
    )
    recorded = await dispatcher.attempts.commit(claim.task, claim.attempt, poisoned)
    await dispatcher.stop()
    assert recorded.end.status == "retryable_failure" == rig.store.get_task_or_raise(task.task_id).status
    [attempt] = rig.store.attempts_of(task.task_id)
    assert attempt.termination_reason == "internal_error"
    assert "recording its outcome: ValueError" in attempt.diagnostics["summary"]
    assert verify_attempt_dir(Path(attempt.evidence_dir)) == []


# --- finding 3: secrets by value on every path ------------------------------------------------------

SECRET = 'sk-live-a"bc\\def-0123456789'  # a quote and a backslash: JSON escapes both


@pytest.fixture
def secret_rig(rig_factory: Callable[..., Any], tmp_path: Path) -> Any:
    return rig_factory(adapter_env_file(tmp_path / "scripted.env", f"API_KEY='{SECRET}'\n"))


def leaks(rig: Rig, secret: str) -> list[str]:
    """Every place under the state dir (files, and every text column of the database) holding it."""
    found = []
    needles = [secret.encode(), json.dumps(secret)[1:-1].encode()]
    for path in rig.config.paths.state_dir.rglob("*"):
        if path.is_file() and path.name != "agentd.db" and any(n in path.read_bytes() for n in needles):
            found.append(str(path))
    conn = rig.store._conn
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        for row in conn.execute(f"SELECT * FROM {table}").fetchall():
            if any(isinstance(v, str) and any(n.decode() in v for n in needles) for v in tuple(row)):
                found.append(f"table {table}")
    return found


async def test_a_secret_in_the_final_message_outcome_is_redacted_everywhere(
    secret_rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    block = json.dumps(ok(operator_summary="the key is ${json:API_KEY}"))
    task = await run_one(
        secret_rig,
        stdout=f"working with ${{API_KEY}}\n```json\n{block}\n```",
        stderr="debug: key=${API_KEY}",
    )
    assert task.status == "completed"
    assert task.outcome is not None and "[redacted]" in task.outcome.operator_summary
    [attempt] = secret_rig.store.attempts_of(task.task_id)
    assert attempt.diagnostics["outcome_source"] == "final_message" and attempt.diagnostics["redactions"] >= 3
    manifest = json.loads((Path(attempt.evidence_dir) / "manifest.json").read_text())
    assert manifest["redactions"]["count"] >= 3
    later = await run_one(secret_rig, outcome=ok())  # its bundle carries recent memory: the summary above
    assert (
        "the key is [redacted]"
        in (Path(secret_rig.store.attempts_of(later.task_id)[0].evidence_dir) / "prompt.md").read_text()
    )
    assert leaks(secret_rig, SECRET) == []
    assert not [r for r in caplog.records if SECRET in r.getMessage()]


async def test_a_secret_in_a_failure_and_in_follow_ups_is_redacted(secret_rig: Rig) -> None:
    outcome = ok(
        operator_summary="${json:API_KEY}",
        follow_up_tasks=[{"task_type": "example", "source": "x", "subject": "use ${json:API_KEY}", "payload": {}}],
    )
    done = await run_one(secret_rig, outcome=outcome)
    assert done.status == "completed"
    failed = await run_one(secret_rig, stdout="oops ${API_KEY}", stderr="${API_KEY}", exit=3)
    assert failed.status == "retryable_failure"
    assert leaks(secret_rig, SECRET) == []


# --- finding 4: the boot sweep judges what a dead attempt left ------------------------------------


async def claim_and_die(rig: Rig, task_id: int, *, result: dict[str, Any] | None, started: bool = True) -> Any:
    """Claim the task as a dispatcher that then dies (its attempt stays open), leaving `result`."""
    dead = rig.dispatcher()
    claim = await dead.db.call(Store.claim_next_task, rig.clock.now(), "dead-runner", dead._plan, evidence_root(rig))
    assert claim.task.task_id == task_id
    evidence = Path(claim.attempt.evidence_dir)
    evidence.mkdir(parents=True, exist_ok=True)
    if started:
        await dead.db.call(Store.mark_attempt_started, task_id, claim.attempt.attempt_id, 4242, rig.clock.now())
    if result is not None:
        (evidence / "result.json").write_text(json.dumps(result))
    return claim


async def test_a_finished_attempt_the_runtime_died_under_is_judged_not_rerun(rig: Rig) -> None:
    task = rig.add("scripted", payload={})
    await claim_and_die(rig, task.task_id, result=ok())
    dispatcher = rig.dispatcher()
    await dispatcher.start()  # the boot sweep
    assert await dispatcher.run_until_idle() == 0  # nothing to re-run
    await dispatcher.stop()
    task = rig.store.get_task_or_raise(task.task_id)
    assert task.status == "completed" and task.attempt_count == 1
    [attempt] = rig.store.attempts_of(task.task_id)
    assert (attempt.exit_status, attempt.termination_reason, attempt.side_effects) == (
        "error",
        "boot_sweep",
        "possible",
    )
    [swept] = [e for e in rig.events(task.task_id) if e.type == "boot_sweep_reclaimed"]
    assert swept.payload["judged"] is True
    assert verify_attempt_dir(Path(attempt.evidence_dir)) == []
    manifest = json.loads((Path(attempt.evidence_dir) / "manifest.json").read_text())
    assert (
        manifest["termination_reason"] == "boot_sweep"
        and manifest["exit_status"] == "error"
        and attempt.diagnostics["exit_seen"] is False
    )
    assert manifest["task_hash"] and manifest["runtime_identity"]["agent_id"] == rig.config.agent.agent_id


async def test_a_swept_result_still_goes_through_the_gates(rig: Rig) -> None:
    task = rig.add("scripted", payload={})
    await claim_and_die(rig, task.task_id, result=ok(artifact_paths=["missing.txt"]))
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.stop()
    task = rig.store.get_task_or_raise(task.task_id)
    assert task.status == "retryable_failure" and "missing.txt" in (task.last_error or "")


async def test_crashes_do_not_spend_attempts_but_a_task_that_keeps_crashing_ends_crashed_runtime(rig: Rig) -> None:
    task = rig.add("scripted", payload={"outcome": ok()})
    limit = rig.config.dispatch.crash_limit
    for crash in range(1, limit + 1):
        await claim_and_die(rig, task.task_id, result=None)
        dispatcher = rig.dispatcher()
        await dispatcher.start()  # sweeps it; a retry is due at once (free) until the limit
        await dispatcher.stop()
        swept = rig.store.get_task_or_raise(task.task_id)
        assert swept.crash_count == crash
        if crash < limit:
            assert swept.status == "retryable_failure" and swept.free_attempt_count == crash
    assert swept.status == "permanent_failure"
    assert (swept.last_error or "").startswith("crashed_runtime")
    assert rig.store.attempts_of(task.task_id)[-1].termination_reason == "crashed_runtime"


async def test_one_crash_then_a_clean_attempt_resets_the_count_and_spent_nothing(rig: Rig) -> None:
    task = rig.add("scripted", payload={"outcome": ok()})
    await claim_and_die(rig, task.task_id, result=None, started=False)
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    [swept] = rig.store.attempts_of(task.task_id)
    assert swept.side_effects == "none" and swept.exit_status == "error"
    assert await dispatcher.run_until_idle() == 1
    await dispatcher.stop()
    done = rig.store.get_task_or_raise(task.task_id)
    assert done.status == "completed" and done.crash_count == 0
    assert done.attempt_count - done.free_attempt_count == 1  # the crash did not spend one of max_attempts
