"""`agentd task add --batch FILE|-` (issue 27): JSON lines, each judged as `task add` judges its flags; one
bad line and nothing is written; the rest go in 500 per transaction."""

from __future__ import annotations

import gc
import io
import json
import os
import sqlite3
import subprocess
import sys
import weakref
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import EXAMPLE_CONFIG, examples, stopped_while_reading, wait_until

from agentd.clock import FakeClock
from agentd.config import Config
from agentd.errors import AgentdError, Interrupted
from agentd.records import NewTask, WorkflowRef
from agentd.store import Store
from agentd.store.base import no_cycle_collection
from agentd.work import batch


def intent(n: int, **extra: Any) -> dict[str, Any]:
    return {"task_type": "example", "subject": f"item {n}", "payload": {"note": f"n{n}"}, **extra}


def jsonl(*items: Any) -> str:
    return "".join((item if isinstance(item, str) else json.dumps(item)) + "\n" for item in items)


def add_batch(cli: Any, tmp_path: Path, text: str | bytes, *flags: str) -> Any:
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return cli("task", "add", "--batch", str(path), *flags)


def task_count(cli: Any) -> int:
    return len(cli("task", "list", "--limit", "100000", "--json").json())


def test_a_batch_of_many_lines_lands_with_each_line_as_task_add_would_make_it(initialised: Any, tmp_path: Path) -> None:
    lines = [intent(n) for n in range(1, 1_201)]
    lines[6] = intent(7, priority=2, description="d", skill_ids=["example"], source="test:batch")
    result = add_batch(initialised, tmp_path, jsonl(*lines[:600], "", "   ", *lines[600:]), "--json")
    assert result.code == 0, result.err
    ids = result.json()
    assert ids == list(range(1, 1_201))
    listed = {t["task_id"]: t for t in initialised("task", "list", "--limit", "2000", "--json").json()}
    assert [listed[i]["subject"] for i in ids] == [f"item {n}" for n in range(1, 1_201)]
    seventh = listed[7]
    assert (seventh["priority"], seventh["description"], seventh["skill_ids"]) == (2, "d", ["example"])
    assert seventh["source"] == "test:batch" and listed[1]["source"].startswith("operator:")
    one = initialised(
        "task", "add", "--type", "example", "--subject", "item 1", "--payload", '{"note": "n1"}', "--json"
    )
    ignore = {"task_id", "created_at", "updated_at", "available_at"}
    assert {k: v for k, v in one.json().items() if k not in ignore} == {
        k: v for k, v in listed[1].items() if k not in ignore
    }, "a line makes the task `task add` makes from the same fields"
    enqueued = [
        e for e in initialised("events", "--json", "--limit", "5000").json_lines() if e["type"] == "task_enqueued"
    ]
    assert len(enqueued) == 1_201 and enqueued[0]["payload"]["by"] == enqueued[-1]["payload"]["by"]


def test_the_text_summary_names_the_tasks_and_a_held_batch_says_so(initialised: Any, tmp_path: Path) -> None:
    result = add_batch(initialised, tmp_path, jsonl(intent(1), intent(2)), "--require-approval")
    assert result.code == 0 and result.out == "2 tasks enqueued from " + str(tmp_path / "tasks.jsonl") + (
        ": tasks 1–2; all waiting for approval (`agentd approve`)\n"
    )
    assert [t["awaiting_approval"] for t in initialised("task", "list", "--json").json()] == [True, True]


