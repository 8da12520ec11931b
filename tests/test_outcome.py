"""The pure middle: outcome extraction, the retry decision, backoff, evidence sealing."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support import task_record

from agentd.attempt.outcome import RESET_JITTER_S, RetryPolicy, backoff, decide, extract_outcome
from agentd.clock import FakeClock
from agentd.evidence import AttemptPaths, make_attempt_dir, manifest_problems, write_manifest
from agentd.records import TaskOutcome, TaskRecord

POLICY = RetryPolicy(
    backoff_base_s=30, backoff_max_s=3600, backoff_jitter=0.2, rate_limit_backoff_s=300, max_rate_limit_reschedules=2
)
NOW = FakeClock().now()
FAILED = TaskOutcome(status="retryable_failure", machine_status="needs_retry", operator_summary="nope")


def task(**fields: Any) -> TaskRecord:
    return task_record(NOW, **fields)


def test_result_file_wins_over_the_final_message() -> None:
    outcome = {"status": "completed", "machine_status": "ok", "operator_summary": "from file"}
    message = '```json\n{"status": "blocked", "machine_status": "blocked", "operator_summary": "msg"}\n```'
    found = extract_outcome(json.dumps(outcome), message)
    assert found.source == "result_file" and found.outcome and found.outcome.operator_summary == "from file"


def test_an_invalid_result_file_falls_back_and_says_why() -> None:
    found = extract_outcome("{not json", "no block here")
    assert found.outcome is None and "result file: not JSON" in (found.problem or "")
    found = extract_outcome('{"status": "completed"}', None)
    assert found.outcome is None and "not a TaskOutcome (machine_status: Field required)" in (found.problem or "")


def test_a_retryable_failure_backs_off_exponentially_with_jitter() -> None:
    rng = random.Random(1)
    first = decide(task(attempt_count=1), 0, FAILED, now=NOW, policy=POLICY, rng=rng)
    second = decide(task(attempt_count=2), 0, FAILED, now=NOW, policy=POLICY, rng=rng)
    assert first.status == second.status == "retryable_failure"
    assert first.available_at and second.available_at
    assert timedelta(seconds=24) <= first.available_at - NOW <= timedelta(seconds=36)
    assert timedelta(seconds=48) <= second.available_at - NOW <= timedelta(seconds=72)
    assert backoff(30, 20, POLICY, rng) <= 3600 * 1.2


def test_out_of_attempts_is_permanent() -> None:
    final = decide(task(attempt_count=3), 0, FAILED, now=NOW, policy=POLICY, rng=random.Random())
    assert final.status == "permanent_failure" and final.retry_class == "permanent"
    assert final.last_error == "out of attempts (3 of 3): nope"


def test_free_attempts_do_not_count() -> None:
    """Three attempts made, one of them interrupted by a stop: one counted attempt is left."""
    again = decide(task(attempt_count=3), 1, FAILED, now=NOW, policy=POLICY, rng=random.Random())
    assert again.status == "retryable_failure"


def test_rate_limits_back_off_longer_do_not_spend_attempts_and_are_capped() -> None:
    rng = random.Random(3)
    limited = decide(task(attempt_count=3), 0, FAILED, now=NOW, policy=POLICY, rng=rng, rate_limited=True)
    assert limited.status == "retryable_failure" and limited.free_attempt and limited.rate_limited
    assert limited.available_at and limited.available_at - NOW >= timedelta(seconds=240)
    capped = decide(
        task(attempt_count=5, rate_limit_count=2, free_attempt_count=2),
        2,
        FAILED,
        now=NOW,
        policy=POLICY,
        rng=rng,
        rate_limited=True,
    )
    assert capped.status == "permanent_failure" and capped.last_error == "rate limited 3 times (cap 2)"


@pytest.mark.parametrize(("reset_s", "waited_s"), [(40, 40), (3, 3), (-5, 0), (30 * 3600, 6 * 3600)])
def test_a_rate_limit_with_the_providers_reset_waits_for_it_not_a_fixed_backoff(reset_s: int, waited_s: int) -> None:
    """The provider's reset (docs/gateway.md): its time, a little after (never before), at most [dispatch]
    max_reset_wait_s (6 h by default); a reset already past is retried at once."""
    reset = NOW + timedelta(seconds=reset_s)
    for seed in range(20):
        limited = decide(
            task(), 0, FAILED, now=NOW, policy=POLICY, rng=random.Random(seed), rate_limited=True, reset_at=reset
        )
        assert limited.status == "retryable_failure" and limited.free_attempt and limited.available_at
        wait = (limited.available_at - NOW).total_seconds()
        cap = POLICY.max_reset_wait_s
        assert waited_s <= wait <= min(waited_s + RESET_JITTER_S, cap), (seed, wait)


def test_an_interruption_is_retried_at_once_even_on_the_last_attempt() -> None:
    again = decide(task(attempt_count=3), 0, FAILED, now=NOW, policy=POLICY, rng=random.Random(), interrupted=True)
    assert again.status == "retryable_failure" and again.available_at == NOW and again.free_attempt


@pytest.mark.parametrize("status", ["permanent_failure", "blocked"])
def test_model_reported_terminal_statuses_are_kept(status: str) -> None:
    outcome = TaskOutcome(status=status, machine_status="failed", operator_summary="no")  # type: ignore[arg-type]
    assert decide(task(), 0, outcome, now=NOW, policy=POLICY, rng=random.Random()).status == status


def hash_problems(paths: AttemptPaths) -> list[str]:
    """The files and the artifact_hash against the manifest (the schema is tested with real manifests)."""
    return manifest_problems(paths.root, json.loads(paths.manifest.read_text()))


def test_evidence_verify_catches_an_edited_file_and_a_forged_hash(tmp_path: Path) -> None:
    paths = AttemptPaths(tmp_path / "attempt")
    make_attempt_dir(paths)
    paths.stdout.write_text("honest output\n")
    paths.prompt.write_text("the bundle\n")
    write_manifest(paths, {"run_id": "a1", "termination_reason": "exited"})
    assert hash_problems(paths) == []
    assert oct(paths.manifest.stat().st_mode & 0o777) == "0o400"
    paths.stdout.write_text("edited output\n")
    assert any("edited after the attempt" in p for p in hash_problems(paths))
    paths.stdout.write_text("honest output\n")
    manifest = json.loads(paths.manifest.read_text())
    manifest["termination_reason"] = "completed"
    paths.manifest.chmod(0o600)
    paths.manifest.write_text(json.dumps(manifest))
    assert any("artifact_hash does not match" in p for p in hash_problems(paths))
