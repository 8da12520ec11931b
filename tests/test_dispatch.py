"""The dispatcher in-process: real SQLite, real adapter processes, a fake clock."""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from support import gone, ok

from agentd.evidence import verify_attempt_dir
from agentd.process import containment
from agentd.records import TaskOutcome, TaskRecord
from agentd.store import Store

pytestmark = pytest.mark.asyncio

SEED_ORDER = [
    "task_enqueued",
    "task_claimed",
    "bundle_compiled",
    "task_started",
    "task_attempt_finished",
    "task_finished",
]


def claim_order(rig: Rig) -> list[int]:
    return [e.task_id for e in rig.events() if e.type == "task_claimed"]


def is_subsequence(wanted: list[str], seen: list[str]) -> bool:
    it = iter(seen)
    return all(kind in it for kind in wanted)


async def drained_with_statements(dispatcher: Any, count: int) -> list[str]:
    """Every SQL statement the dispatcher's connection ran while it drained `count` tasks."""
    statements: list[str] = []
    dispatcher.db.store._conn.set_trace_callback(statements.append)
    try:
        assert await dispatcher.run_until_idle() == count
    finally:
        dispatcher.db.store._conn.set_trace_callback(None)
    return statements


def durable_commits(statements: list[str]) -> int:
    """COMMITs made at synchronous=FULL: a `durable=False` transaction sets NORMAL before its BEGIN."""
    count, relaxed = 0, False
    for statement in statements:
        if statement.startswith("PRAGMA synchronous"):
            relaxed = statement.endswith("NORMAL")
        elif statement == "COMMIT" and not relaxed:
            count += 1
    return count


@pytest.mark.parametrize("capped", [False, True])
async def test_an_attempts_outcome_and_the_next_claim_share_one_durable_commit(
    rig_factory: Callable[..., Rig], capped: bool
) -> None:
    """Group commit at the attempt boundary (docs/decisions.md, "Group commit"): a drain of n tasks
    commits durably about n times, not 4n; with a capped budget each claim reads the spend afresh."""

    def budget(raw: dict[str, Any]) -> None:
        if capped:
            raw["budget"] = {"daily_usd": 100}

    rig = rig_factory(budget)
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    tasks = [rig.add("example", subject=f"t{n}") for n in range(5)]
    statements = await drained_with_statements(dispatcher, 5)
    assert [rig.store.get_task_or_raise(t.task_id).status for t in tasks] == ["completed"] * 5
    # grouped: the first claim, its row, 5 outcome commits (4 claiming the next), the last row, and the
    # claim that finds nothing (it writes nothing, so it syncs nothing); one at a time: 4 per task + 1
    assert durable_commits(statements) == (4 * 5 + 1 if capped else 5 + 4)
    claimed = [e.task_id for e in rig.events() if e.type == "task_claimed"]
    assert claimed == [t.task_id for t in tasks]  # the same order as one claim per tick
    row = next(r for r in rig.store.service_statuses() if r["service"] == "dispatch")
    assert row["status"].startswith("idle")
    await dispatcher.stop()


async def test_a_fleet_task_whose_lease_is_not_confirmed_is_not_claimable(rig: Rig) -> None:
    """A fleet lease is a condition of the claim, never an exception: a fleet task whose confirmation ran
    out is passed over by every claim (the outcome commit's too, which keeps the outcome it shares the
    transaction with); once the fleet confirms its lease again, it runs (docs/fleet.md)."""
    from datetime import timedelta

    from agentd.records import TaskIntent
    from agentd.store.fleet_leases import Taken
    from agentd.work.intake import admit_task

    now = rig.clock.now()
    local = rig.add("example", subject="local")
    intent = TaskIntent.model_validate({"task_type": "example", "source": "fleet:7", "payload": {}})
    new = admit_task(intent, rig.config, now, trusted=True)
    [fleet_task] = rig.store.record_fleet_claims([Taken(new, 7, 1, {})], now, now - timedelta(seconds=1))
    dispatcher = rig.dispatcher()  # not started: a started one without [fleet] drops the leases it finds
    ticked = await dispatcher.tick(now)
    assert ticked and ticked.next is None  # the local task ran; its commit claimed nothing after it
    assert rig.store.get_task_or_raise(local.task_id).status == "completed"
    gated = rig.store.get_task_or_raise(fleet_task)
    assert (gated.status, gated.attempt_count) == ("pending", 0)
    assert [e.type for e in rig.events(fleet_task)] == ["task_enqueued"]
    assert not await dispatcher.tick(now)  # nothing claimable: the lease waits for the fleet
    assert rig.store.fleet_leases_confirmed([fleet_task], now, now + timedelta(seconds=10)) == 1
    assert await dispatcher.tick(now)
    assert rig.store.get_task_or_raise(fleet_task).status == "completed"
    assert rig.store.verify_event_chain() == []