BAD_LINES = {
    "bad JSON": ('{"task_type": "example", "payload": {}', "not JSON"),
    "not an object": ('["example"]', "expected a JSON object (a task intent), found an array"),
    "a number": ("5", "found a number"),
    "unknown task type": (json.dumps(intent(0, task_type="nope")), "task_type: unknown task type 'nope'"),
    "payload against its schema": (
        json.dumps({"task_type": "example", "payload": {"note": 5}}),
        "payload.note: 5 is not of type 'string' (schema example.payload/v1)",
    ),
    "a raw U+0000": ('{"task_type": "example", "subject": "a\x00b", "payload": {}}', "Invalid control character"),
    "over-long subject": (json.dumps(intent(0, subject="x" * 501)), "subject: string should have at most 500"),
    "unknown field": (json.dumps(intent(0, idempotency_key="k")), "idempotency_key: extra inputs are not permitted"),
    "agentd's own source": (json.dumps(intent(0, source="sensor:x")), "source: 'sensor:x' claims a namespace"),
    "priority out of range": (json.dumps(intent(0, priority=11)), "priority: input should be less than or equal"),
    "priority as text": (json.dumps(intent(0, priority="1_0")), "priority: expected a JSON number, found the text"),
    "priority true": (json.dumps(intent(0, priority=True)), "priority: expected a JSON number, found true"),
    "a workflow's step": (
        json.dumps(intent(0, workflow_ref={"workflow_id": 1, "state_id": "plan", "instance_key": "k"})),
        "workflow_ref: only the workflow engine creates workflow tasks",
    ),
    "not UTF-8": (b'{"task_type": "\xff"}', "not UTF-8: invalid start byte at byte 15"),
    "a key written twice": (
        '{"task_type": "example", "payload": {"note": "a"}, "task_type": "other"}',
        "the key 'task_type' is written twice in one object",
    ),
}


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        ({"note": "a b " * 100_000}, "payload.note: 'a b a b"),  # jsonschema quotes the whole 400 kB string
        ({f"k{n}": 1 for n in range(20_000)}, "payload: Additional properties are not allowed ('k0'"),
    ],
    ids=["a long string", "20,000 unknown keys"],
)
def test_a_refusal_quoting_a_huge_value_stays_a_line(
    initialised: Any, tmp_path: Path, payload: Any, named: str
) -> None:
    """Each line's problem quoted the whole value: 50 such lines were 8 MB of stderr."""
    result = add_batch(initialised, tmp_path, jsonl(*[{"task_type": "example", "payload": payload}] * 3))
    lines = result.err.splitlines()
    assert result.code == 2 and [line[:10] for line in lines[1:]] == ["  line 1: ", "  line 2: ", "  line 3: "]
    assert named in lines[1] and "characters) (schema example.payload/v1)" in lines[1], lines[1][:400]
    assert max(len(line) for line in lines) < 500, [len(line) for line in lines]


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_a_bad_line_is_named_by_number_and_nothing_of_the_batch_is_written(
    initialised: Any, tmp_path: Path, kind: str
) -> None:
    bad, reason = BAD_LINES[kind]
    good = [json.dumps(intent(n)).encode() for n in range(1, 1_001)]
    text = b"\n".join([*good[:700], bad if isinstance(bad, bytes) else bad.encode(), *good[700:]]) + b"\n"
    result = add_batch(initialised, tmp_path, text)
    assert result.code == 2, result.err
    assert "1 of 1,001 lines refused; nothing was written" in result.err
    [named] = [line for line in result.err.splitlines() if line.startswith("  line ")]
    assert named.startswith("  line 701: ") and reason in named, result.err
    assert "Traceback" not in result.err and result.out == ""
    assert task_count(initialised) == 0


def test_every_bad_line_is_named_and_a_long_list_is_counted(initialised: Any, tmp_path: Path) -> None:
    lines = [intent(n) if n % 2 else "{" for n in range(1, 61)]
    result = add_batch(initialised, tmp_path, jsonl(*lines))
    assert result.code == 2
    named = [line.split(":")[0].strip() for line in result.err.splitlines()[1:] if line.strip().startswith("line ")]
    assert named == [f"line {n}" for n in range(2, 41, 2)] and "… and 10 more bad lines" in result.err
    assert task_count(initialised) == 0


def test_flags_of_one_task_are_refused_with_batch(initialised: Any, tmp_path: Path) -> None:
    result = add_batch(initialised, tmp_path, jsonl(intent(1)), "--subject", "s", "--priority", "2")
    assert result.code == 2 and "--subject, --priority: not with --batch" in result.err
    both = initialised("task", "add", "--type", "example", "--batch", "x")
    assert both.code == 2 and "not allowed with argument" in both.err
    missing = initialised("task", "add", "--batch", str(tmp_path / "absent.jsonl"))
    assert missing.code == 2 and "--batch: cannot read" in missing.err
    reserved = add_batch(initialised, tmp_path, jsonl(intent(1)), "--source", "sensor:x")
    assert reserved.code == 2 and reserved.err.count("claims a namespace") == 1
    assert task_count(initialised) == 0


