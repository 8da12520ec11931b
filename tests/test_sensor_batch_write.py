"""Sensor intake's batched write (issue 27): a batch's events and sensor_events rows are written by one
executemany each as its transaction ends, and what is recorded is what one statement per row recorded."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentd.clock import FakeClock
from agentd.config import Config
from agentd.records import TaskIntent
from agentd.services.sensor_runs import parse_output
from agentd.store import Store
from agentd.work.intake import admit_task


def line(key: str, **extra: object) -> str:
    event = {"event_id": f"e-{key}", "observed_at": "2026-01-01T00:00:00Z", "source_ref": "t", "dedupe_key": key}
    return json.dumps({"payload": {"key": key}, **event, **extra})


def task(subject: str) -> dict[str, object]:
    return {"task_type": "example", "source": "x", "subject": subject, "payload": {}}


def record(store: Store, config: Config, clock: FakeClock, lines: list[str]) -> None:
    accepted, rejected = parse_output("s", "\n".join(lines), config, clock.now())
    store.record_sensor_events("s", accepted, rejected, clock.now())


def test_a_batch_records_each_event_in_order_and_marks_a_repeat_of_a_key_new_in_the_same_batch(
    store: Store, config: Config, clock: FakeClock
) -> None:
    """The rows are inserted before the repeats mark them: a key's first line and its repeat in one batch
    leave the row marked (deduped_at) and one sensor_event_deduped, after the chain events of the lines
    before it, in line order."""
    stale = line("old", freshness_deadline="2000-01-01T00:00:00Z")
    before = store.last_event_sequence()  # the migrations' events
    record(store, config, clock, [line("a", proposed_task=task("A")), line("b"), line("a"), stale, "not json"])
    written = store.read_events(after=before)
    kinds = [(e.type, e.payload.get("dedupe_key")) for e in written]
    assert kinds == [
        ("sensor_event_recorded", "a"),
        ("task_enqueued", None),
        ("sensor_task_created", "a"),
        ("sensor_event_recorded", "b"),
        ("sensor_event_deduped", "a"),
        ("sensor_event_recorded", "old"),
        ("sensor_event_stale", "old"),
        ("sensor_event_rejected", None),
    ]
    assert [e.sequence for e in written] == list(range(before + 1, before + 9))
    assert store.verify_event_chain() == []
    with sqlite3.connect(store.path) as conn:
        rows = conn.execute("SELECT dedupe_key, result, deduped_at IS NOT NULL FROM sensor_events ORDER BY id")
        assert rows.fetchall() == [("a", "created", 1), ("b", "recorded", 0), ("old", "stale", 0)]


def test_after_a_batch_an_event_is_written_at_once_again(store: Store, config: Config, clock: FakeClock) -> None:
    """The held rows end with the batch: the next verb's event is in the table as soon as it is appended."""
    record(store, config, clock, [line("a")])
    record(store, config, clock, [line("a"), line("a")])  # the first repeat, then a repeat noted already
    store.record_event("dispatch_started", clock.now())
    assert [e.type for e in store.read_events()][-2:] == ["sensor_event_deduped", "dispatch_started"]
    assert store.verify_event_chain() == []


def test_a_batch_s_tasks_get_the_ids_one_insert_at_a_time_gave_around_workflows_and_approvals(
    store: Store, config: Config, clock: FakeClock
) -> None:
    """The batch's task rows go in by one executemany with their ids worked out first; a workflow (which
    reads tasks) and a task held for approval (whose request updates its row) come between them, and
    every event, row and approval names the task it names one insert at a time."""
    workflow = {"template": "goal-loop", "instance_key": "w1"}
    lines = [line("a", proposed_task=task("A")), line("w", proposed_workflow=workflow)]
    lines += [line(k, proposed_task=task(k.upper())) for k in ("b", "c", "d")]
    accepted, rejected = parse_output("s", "\n".join(lines), config, clock.now())
    held = admit_task(TaskIntent(**task("C")), config, clock.now(), trusted=False, require_approval=True)
    accepted[3] = replace(accepted[3], task=held)
    store.record_sensor_events("s", accepted, rejected, clock.now())
    created = {e.payload["dedupe_key"]: e.task_id for e in store.read_events(types=("sensor_task_created",))}
    assert created == {"a": 1, "b": 2, "c": 3, "d": 4}
    with sqlite3.connect(store.path) as conn:
        rows = dict(conn.execute("SELECT dedupe_key, task_id FROM sensor_events WHERE task_id IS NOT NULL"))
        subjects = dict(conn.execute("SELECT id, subject FROM tasks"))
        approvals = conn.execute("SELECT task_id FROM approvals").fetchall()
    assert rows == created and subjects == {1: "A", 2: "B", 3: "C", 4: "D"} and approvals == [(3,)]
    assert [t.task_id for t in store.list_tasks() if t.awaiting_approval] == [3]
    assert store.enqueue_task(held, clock.now()).task_id == 5, "AUTOINCREMENT goes on after them"
    assert store.verify_event_chain() == []


LINES = st.lists(st.tuples(st.sampled_from("abc"), st.booleans()), max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=LINES)
def test_a_repeated_key_is_judged_before_its_proposal(config: Config, lines: list[tuple[str, bool]]) -> None:
    """A line whose key an earlier accepted line of the output used is accepted as a repeat, its
    proposal never judged (a refused one included: issue #43 a); a line rejected for its proposal
    spends no key, so a later line of that key with a good proposal is the one that counts."""
    text = "\n".join(
        line(key, proposed_task=task(key) if good else {**task(key), "task_type": "nope"}) for key, good in lines
    )
    accepted, rejected = parse_output("s", text, config, FakeClock().now())
    firsts: dict[str, int] = {}
    for number, (key, good) in enumerate(lines, start=1):
        if key not in firsts and good:
            firsts[key] = number
    repeats = [n for n, (key, _) in enumerate(lines, start=1) if key in firsts and n > firsts[key]]
    assert sorted(a.line for a in accepted) == sorted([*firsts.values(), *repeats])
    assert [r.line for r in rejected] == [n for n, (key, _) in enumerate(lines, start=1) if n < firsts.get(key, 99)]
    assert all((a.task is None) == (a.line in repeats) for a in accepted)