async def test_a_verb_inside_another_is_all_or_nothing_of_its_own(rig: Rig) -> None:
    """Joined transactions are savepoints: an inner verb that raises leaves nothing, the outer goes on
    and commits what it wrote, and the event chain stays whole."""
    store = rig.store
    with store.transaction():
        store.record_event("dispatch_idle", rig.clock.now(), {"n": 1})
        with pytest.raises(RuntimeError), store.transaction():
            store.record_event("dispatch_idle", rig.clock.now(), {"n": 2})
            raise RuntimeError("the inner verb fails")
        store.record_event("dispatch_idle", rig.clock.now(), {"n": 3})
    assert [e.payload["n"] for e in rig.events() if e.type == "dispatch_idle"] == [1, 3]
    assert store.verify_event_chain() == []


async def test_200_tasks_drain_in_priority_then_time_order(rig: Rig) -> None:
    chooser = random.Random(2026)
    start = rig.clock.now()
    tasks = [
        rig.add(priority=chooser.randint(1, 10), schedule={"delay_minutes": chooser.choice([0, 0, 1, 3, 5])})
        for _ in range(200)
    ]
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    expected: list[int] = []
    done: set[int] = set()
    for minute in range(7):
        now = start + timedelta(minutes=minute)
        rig.clock.advance((now - rig.clock.now()).total_seconds())
        due = sorted(
            (t for t in tasks if t.available_at <= now and t.task_id not in done),
            key=lambda t: (t.priority, t.available_at, t.task_id),
        )
        expected += [t.task_id for t in due]
        done |= {t.task_id for t in due}
        assert await dispatcher.run_until_idle() == len(due)
    await dispatcher.stop()
    assert claim_order(rig) == expected and len(expected) == 200
    for task in rig.store.list_tasks(limit=1000):
        assert task.status == "completed", task
        [attempt] = rig.store.attempts_of(task.task_id)
        assert verify_attempt_dir(Path(attempt.evidence_dir)) == []
        assert {"prompt.md", "stdout.log", "stderr.log", "result.json", "manifest.json"} <= {
            p.name for p in Path(attempt.evidence_dir).iterdir()
        }
        assert is_subsequence(SEED_ORDER, [e.type for e in rig.events(task.task_id)])


async def test_priority_1_is_claimed_before_priority_5_and_10(rig: Rig) -> None:
    low, default, urgent = rig.add(priority=10), rig.add(), rig.add(priority=1)
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.run_until_idle()
    assert claim_order(rig) == [urgent.task_id, default.task_id, low.task_id]


async def finish_one(rig: Rig, processes: bool = False, **payload: Any) -> TaskRecord:
    task = rig.add("scripted", payload=payload)
    dispatcher = rig.dispatcher(processes=processes)
    await dispatcher.start()
    await dispatcher.claim_and_run(rig.clock.now())
    await dispatcher.stop()
    return rig.store.get_task_or_raise(task.task_id)


async def test_exit_0_without_an_outcome_is_not_completed(rig: Rig) -> None:
    task = await finish_one(rig, stdout="All done, trust me!")
    assert task.status == "retryable_failure"
    assert "no structured outcome" in (task.last_error or "")


async def test_outcome_in_the_last_fenced_json_block_of_stdout(rig: Rig) -> None:
    message = 'Working...\n```json\n{"status": "failed"}\n```\nthen:\n```json\n' + json.dumps(ok()) + "\n```\n"
    task = await finish_one(rig, stdout=message)
    assert task.status == "completed"
    [attempt] = rig.store.attempts_of(task.task_id)
    assert attempt.diagnostics["outcome_source"] == "final_message"


async def test_a_claimed_artifact_that_does_not_exist_is_not_completed(rig: Rig) -> None:
    task = await finish_one(rig, outcome=ok(artifact_paths=["report.md"]))
    assert task.status == "retryable_failure"
    assert "artifact 'report.md' does not exist in the workspace" in (task.last_error or "")
    types = [e.type for e in rig.events(task.task_id)]
    assert "outcome_downgraded" in types