def test_a_line_longer_than_the_limit_is_refused_without_being_held(initialised: Any, tmp_path: Path) -> None:
    huge = json.dumps(intent(2, description="x" * (batch.MAX_LINE_BYTES + 10)))
    result = add_batch(initialised, tmp_path, jsonl(intent(1), huge, intent(3)))
    assert result.code == 2 and "line 2: longer than 2,097,152 bytes" in result.err
    assert "1 of 3 lines refused" in result.err and task_count(initialised) == 0


def test_stdin_is_read_with_a_dash(initialised: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(jsonl(intent(1), intent(2)).encode())))
    result = initialised("task", "add", "--batch", "-", "--json")
    assert result.code == 0 and result.json() == [1, 2]


@pytest.mark.process
def test_stdin_from_a_real_pipe(tmp_path: Path, state_dir: Path) -> None:
    import os

    env = {**os.environ, "AGENTD_PATHS__STATE_DIR": str(state_dir), "AGENTD_PATHS__WORKSPACE": str(tmp_path / "ws")}
    command = [sys.executable, "-m", "agentd", "--config", str(EXAMPLE_CONFIG)]
    assert subprocess.run([*command, "init"], env=env, capture_output=True, timeout=60).returncode == 0
    added = subprocess.run(
        [*command, "task", "add", "--batch", "-"], input=jsonl(intent(1), intent(2), intent(3)).encode(),
        env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert added.stdout.decode().endswith("3 tasks enqueued from stdin: tasks 1–3\n")
    refused = subprocess.run(
        [*command, "task", "add", "--batch", "-"], input=b"{\n", env=env, capture_output=True, timeout=60
    )
    assert refused.returncode == 2 and b"line 1: not JSON" in refused.stderr


LINE_PARTS = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        ['{"task_type": "example", "payload": {}}', "{", "}", "[", "null", '"', "\\u0000", "\x00", "\ud800"]
    ),
    st.builds(
        lambda d: json.dumps(d),
        st.dictionaries(
            st.sampled_from(["task_type", "payload", "priority", "subject", "source", "workflow_ref", "x"]),
            st.one_of(st.none(), st.integers(), st.text(max_size=5), st.just({})),
            max_size=4,
        ),
    ),
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(LINE_PARTS, max_size=3).map("".join), min_size=1, max_size=6))
def test_any_lines_give_exit_0_or_2_and_never_a_traceback(initialised: Any, tmp_path: Path, lines: list[str]) -> None:
    before = task_count(initialised)
    text = "\n".join(lines).encode("utf-8", "surrogatepass")
    result = add_batch(initialised, tmp_path, text, "--json")
    assert result.code in (0, 2), result.err
    after = task_count(initialised)
    if result.code == 2:
        assert after == before and "line " in result.err
    else:
        assert after - before == len(result.json())


# --- the writing, 500 lines per transaction -----------------------------------------------------


def judged(config: Config, clock: FakeClock, count: int) -> list[tuple[int, NewTask]]:
    lines = [(n, json.dumps(intent(n)).encode()) for n in range(1, count + 1)]
    result = batch.judge_lines(lines, config, clock.now(), source="test:batch")
    assert not result.bad
    return result.tasks


def test_each_transaction_holds_500_lines_and_is_committed_before_the_next(
    store: Store, config: Config, clock: FakeClock
) -> None:
    """Seen from another connection after each transaction: 500, 1,000, then 1,201 tasks."""
    seen: list[tuple[int, int, int]] = []

    def look(done: batch.Written) -> None:
        with sqlite3.connect(store.path) as reader:
            visible = reader.execute("SELECT COUNT(*) FROM tasks").fetchone()[0]
        seen.append((done.lines[0], done.lines[-1], visible))

    writing = batch.write(store, judged(config, clock, 1_201), clock.now(), "tester", look)
    assert seen == [(1, 500, 500), (501, 1_000, 1_000), (1_001, 1_201, 1_201)]
    assert writing.failed is None and writing.task_ids == list(range(1, 1_202))
    assert store.verify_event_chain() == []


