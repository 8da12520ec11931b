"""The pure middle, table by table: the completion gate, the bundle compiler and the judge take data
and return data — no database, no process, no file system."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError
from support import task_record

from agentd.adapters.base import AdapterRun
from agentd.attempt.bundle import BundleInput, PriorAttempt, RecentOutcome, SkillBrief, WorkflowStep, compile_bundle
from agentd.attempt.judge import AttemptFacts, OutboxPolicy, judge
from agentd.attempt.outcome import CompletionChecks, Extracted, FileFact, RetryPolicy, gate
from agentd.records import (
    AgentConstitution,
    ContextPolicy,
    RelativeSchedule,
    ResultPolicy,
    SensorEvent,
    SubagentProfile,
    TaskAttempt,
    TaskIntent,
    TaskOutcome,
    TaskRecord,
    WorkflowRef,
)
from agentd.records.workflows import ScheduleSpec

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
STARTED = NOW - timedelta(minutes=5)
POLICY = RetryPolicy(30, 3600, 0.0, 300, 5, 3)


def outcome(**fields: Any) -> TaskOutcome:
    return TaskOutcome.model_validate(
        {"status": "completed", "machine_status": "ok", "operator_summary": "did it", **fields}
    )


def fact(path: str, **fields: Any) -> FileFact:
    return FileFact(path, **{"exists": True, "is_file": True, "mtime": NOW.timestamp(), "sha256": "ab", **fields})


GATE_CASES: list[tuple[str, dict[str, Any], dict[str, FileFact], CompletionChecks, bool, str | None]] = [
    ("a plain completion", {}, {}, CompletionChecks(), True, None),
    ("machine_status failed", {"machine_status": "failed"}, {}, CompletionChecks(), False, "machine_status ok"),
    (
        "a claimed artifact that exists",
        {"artifact_paths": ["a.txt"]},
        {"a.txt": fact("a.txt")},
        CompletionChecks(),
        True,
        None,
    ),
    (
        "a claimed artifact that does not",
        {"artifact_paths": ["a.txt"]},
        {"a.txt": FileFact("a.txt")},
        CompletionChecks(),
        False,
        "'a.txt' does not exist",
    ),
    (
        "an artifact outside the workspace",
        {"artifact_paths": ["../x"]},
        {"../x": FileFact("../x", "path '../x' is outside the workspace")},
        CompletionChecks(),
        False,
        "outside the workspace",
    ),
    ("required and missing", {}, {}, CompletionChecks(required_artifacts=("r.md",)), False, "'r.md' (required)"),
    ("artifacts required, none claimed", {}, {}, CompletionChecks(require_artifacts=True), False, "none were claimed"),
    (
        "a claimed change older than the attempt",
        {"file_changes": ["f.py"]},
        {"f.py": fact("f.py", mtime=(STARTED - timedelta(hours=1)).timestamp())},
        CompletionChecks(verify_file_changes=True),
        False,
        "not modified during the attempt",
    ),
    (
        "a claimed change made during it",
        {"file_changes": ["f.py"]},
        {"f.py": fact("f.py")},
        CompletionChecks(verify_file_changes=True),
        True,
        None,
    ),
    ("an audit with no output", {}, {}, CompletionChecks(require_adapter_audit=True), False, "printed nothing"),
]


def gated_at(
    said: TaskOutcome,
    *,
    adapter_ok: bool | None = True,
    files: dict[str, FileFact] | None = None,
    checks: CompletionChecks | None = None,
    audit_bytes: int = 1,
) -> Any:
    """`gate` over an outcome from the result file of an attempt started at STARTED, no adapter failure."""
    return gate(
        Extracted(said, "result_file"),
        adapter_ok=adapter_ok,
        adapter_failure=None,
        files=files or {},
        attempt_started=STARTED,
        checks=checks or CompletionChecks(),
        audit_bytes=audit_bytes,
    )


@pytest.mark.parametrize(
    ("name", "fields", "files", "checks", "completed", "reason"), GATE_CASES, ids=[c[0] for c in GATE_CASES]
)
def test_gate(
    name: str,
    fields: dict[str, Any],
    files: dict[str, FileFact],
    checks: CompletionChecks,
    completed: bool,
    reason: str | None,
) -> None:
    audit = 0 if checks.require_adapter_audit else 10
    gated = gated_at(outcome(**fields), files=files, checks=checks, audit_bytes=audit)
    assert (gated.outcome.status == "completed") is completed
    if reason:
        assert any(reason in r for r in gated.reasons), gated.reasons


def test_gate_refuses_a_model_claiming_operator_canceled_and_says_an_unknown_exit_is_not_a_failure() -> None:
    canceled = gated_at(outcome(status="operator_canceled", machine_status="canceled"))
    assert canceled.outcome.status == "permanent_failure"
    swept = gated_at(outcome(), adapter_ok=None)
    assert swept.outcome.status == "completed"


# --- compile_bundle ---------------------------------------------------------------------------------


def task(**fields: Any) -> TaskRecord:
    return task_record(STARTED, **fields)


def bundle_input(max_chars: int = 50_000, **fields: Any) -> BundleInput:
    profile = SubagentProfile(
        profile_id="operator",
        style="claude-like",
        role="Do one job.",
        default_adapter_id="script",
        prompt_parts=["Work in the workspace."],
        skill_ids=[],
        context_policy=ContextPolicy(max_prompt_chars=max_chars, include_recent_memory=True),
        result_policy=ResultPolicy(allow_follow_up_tasks=False, allow_external_messages=False),
    )
    constitution = AgentConstitution(
        agent_id="demo",
        soul_path="/s",
        purpose_path="/p",
        soul_hash="11",
        purpose_hash="22",
        version="1",
        revised_at=NOW,
    )
    base: dict[str, Any] = {
        "agent_name": "Demo",
        "constitution": constitution,
        "soul_text": "be careful",
        "purpose_text": "help",
        "profile": profile,
        "skills": (SkillBrief("example", "how to do it " * 50, (("hello", "greets"),)),),
        "task": task(),
        "attempt_number": 2,
        "prior_attempts": (PriorAttempt(1, "exited", "forgot the file"),),
        "recent_outcomes": (RecentOutcome(3, "example", "completed", "filed the quarterly report"),),
    }
    return BundleInput(**{**base, **fields})


BUNDLE_CASES: list[tuple[str, BundleInput, list[str], list[str]]] = [
    (
        "everything fits",
        bundle_input(),
        ["SOUL.md sha256 11", "Task 7 (example), attempt 2 of 3", "forgot the file", "filed the quarterly report",
         "write one JSON object", "follow_up_tasks\": task intents for later (not allowed"],
        [],
    ),
    ("recent work is cut first", bundle_input(max_chars=2_000), ["[agentd: recent_work cut"], []),
    ("the task is never cut before the skills", bundle_input(max_chars=1_200), ["[agentd: skills cut"], []),
    (
        "a workflow step lists its signals",
        bundle_input(
            workflow=WorkflowStep(4, "goal-loop", "verify", 2, ("continue", "complete"))
        ),
        ["step 'verify' (iteration 2) of workflow 4", '"workflow_signal": one of continue, complete'],
        [],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("name", "given", "present", "cuts"), BUNDLE_CASES, ids=[c[0] for c in BUNDLE_CASES])
def test_compile_bundle(name: str, given: BundleInput, present: list[str], cuts: list[str]) -> None:
    bundle = compile_bundle(given)
    for text in present:
        assert text in bundle.text, (name, text)
    assert len(bundle.text) <= given.profile.context_policy.max_prompt_chars + bundle.over_budget_chars
    assert bundle.bundle_hash == compile_bundle(given).bundle_hash  # the same input, the same hash


# --- judge --------------------------------------------------------------------------------------------


def attempt() -> TaskAttempt:
    return TaskAttempt(
        attempt_id="01ATTEMPT", task_id=7, attempt_number=1, adapter_id="script", adapter_kind="script", model=None,
        runner_id="r", started_at=STARTED, ended_at=None, exit_status=None, retry_class=None, termination_reason=None,
        bundle_hash=None, evidence_dir=None, pid=1234,
    )  # fmt: skip


def facts(**fields: Any) -> AttemptFacts:
    base: dict[str, Any] = {"task": task(), "attempt": attempt(), "checks": CompletionChecks(), "timeout_s": 60.0}
    return AttemptFacts(**{**base, **fields})


def run(**fields: Any) -> AdapterRun:
    return AdapterRun(**{"exit_status": "ok", "ok": True, "failure": None, "final_message": "", **fields})


RESULT = outcome().model_dump_json()
FOLLOW_UP = outcome(follow_up_tasks=[TaskIntent(task_type="example", source="x", payload={})]).model_dump_json()
STEP = task(workflow_ref=WorkflowRef(workflow_id=4, state_id="verify", instance_key="k"), workflow_iteration=2)

JUDGE_CASES: list[tuple[str, AttemptFacts, dict[str, Any]]] = [
    ("completed", facts(run=run(), result_text=RESULT), {"status": "completed", "termination_reason": "exited", "exit_status": "ok"}),
    ("no outcome", facts(run=run()), {"status": "retryable_failure", "diag": ("failure_type", "no_outcome")}),
    ("a timeout", facts(run=run(exit_status="timeout", ok=False)), {"status": "retryable_failure", "termination_reason": "timeout"}),
    ("rate limited: a free attempt", facts(run=run(ok=False, rate_limited=True, failure="429")), {"status": "retryable_failure", "free_attempt": True}),
    ("interrupted by a stop", facts(stopped="interrupted"), {"status": "retryable_failure", "free_attempt": True, "termination_reason": "interrupted"}),
    ("canceled by the operator", facts(run=run(), stopped="operator_canceled"), {"status": "operator_canceled"}),
    ("swept with a result: judged", facts(swept=True, result_text=RESULT), {"status": "completed", "exit_status": "error", "termination_reason": "boot_sweep", "boot_sweep": True}),
    ("swept without one: a free crash", facts(swept=True), {"status": "retryable_failure", "crashed": True, "free_attempt": True}),
    ("the third crash in a row", facts(swept=True, task=task(crash_count=2)), {"status": "permanent_failure", "termination_reason": "crashed_runtime"}),
    ("agentd's own failure", facts(internal_error="agentd failed: ValueError: x"), {"status": "retryable_failure", "termination_reason": "internal_error"}),
    ("never started: no side effects", facts(stopped="interrupted", started=False), {"side_effects": "none"}),
    ("follow-ups refused by policy", facts(run=run(), result_text=FOLLOW_UP), {"outbox": [("follow_up_task", "refused")]}),
    ("follow-ups allowed", facts(run=run(), result_text=FOLLOW_UP, outbox_policy=OutboxPolicy(True, False)), {"outbox": [("follow_up_task", "pending")]}),
    ("a workflow step signals its workflow", facts(task=STEP, run=run(), result_text=RESULT), {"outbox": [("workflow_signal", "pending")]}),
    ("out of attempts", facts(task=task(attempt_count=3), run=run()), {"status": "permanent_failure"}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "given", "expected"), JUDGE_CASES, ids=[c[0] for c in JUDGE_CASES])
def test_judge(name: str, given: AttemptFacts, expected: dict[str, Any]) -> None:
    end = judge(given, now=NOW, policy=POLICY, rng=random.Random(1))
    for key, value in expected.items():
        if key == "diag":
            assert end.diagnostics[value[0]] == value[1], (name, end.diagnostics)
        elif key == "outbox":
            assert [(e.kind, e.status) for e in end.outbox] == value, name
        else:
            assert getattr(end, key) == value, (name, key, getattr(end, key))
    assert end.ended_at == NOW and end.task_id == 7 and end.attempt_id == "01ATTEMPT"


# --- JSON numbers and booleans ----------------------------------------------------------------------

INTENT = {"task_type": "example", "source": "x", "payload": {}}
SENSED = {"sensor_id": "s", "event_id": "e", "observed_at": "2026-11-22T10:00:00Z", "source_ref": "r",
          "dedupe_key": "k", "payload": {}}  # fmt: skip
OUTCOME = {"status": "completed", "machine_status": "ok", "operator_summary": "done"}


def _intent(**fields: Any) -> dict[str, Any]:
    return {**INTENT, **fields}


AUDIT = "evidence_requirements.require_adapter_audit"
CHANGES = "evidence_requirements.require_file_change_verification"
STEP_REF = {"workflow_id": "4", "state_id": "a", "instance_key": "k"}
JSON_TYPED: dict[str, tuple[type[Any], dict[str, Any], str]] = {
    # what: (record, input, the field the refusal names)
    "priority true": (TaskIntent, _intent(priority=True), "priority"),
    "priority as text": (TaskIntent, _intent(priority="1"), "priority"),
    "priority 1_0": (TaskIntent, _intent(priority="1_0"), "priority"),
    "priority as an array": (TaskIntent, _intent(priority=[1]), "priority"),
    "delay as text": (TaskIntent, _intent(schedule={"delay_minutes": "5"}), "schedule.delay_minutes"),
    "delay false": (TaskIntent, _intent(schedule={"delay_minutes": False}), "schedule.delay_minutes"),
    "an audit of 'yes'": (TaskIntent, _intent(evidence_requirements={"require_adapter_audit": "yes"}), AUDIT),
    "an audit of 1": (TaskIntent, _intent(evidence_requirements={"require_file_change_verification": 1}), CHANGES),
    "a workflow id as text": (TaskIntent, _intent(workflow_ref=STEP_REF), "workflow_ref.workflow_id"),
    "a sensor's task": (SensorEvent, {**SENSED, "proposed_task": _intent(priority=" 3 ")}, "proposed_task.priority"),
    "an agent's follow-up": (
        TaskOutcome,
        {**OUTCOME, "follow_up_tasks": [_intent(priority=True)]},
        "follow_up_tasks.0.priority",
    ),
    "an interval as text": (
        ScheduleSpec,
        {"schedule_id": "s", "interval_seconds": "90", "task": {}},
        "interval_seconds",
    ),
    "a time as seconds since 1970": (SensorEvent, {**SENSED, "observed_at": 1_700_000_000}, "observed_at"),
    "a time of 0": (SensorEvent, {**SENSED, "freshness_deadline": 0}, "freshness_deadline"),
    "a time of true": (TaskIntent, _intent(available_at=True), "available_at"),
    "enabled 'off'": (
        ScheduleSpec,
        {"schedule_id": "s", "interval_seconds": 90, "enabled": "off", "task": {}},
        "enabled",
    ),
}


@pytest.mark.parametrize("case", sorted(JSON_TYPED))
def test_a_number_or_boolean_field_takes_only_that_json_type(case: str) -> None:
    """As the schema agentd publishes says ("type": "integer", "boolean", a date-time "string"): pydantic
    alone took true as priority 1, "1_0" as 10, "off" as false and 0 as 1970-01-01."""
    record, given, field = JSON_TYPED[case]
    with pytest.raises(ValidationError) as refused:
        record.model_validate(given)
    assert [".".join(str(part) for part in error["loc"]) for error in refused.value.errors()] == [field]


def test_a_whole_float_is_still_an_integer_as_in_json_schema() -> None:
    assert TaskIntent.model_validate(_intent(priority=3.0)).priority == 3
    assert (
        ScheduleSpec.model_validate({"schedule_id": "s", "interval_seconds": 90.0, "task": {}}).interval_seconds == 90
    )
    assert TaskIntent.model_validate(_intent(schedule={"delay_minutes": 5})).schedule == RelativeSchedule(
        delay_minutes=5
    )