@pytest.mark.parametrize("path", ["../escape.txt", "/etc/hostname", "link/hostname"])
async def test_an_artifact_outside_the_workspace_is_not_completed(rig: Rig, path: str) -> None:
    (rig.config.paths.workspace / "link").symlink_to("/etc")
    task = await finish_one(rig, outcome=ok(artifact_paths=[path]))
    assert task.status == "retryable_failure"
    assert "outside the workspace" in (task.last_error or "")


async def test_a_real_artifact_completes_and_is_recorded(rig: Rig) -> None:
    task = await finish_one(rig, files={"out/result.txt": "42"}, outcome=ok(artifact_paths=["out/result.txt"]))
    assert task.status == "completed"
    shown = rig.store.attempts_of(task.task_id)[0]
    manifest = json.loads((Path(shown.evidence_dir) / "manifest.json").read_text())
    assert manifest["artifacts"][0]["path"] == "out/result.txt"
    assert manifest["outcome"]["status"] == "completed" and manifest["termination_reason"] == "exited"


@pytest.mark.process
async def test_a_run_dir_nested_deeper_than_python_recurses_is_removed_and_the_attempt_ends_as_it_said(
    rig: Rig,
) -> None:
    """The run dir is the attempt's HOME: what it leaves there goes when it ends. shutil.rmtree recurses
    once per level, so 3,000 nested folders raised RecursionError in the end of the attempt itself."""
    task = await finish_one(rig, processes=True, outcome=ok(), nest=3000)
    assert task.status == "completed", task.last_error
    [attempt] = rig.store.attempts_of(task.task_id)
    runs = rig.config.paths.runs
    assert not (runs / str(task.task_id) / attempt.attempt_id).exists() and not list(runs.rglob("d"))


@pytest.mark.process
async def test_a_sparse_terabyte_artifact_is_refused_unread(rig: Rig) -> None:
    """An artifact is hashed in the database's thread: a terabyte that holds nothing (`truncate -s 1T`,
    instant) held it for about an hour at 3 s a GiB. Past [dispatch] max_artifact_bytes it is not read."""
    task = await finish_one(rig, processes=True, sparse={"big.bin": 1 << 40}, outcome=ok(artifact_paths=["big.bin"]))
    assert task.status == "retryable_failure"
    assert "path 'big.bin': 1,099,511,627,776 bytes, past what agentd reads to hash" in (task.last_error or "")
    assert "([dispatch] max_artifact_bytes) (4,294,967,296 bytes)" in (task.last_error or "")


@pytest.mark.process
async def test_the_artifact_budget_is_for_all_of_an_attempts_files(rig_factory: Callable[..., Rig]) -> None:
    """Each file within the limit is not enough: many of them would add up to the same hour."""

    def small_budget(raw: dict[str, Any]) -> None:
        raw["dispatch"]["max_artifact_bytes"] = 1024 * 1024

    rig = rig_factory(small_budget)
    files = {"a.bin": 700_000, "b.bin": 700_000}
    task = await finish_one(rig, processes=True, sparse=files, outcome=ok(artifact_paths=["a.bin", "b.bin"]))
    assert task.status == "retryable_failure"
    error = task.last_error or ""
    assert "path 'b.bin': 700,000 bytes, past what agentd reads" in error and "'a.bin'" not in error, error
    task = await finish_one(rig, processes=True, sparse={"a.bin": 700_000}, outcome=ok(artifact_paths=["a.bin"]))
    assert task.status == "completed", "the control: one of them fits"