def test_a_write_that_fails_part_way_says_which_lines_are_in(store: Store, config: Config, clock: FakeClock) -> None:
    """Another writer holds the lock after the second transaction: lines 1–1,000 are in, and the note
    says to resume from line 1,001."""
    store.busy_retry_s = 0.2
    store._conn.execute("PRAGMA busy_timeout = 50")  # SQLite's own wait, before agentd's retries
    holder = sqlite3.connect(store.path, timeout=0.05, isolation_level=None)

    def hold_after_second(done: batch.Written) -> None:
        if done.lines[-1] == 1_000:
            holder.execute("BEGIN IMMEDIATE")

    try:
        writing = batch.write(store, judged(config, clock, 1_201), clock.now(), "tester", hold_after_second)
    finally:
        holder.close()
    assert isinstance(writing.failed, AgentdError) and len(writing.task_ids) == 1_000
    note = writing.resume_note(1_201)
    assert "lines 1–1000 were written (1,000 of 1,201 tasks: 1–1000)" in note and "resume from line 1001" in note
    assert store.queue_summary(clock.now()).counts == {"pending": 1_000}


def test_a_signal_stops_the_writing_between_two_transactions(store: Store, config: Config, clock: FakeClock) -> None:
    """A stop asked after the second transaction: the third is never begun, and the note is exact."""
    asked = iter([None, None, "SIGTERM"])
    writing = batch.write(store, judged(config, clock, 1_201), clock.now(), "tester", stop=lambda: next(asked))
    assert isinstance(writing.failed, Interrupted) and writing.failed.exit_code == 128 + 15
    assert "lines 1–1000 were written (1,000 of 1,201 tasks: 1–1000)" in writing.resume_note(1_201)
    assert store.queue_summary(clock.now()).counts == {"pending": 1_000}


