"""The record `enqueue_task` returns is built from the values it wrote (issue 56): for any admitted intent it
is the record a read of the row gives, field for field, and the enqueue reads no task row back to make it."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from support import examples

from agentd.config import Config
from agentd.errors import InputError
from agentd.records import NewTask, TaskIntent, record_json
from agentd.store import Store
from agentd.store.workflows import insert_workflow
from agentd.work.intake import admit_task

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
NUMBER = st.one_of(st.integers(0, 3600), st.floats(0, 3600, allow_nan=False, allow_infinity=False))
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), NUMBER, TEXT)
JSON_VALUE = st.recursive(
    JSON_LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3)
)
EXAMPLE_PAYLOAD = st.fixed_dictionaries(
    {},
    optional={
        "note": TEXT,
        "write": st.from_regex(r"[A-Za-z0-9._/-]{1,8}", fullmatch=True),
        "fail": st.sampled_from(["retryable", "permanent", "no-outcome"]),
        "sleep_s": NUMBER,
        "cost_usd": st.floats(0, 100),
    },
)
# The goal types' schema takes any other key too: any JSON value under it.
GOAL_PAYLOAD = st.builds(
    lambda known, other: other | known,
    st.fixed_dictionaries({}, optional={"goal": TEXT, "iterations": st.integers(1, 20)}),
    st.dictionaries(TEXT, JSON_VALUE, max_size=3),
)
ZONE = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda minutes: timezone(timedelta(minutes=minutes)))
# fold=0: in a fixed-offset zone fold means nothing (no wall time repeats), and no clock gives 1.
MOMENT = st.datetimes(datetime(2000, 1, 1), datetime(2100, 1, 1), timezones=st.just(UTC) | ZONE).map(
    lambda moment: moment.replace(fold=0)
)
EVIDENCE = st.fixed_dictionaries(
    {},
    optional={
        "required_artifacts": st.lists(st.from_regex(r"[a-z0-9._-]{1,8}", fullmatch=True), max_size=2),
        "require_file_change_verification": st.booleans() | st.none(),
        "require_adapter_audit": st.booleans() | st.none(),
    },
)
STATES = ("plan", "execute", "verify")


@st.composite
def intents(draw: st.DrawFn) -> dict[str, Any]:
    """A task intent as `agentd task add` or the API takes it, every optional field present or not."""
    task_type = draw(st.sampled_from(["example", "plan", "execute", "verify"]))
    optional = {
        "subject": st.none() | TEXT,
        "description": st.none() | TEXT,
        "priority": st.none() | st.integers(1, 10),
        "requested_profile_id": st.none() | st.just("operator"),
        "requested_adapter_id": st.none() | st.just("script"),
        "skill_ids": st.none() | st.just([]) | st.just(["example"]),
        "evidence_requirements": st.none() | EVIDENCE,
        "available_at": MOMENT,
        "schedule": st.builds(lambda minutes: {"delay_minutes": minutes}, st.floats(0, 525_600)),
        "workflow_ref": st.builds(
            lambda state, key: {"workflow_id": 1, "state_id": state, "instance_key": key},
            st.sampled_from(STATES),
            st.sampled_from(["the workflow's key", "another key"]),
        ),
    }
    payload = EXAMPLE_PAYLOAD if task_type == "example" else GOAL_PAYLOAD
    base = {"task_type": task_type, "source": draw(TEXT.filter(bool)), "payload": draw(payload)}
    return base | draw(st.fixed_dictionaries({}, optional=optional))


# What no intent sets but other producers do (follow-ups, workflows): task 1 exists to be a parent.
BEYOND_INTENT = st.fixed_dictionaries(
    {},
    optional={
        "parent_task_id": st.just(1),
        "root_task_id": st.just(1),
        "delegation_depth": st.integers(0, 5),
        "delegation_caps": st.dictionaries(st.sampled_from(["max_depth", "max_per_outcome"]), st.integers(0, 9)),
        "workflow_iteration": st.none() | st.just(0),
    },
)


def ready(store: Store, config: Config) -> None:
    """Workflow 1 (key "the workflow's key") and task 1, once per store: what the drawn tasks may name."""
    if store.get_task(1) is not None:
        return
    # Hundreds of commits in one test: no fsync each (what is judged here is the record, not durability;
    # on a disk shared with other work, FULL made this test's time the disk's).
    store._conn.execute("PRAGMA synchronous = OFF")
    now = store.clock.now()
    with store.transaction():
        insert_workflow(store.tx, "goal-loop", "the workflow's key", "plan", None, now, "test")
    store.enqueue_task(admit_task(TaskIntent(task_type="plan", source="t", payload={}), config, now, trusted=True), now)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(intent=intents(), beyond=BEYOND_INTENT, now=MOMENT, approval=st.booleans())
@example(  # every evidence requirement unset: stored as {}, read back as none
    intent={"task_type": "example", "source": "s", "payload": {}, "evidence_requirements": {}},
    beyond={},
    now=datetime(2026, 11, 22, 10, tzinfo=UTC),
    approval=False,
)
@example(  # a workflow_ref whose instance key is not the workflow's: the record names the workflow's
    intent={
        "task_type": "plan",
        "source": "s",
        "payload": {"goal": "g"},
        "workflow_ref": {"workflow_id": 1, "state_id": "plan", "instance_key": "another key"},
    },
    beyond={},
    now=datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=timezone(timedelta(hours=-5))),
    approval=True,
)
def test_the_record_an_enqueue_returns_is_the_row_read_back(
    store: Store, config: Config, intent: dict[str, Any], beyond: dict[str, Any], now: datetime, approval: bool
) -> None:
    ready(store, config)
    try:
        new = admit_task(TaskIntent.model_validate(intent), config, now, trusted=True, require_approval=approval)
    except (ValidationError, InputError):
        assume(False)
        return
    if beyond.get("workflow_iteration") is not None:  # one task per (workflow, state, iteration): a new one
        beyond["workflow_iteration"] = len(store.all_task_ids())
    new = dataclasses.replace(new, **beyond)
    returned = store.enqueue_task(new, now, event_payload={"by": "tester"})
    read = store.get_task_or_raise(returned.task_id)
    assert returned == read
    # Every field, its type and its time zone too (== takes 10:00+01:00 for 09:00Z): the same text.
    assert repr(returned) == repr(read)
    assert record_json(returned) == record_json(read)


def test_an_enqueue_reads_no_task_row_back(store: Store, config: Config) -> None:
    """The record is built from what the INSERT wrote: no SELECT of the tasks table runs (the new row's
    read-back was a fifth of an enqueue's CPU: docs/decisions.md, "Enqueue from the values in hand")."""
    now = store.clock.now()
    new = admit_task(TaskIntent(task_type="example", source="t", payload={"note": "hi"}), config, now, trusted=True)
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    try:
        task = store.enqueue_task(new, now)
    finally:
        store._conn.set_trace_callback(None)
    reads = [sql for sql in statements if sql.lstrip().upper().startswith("SELECT") and "tasks" in sql]
    assert reads == [], reads
    assert task == store.get_task_or_raise(task.task_id)
    assert isinstance(new, NewTask) and task.payload == {"note": "hi"} and task.status == "pending"