@pytest.mark.parametrize("named", [10_000, 10_001])
async def test_an_outcome_may_name_at_most_ten_thousand_files(rig: Rig, named: int) -> None:
    """Each named file is looked up (~60 µs) in the database's thread, and a 16 MiB result names a million."""
    paths = [f"missing/{n}.txt" for n in range(named)]
    task = await finish_one(rig, outcome=ok(artifact_paths=paths[: named // 2], file_changes=paths[named // 2 :]))
    assert task.status == "retryable_failure"
    refused = f"the outcome names {named:,} files (artifacts and file changes); at most 10,000"
    assert (refused in (task.last_error or "")) is (named > 10_000), (task.last_error or "")[:300]


@pytest.mark.parametrize(("follow_ups", "messages"), [(0, 1000), (1, 1000), (1001, 0)])
async def test_an_outcome_may_ask_for_at_most_a_thousand_side_effects(
    rig_factory: Callable[..., Rig], follow_ups: int, messages: int
) -> None:
    """Each follow-up and message is an outbox row (a refused one too) written in the attempt's commit, and
    each message a delivery: a 16 MiB result asked for millions of them."""

    def allow(raw: dict[str, Any]) -> None:
        for profile in raw["profiles"]:
            profile["result_policy"]["allow_external_messages"] = True

    rig = rig_factory(allow)
    intent = {"task_type": "example", "source": "model", "payload": {}}
    outcome = ok(follow_up_tasks=[intent] * follow_ups, external_messages=[{"n": 1}] * messages)
    task = await finish_one(rig, outcome=outcome)
    rows = rig.store.outbox_of(task.task_id)
    if follow_ups + messages <= 1000:
        assert task.status == "completed" and len(rows) == follow_ups + messages, "the control: within the cap"
        return
    assert task.status == "retryable_failure" and rows == []
    said = f"asks for {follow_ups:,} follow-up tasks and {messages:,} external messages; at most 1,000 in all"
    assert said in (task.last_error or "")


async def test_completed_needs_machine_status_ok_and_exit_0(rig: Rig) -> None:
    task = await finish_one(rig, outcome=ok(machine_status="failed"))
    assert task.status == "retryable_failure" and "machine_status ok" in (task.last_error or "")
    task = await finish_one(rig, outcome=ok(), exit=3)
    assert task.status == "retryable_failure" and "did not end cleanly (exit 3)" in (task.last_error or "")


async def test_the_model_cannot_claim_operator_canceled(rig: Rig) -> None:
    task = await finish_one(
        rig,
        outcome={"status": "operator_canceled", "machine_status": "canceled", "operator_summary": "I cancel myself"},
    )
    assert task.status == "permanent_failure"


async def test_max_attempts_then_permanent_failure_with_backoff_and_reinjection(rig: Rig) -> None:
    task = rig.add("flaky")
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    delays = []
    for _ in range(3):
        before = rig.clock.now()
        assert await dispatcher.run_until_idle() == 1
        assert await dispatcher.run_until_idle() == 0  # backing off: not claimable yet
        current = rig.store.get_task_or_raise(task.task_id)
        if current.status == "retryable_failure":
            delays.append((current.available_at - before).total_seconds())
            rig.clock.advance(delays[-1])
    final = rig.store.get_task_or_raise(task.task_id)
    assert final.status == "permanent_failure" and final.attempt_count == 3
    assert "out of attempts (3 of 3)" in (final.last_error or "")
    assert 30 * 0.8 <= delays[0] <= 30 * 1.2 and 60 * 0.8 <= delays[1] <= 60 * 1.2
    attempts = rig.store.attempts_of(task.task_id)
    third_bundle = Path(attempts[2].prompt_path).read_text()
    for earlier in attempts[:2]:
        assert f"could not reach the thing (attempt {earlier.attempt_id})" in third_bundle
    assert "Earlier attempts at this task failed" not in Path(attempts[0].prompt_path).read_text()
    assert [e.type for e in rig.events(task.task_id)].count("task_retry_scheduled") == 2


@pytest.mark.process
async def test_timeout_kills_a_term_ignoring_adapter_and_its_grandchild(rig_factory: Callable[..., Rig]) -> None:
    rig = rig_factory(lambda raw: raw["adapters"][1].update(timeout_ms=1500))
    started = time.monotonic()
    task = await finish_one(rig, processes=True, stubborn=True, sleep_s=600)
    assert time.monotonic() - started < 1.5 + 1.0 + 2.0  # timeout + kill grace + slack
    assert task.status == "retryable_failure" and "timed out after 1.5s" in (task.last_error or "")
    [attempt] = rig.store.attempts_of(task.task_id)
    assert attempt.exit_status == "timeout" and attempt.termination_reason == "timeout"
    for pid in map(int, (rig.config.paths.workspace / "pids.txt").read_text().split()):
        assert gone(pid), f"pid {pid} survived the timeout"


async def test_recent_outcomes_reach_the_next_bundle(rig: Rig) -> None:
    first = await finish_one(rig, outcome=ok(operator_summary="filed the quarterly report"))
    second = await finish_one(rig, outcome=ok())
    prompt = Path(rig.store.attempts_of(second.task_id)[0].prompt_path).read_text()
    assert f"task {first.task_id} (scripted) completed: filed the quarterly report" in prompt


@pytest.mark.process
async def test_the_adapter_sees_only_its_configured_environment(
    rig_factory: Callable[..., Rig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret_file = tmp_path / "adapter.env"
    secret_file.write_text("API_TOKEN=s3cr3t-value-123\n")
    secret_file.chmod(0o600)
    monkeypatch.setenv("SERVICE_ONLY_SECRET", "do-not-leak")
    rig = rig_factory(lambda raw: raw["adapters"][1].update(env_file=str(secret_file), env={"MODE": "test"}))
    task = await finish_one(rig, processes=True, env_dump=True, outcome=ok())
    [attempt] = rig.store.attempts_of(task.task_id)
    printed = Path(attempt.stdout_path).read_text()
    assert "s3cr3t-value-123" not in printed and "[redacted]" in printed  # redacted by value
    env = json.loads(printed.replace('"[redacted]"', '"x"'))
    assert "SERVICE_ONLY_SECRET" not in env
    assert env["MODE"] == "test" and env["AGENTD_TASK_ID"] == str(task.task_id)
    assert env["AGENTD_ATTEMPT_ID"] == attempt.attempt_id
    assert env["HOME"] == str(rig.config.paths.runs / attempt.attempt_id / "home")  # its run dir, not the evidence


@pytest.mark.process
@pytest.mark.skipif(containment.cgroups() is None, reason="no writable cgroup v2 here: runs are found by marker")
async def test_a_stopped_dispatcher_leaves_no_cgroup_behind(rig: Rig) -> None:
    found = containment.cgroups()
    assert found is not None
    namespace = found.own / containment.namespace_for(rig.config.paths.state_dir)
    task = rig.add("scripted", payload={"outcome": ok()})
    dispatcher = rig.dispatcher(processes=True)
    await dispatcher.start()
    await dispatcher.claim_and_run(rig.clock.now())
    assert namespace.is_dir(), "the attempt ran in a cgroup of the agent's namespace"
    await dispatcher.stop()
    assert rig.store.get_task_or_raise(task.task_id).status == "completed"
    assert not namespace.exists(), "the machine keeps no cgroup of a stopped agent"


async def test_follow_ups_are_applied_once_when_allowed(rig: Rig) -> None:
    follow = {"task_type": "example", "source": "model", "subject": "next step", "payload": {}}
    task = await finish_one(rig, outcome=ok(follow_up_tasks=[follow]))
    assert task.status == "completed"
    [child] = [t for t in rig.store.list_tasks() if t.task_id != task.task_id]
    assert child.subject == "next step" and child.source == f"follow_up:task:{task.task_id}"
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.outbox.apply_pending()  # a second application finds nothing pending
    await dispatcher.stop()
    assert len(rig.store.list_tasks()) == 2


async def test_follow_ups_are_refused_when_the_profile_forbids(rig_factory: Callable[..., Rig]) -> None:
    rig = rig_factory(lambda raw: raw["profiles"][0]["result_policy"].update(allow_follow_up_tasks=False))
    follow = {"task_type": "example", "source": "model", "payload": {}}
    task = await finish_one(rig, outcome=ok(follow_up_tasks=[follow]))
    assert len(rig.store.list_tasks()) == 1
    [entry] = rig.store.outbox_of(task.task_id)
    assert entry["status"] == "refused" and "does not allow follow-up tasks" in entry["result"]["reason"]


async def test_an_invalid_follow_up_is_refused_not_enqueued(rig: Rig) -> None:
    task = await finish_one(rig, outcome=ok(follow_up_tasks=[{"task_type": "nope", "source": "m", "payload": {}}]))
    [entry] = rig.store.outbox_of(task.task_id)
    assert entry["status"] == "refused" and "unknown task type 'nope'" in entry["result"]["reason"]


async def test_cancel_a_pending_task_and_retry_a_failed_one(rig: Rig) -> None:
    waiting = rig.add()
    assert (
        rig.store.cancel_task(waiting.task_id, TaskOutcome.failure("x", "operator_canceled"), rig.clock.now()).action
        == "canceled"
    )
    assert rig.store.get_task_or_raise(waiting.task_id).status == "operator_canceled"
    failing = rig.add("flaky", payload={})
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    for _ in range(3):
        await dispatcher.run_until_idle()
        rig.clock.advance(3600)
    assert rig.store.get_task_or_raise(failing.task_id).status == "permanent_failure"
    again = rig.store.retry_task(failing.task_id, 1, rig.clock.now())
    assert again.status == "pending" and again.max_attempts == 4
    assert await dispatcher.run_until_idle() == 1
    assert len(rig.store.attempts_of(failing.task_id)) == 4  # the history stayed
    await dispatcher.stop()


async def test_a_completed_task_is_never_retried(rig: Rig) -> None:
    done = await finish_one(rig, outcome=ok())
    from agentd.errors import InputError

    with pytest.raises(InputError, match="a completed task is never re-run"):
        rig.store.retry_task(done.task_id, 1, rig.clock.now())


def without_its_adapter(rig_factory: Callable[..., Rig], tmp_path: Path) -> Rig:
    """A rig whose `scripted` adapter passed the config check, then was removed: its attempts
    cannot start."""
    gone = tmp_path / "adapter-removed-after-config-check"
    gone.write_text("#!/bin/sh\n")
    gone.chmod(0o700)
    rig = rig_factory(
        lambda raw: next(a for a in raw["adapters"] if a["adapter_id"] == "scripted").update(command=str(gone))
    )
    gone.unlink()
    return rig


@pytest.mark.process
async def test_an_attempt_that_never_started_still_records_its_bundle(
    rig_factory: Callable[..., Rig], tmp_path: Path
) -> None:
    """A started attempt's bundle is recorded with its start; one whose command cannot run records
    it before its end, so every attempt's evidence names its bundle."""
    rig = without_its_adapter(rig_factory, tmp_path)
    task = await finish_one(rig, processes=True, outcome=ok())
    [attempt] = rig.store.attempts_of(task.task_id)
    assert task.status != "completed" and attempt.bundle_hash is not None
    kinds = [e.type for e in rig.events(task.task_id)]
    assert "bundle_compiled" in kinds and "task_started" not in kinds
    assert kinds.index("bundle_compiled") < kinds.index("task_attempt_finished")


@pytest.mark.process
async def test_a_bundle_the_store_refuses_never_leaves_the_task_running(
    rig_factory: Callable[..., Rig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = without_its_adapter(rig_factory, tmp_path)

    def refuse(*_args: Any) -> None:
        raise ValueError("refused by the test")

    monkeypatch.setattr(Store, "record_bundle", refuse)
    task = await finish_one(rig, processes=True, outcome=ok())
    assert task.status == "retryable_failure"
    assert "bundle_compiled" not in [e.type for e in rig.events(task.task_id)]


async def test_prompt_budget_cuts_are_recorded(rig_factory: Callable[..., Rig]) -> None:
    rig = rig_factory(lambda raw: raw["profiles"][0]["context_policy"].update(max_prompt_chars=1200))
    task = rig.add("scripted", payload={"outcome": ok(), "padding": "x" * 5000})
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.run_until_idle()
    [compiled] = [e for e in rig.events(task.task_id) if e.type == "bundle_compiled"]
    assert compiled.payload["cuts"], compiled.payload
    assert {c["section"] for c in compiled.payload["cuts"]} >= {"task"}
    prompt = Path(rig.store.attempts_of(task.task_id)[0].prompt_path).read_text()
    assert "cut by context_policy.max_prompt_chars" in prompt and "Reporting your outcome" in prompt


async def test_an_attempt_costs_two_hops_to_a_worker_thread(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each hop to a worker thread is a wake-up the event loop waits for (~0.1-0.5 ms on a busy VM): an
    attempt that runs makes two, its start, and its end sealed and committed with the next claim, in one
    (agentd/attempt/run.py, `_conclude`). The chain head file is not written on that path at all: the
    service's own task writes it (at most once a second while busy), and the stop the last one."""
    import anyio.to_thread

    hops: list[str] = []
    real = anyio.to_thread.run_sync

    async def counted(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        inner = getattr(func, "func", func)  # a store verb: functools.partial(verb, store, ...)
        hops.append(getattr(inner, "__qualname__", repr(inner)))
        return await real(func, *args, **kwargs)

    dispatcher = rig.dispatcher()
    await dispatcher.start()
    for n in range(5):
        rig.add("example", subject=f"t{n}")
    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    assert await dispatcher.run_until_idle() == 5
    monkeypatch.undo()
    starts = [n for n, hop in enumerate(hops) if hop == "AttemptVerbs.mark_attempt_started"]
    assert len(starts) == 5
    assert [b - a for a, b in itertools.pairwise(starts)] == [2] * 4, hops  # one attempt to the next
    head = rig.store.chain_head()
    assert head is not None
    published = rig.config.paths.state_dir / "chain_head"
    assert not published.exists(), "published on the attempts' path: issue #43 takes it off it"
    await dispatcher.stop()
    head = rig.store.chain_head()
    assert head is not None and published.read_text() == f"{head[0]}:{head[1]}\n"  # the stop's


async def test_a_boundary_commit_that_fails_leaves_the_outcome_committed_alone(rig: Rig) -> None:
    """The claim that shares the outcome's transaction fails (here: the row saying the next task runs):
    the whole transaction is rolled back, the outcome is committed alone, once, and the next tick claims
    the next task as it would have without the group commit."""
    from agentd.services.dispatch import Dispatcher

    class RowFails(Dispatcher):
        failures = 0

        def _running_row(self, store: Store, claim: Any) -> tuple[int, str] | None:
            if not self.failures:
                self.failures += 1
                raise RuntimeError("the running row cannot be written")
            return super()._running_row(store, claim)

    first, second = rig.add("example", subject="one"), rig.add("example", subject="two")
    dispatcher = RowFails(
        rig.config, rig.db, clock=rig.clock, rng=random.Random(7), adapters=rig.dispatcher().attempts.preparer.adapters
    )
    await dispatcher.start()
    assert await dispatcher.run_until_idle() == 2
    assert dispatcher.failures == 1
    for task in (first, second):
        assert rig.store.get_task_or_raise(task.task_id).status == "completed"
        assert [e.type for e in rig.events(task.task_id)].count("task_finished") == 1
    assert rig.store.verify_event_chain() == []
    await dispatcher.stop()


async def test_a_drain_reads_each_task_row_once_per_claim(rig: Rig) -> None:
    """The outcome commit at the attempt boundary reads nothing back (the dispatcher needs nothing of the
    finished task): a task's whole row is read when it is claimed, not again when its outcome is."""
    from agentd.store.columns import TASK_COLUMNS

    dispatcher = rig.dispatcher()
    await dispatcher.start()
    for n in range(5):
        rig.add("example", subject=f"t{n}")
    statements = await drained_with_statements(dispatcher, 5)
    rows_read = [s for s in statements if s.startswith(f"SELECT {TASK_COLUMNS}") and "WHERE t.id = " in s]
    assert len(rows_read) == len(claim_order(rig)) == 5
    await dispatcher.stop()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"TOKEN=\xff\xfe\n", "not UTF-8 (invalid start byte at byte 6)"),
        (b"TOKEN=" + b"x" * (1 << 20) + b"\n", "over 1,048,576 bytes"),
        (b"not a pair\n", "line 1: expected KEY=VALUE"),
    ],
    ids=["not UTF-8", "over a mebibyte", "not KEY=VALUE"],
)
async def test_an_env_file_spoiled_after_the_config_check_fails_the_attempt_not_the_dispatcher(
    rig_factory: Callable[..., Rig], tmp_path: Path, content: bytes, said: str
) -> None:
    """The adapter's env_file is read per attempt: whatever makes it unusable by then ends that attempt
    with a retryable failure naming the file, and the dispatcher goes on to the next task."""
    secrets = tmp_path / "adapter.env"
    secrets.write_text("API_TOKEN=s3cr3t\n")
    secrets.chmod(0o600)
    rig = rig_factory(lambda raw: raw["adapters"][1].update(env_file=str(secrets)))
    secrets.write_bytes(content)
    first, second = rig.add("scripted", payload={"outcome": ok()}), rig.add("scripted", payload={"outcome": ok()})
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    assert await dispatcher.run_until_idle() == 2
    await dispatcher.stop()
    for task_id in (first.task_id, second.task_id):
        task = rig.store.get_task_or_raise(task_id)
        assert task.status == "retryable_failure", (task_id, task.status, task.last_error)
        assert f"{secrets}" in (task.last_error or "") and said in (task.last_error or ""), task.last_error