@pytest.mark.deep
@pytest.mark.process
@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_ctrl_c_or_sigterm_mid_batch_says_exactly_which_lines_are_in(
    initialised: Any, tmp_path: Path, state_dir: Path, signal_name: str
) -> None:
    """Was exit 130 or death by SIGTERM with nothing said, thousands of tasks in and no word of which."""
    import signal

    path = tmp_path / "many.jsonl"
    path.write_text(jsonl(*(intent(n) for n in range(1, 40_001))))
    env = dict(os.environ)  # the state_dir fixture points the example config at this test's folders
    running = subprocess.Popen(
        [sys.executable, "-m", "agentd", "--config", str(EXAMPLE_CONFIG), "task", "add", "--batch", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    db = state_dir / "agentd.db"
    wait_until(lambda: _tasks_in(db) > 0 or running.poll() is not None, 60, "the batch's first transaction")
    running.send_signal(getattr(signal, signal_name))
    out, err = running.communicate(timeout=60)
    written = _tasks_in(db)
    assert 0 < written < 40_000, (written, err)
    assert running.returncode == 128 + getattr(signal, signal_name), (running.returncode, err)
    assert f"lines 1–{written} were written ({written:,} of 40,000 tasks" in err, err
    assert f"resume from line {written + 1}" in err
    assert err.rstrip().endswith(f"agentd: stopped by {signal_name}") and "Traceback" not in err and out == ""


@pytest.mark.process
@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("given", [b"", jsonl(intent(1), intent(2)).encode()], ids=["nothing yet", "two lines"])
def test_a_signal_while_the_batch_waits_on_stdin_ends_it_and_writes_nothing(
    initialised: Any, state_dir: Path, signal_name: str, given: bytes
) -> None:
    """Was ignored until stdin ended (only SIGKILL stopped it), and with nothing read the signal was
    lost: exit 0. The writes alone are guarded; a signal before them ends the command at once."""
    argv = [sys.executable, "-m", "agentd", "--config", str(EXAMPLE_CONFIG), "task", "add", "--batch", "-"]
    stopped_while_reading(argv, given, signal_name)
    assert _tasks_in(state_dir / "agentd.db") == 0


def _tasks_in(db: Path) -> int:
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_the_ids_written_are_those_autoincrement_gives_after_the_last_task_removed(
    store: Store, config: Config, clock: FakeClock
) -> None:
    """The rows go in by one executemany with their ids worked out first: never an id a removed task had."""
    first = batch.write(store, judged(config, clock, 3), clock.now(), "tester").task_ids
    with sqlite3.connect(store.path) as conn:
        conn.execute("DELETE FROM events WHERE task_id = 3")
        conn.execute("DELETE FROM tasks WHERE id = 3")
    second = batch.write(store, judged(config, clock, 2), clock.now(), "tester").task_ids
    single = store.enqueue_task(judged(config, clock, 1)[0][1], clock.now()).task_id
    assert (first, second, single) == ([1, 2, 3], [4, 5], 6)


def test_a_transaction_that_fails_leaves_no_held_event_and_the_collector_running(
    store: Store, config: Config, clock: FakeClock
) -> None:
    """A row SQLite refuses (a workflow that does not exist: a foreign key) rolls the whole transaction
    back: none of its held events is written later by another verb, and the cyclic GC runs again."""
    tasks = [new for _, new in judged(config, clock, 3)]
    orphan = replace(tasks[2], workflow_ref=WorkflowRef(workflow_id=999, state_id="s", instance_key="k"))
    before = store.last_event_sequence()
    with pytest.raises(sqlite3.IntegrityError):
        store.enqueue_tasks([*tasks[:2], orphan], clock.now(), event_payload={"by": "tester"})
    assert gc.isenabled() and store.last_event_sequence() == before
    assert store.enqueue_task(tasks[0], clock.now()).task_id == 1
    assert store.last_event_sequence() == before + 1 and store.verify_event_chain() == []


def test_the_collector_pause_nests_and_ends_running() -> None:
    with no_cycle_collection():
        with no_cycle_collection():
            assert not gc.isenabled()
        assert not gc.isenabled(), "the inner pause does not resume what the outer one paused"
    assert gc.isenabled()


class Node:
    """A container the collector tracks, which can be made part of a cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


def test_what_a_bulk_step_made_is_not_walked_again_by_a_young_collection() -> None:
    """After the pause, what the step made and kept is in the collector's oldest generation (no young
    collection walks it again, nor starts at the next allocation); a cycle it left is still collected
    by a full collection."""
    with no_cycle_collection():
        kept = [Node() for _ in range(5_000)]
        cycle = Node()
        cycle.other = Node()
        cycle.other.other = cycle
        gone = weakref.ref(cycle)
        del cycle
    assert gc.isenabled() and gc.get_count()[0] < 50
    young = {id(thing) for generation in (0, 1) for thing in gc.get_objects(generation)}
    assert not any(id(node) in young for node in kept)
    assert gone() is not None  # nothing collected it yet ...
    gc.collect()
    assert gone() is None  # ... a full collection does


def test_a_batch_over_the_task_limit_is_refused_whole(
    initialised: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch, "MAX_TASKS", 5)
    result = add_batch(initialised, tmp_path, jsonl(*(intent(n) for n in range(1, 7))))
    assert result.code == 2 and "more than 5 tasks in one batch; split the file (nothing was written)" in result.err
    assert task_count(initialised) == 0
    assert add_batch(initialised, tmp_path, jsonl(*(intent(n) for n in range(1, 6)))).code == 0


def test_an_input_that_never_ends_is_not_read_forever(
    initialised: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--batch /dev/zero` (one line with no end) and endless blank lines each stop with one line."""
    endless = initialised("task", "add", "--batch", "/dev/zero")
    assert endless.code == 2, endless
    assert "line 1: over 67,108,864 bytes and no end in sight; stopped reading (nothing was written)" in endless.err
    monkeypatch.setattr(batch, "MAX_LINES", 50)
    blank = add_batch(initialised, tmp_path, "\n" * 51 + jsonl(intent(1)))
    assert blank.code == 2 and "more than 50 lines in one batch; split the input (nothing was written)" in blank.err
    assert task_count(initialised) == 0
