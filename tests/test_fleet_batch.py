"""`agentd fleet submit --batch FILE|-` (docs/fleet.md, "Submitting many"): each JSON line judged as one
`fleet submit` is, nothing sent when a line is bad, 500 lines per transaction on a real PostgreSQL, and
keys that make sending a file again safe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import EXAMPLE_CONFIG, examples, fleet_cli

from agentd.cli.fleet_submit import FIELDS, judge
from agentd.clock import FakeClock
from agentd.config import Config
from agentd.errors import InputError
from agentd.store.fleet import FleetQueue, Submission


def lines_file(tmp_path: Path, lines: list[Any], name: str = "fleet.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def rows(dsn: str) -> list[dict[str, Any]]:
    """What a submission decides of a row (its id, times and the moment it was sent left out)."""
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        found = conn.execute(
            "SELECT idempotency_key, task_type, subject, payload, labels, priority, origin, status FROM fleet_tasks "
            "ORDER BY id"
        ).fetchall()
        events = conn.execute("SELECT type, count(*) AS n FROM fleet_events GROUP BY type").fetchall()
    for row in found:
        del row["origin"]["dispatch_context"]["initiatedAt"]
    return [*found, {"events": {e["type"]: e["n"] for e in events}}]


LINES = [
    {"task_type": "example", "subject": "one", "payload": {"note": "a"}},
    {"task_type": "example", "labels": ["gpu", "eu"], "priority": 2, "key": "k-2"},
    {"task_type": "example", "subject": "three", "priority": 9, "key": "k-3", "labels": ["gpu"]},
    {"task_type": "example"},
]


def flags_of(line: dict[str, Any]) -> list[str]:
    flags = ["--type", line["task_type"]]
    for name in ("subject", "priority", "key"):
        if name in line:
            flags += [FIELDS[name], str(line[name])]
    for label in line.get("labels", []):
        flags += ["--label", label]
    if "payload" in line:
        flags += ["--payload", json.dumps(line["payload"])]
    return flags


@pytest.mark.process
def test_each_line_lands_as_one_fleet_submit_of_its_flags_would_make_it(
    pg_cluster: Any, capsys: pytest.CaptureFixture[str], state_dir: Path, tmp_path: Path
) -> None:
    one_by_one, batched = pg_cluster.new_database(), pg_cluster.new_database()
    for dsn in (one_by_one, batched):
        assert fleet_cli(capsys, dsn, "init").code == 0
    for line in LINES:
        assert fleet_cli(capsys, one_by_one, "submit", *flags_of(line)).code == 0
    sent = fleet_cli(capsys, batched, "submit", "--batch", str(lines_file(tmp_path, ["", *LINES, "  "])))
    assert sent.code == 0, sent.err
    assert sent.out.startswith(f"4 fleet tasks submitted from {tmp_path / 'fleet.jsonl'}: fleet ids 1–4")
    assert rows(batched) == rows(one_by_one)


@pytest.mark.process
def test_a_bad_line_is_named_by_number_and_nothing_is_sent(
    dsn: str, queue: FleetQueue, capsys: pytest.CaptureFixture[str], state_dir: Path, tmp_path: Path
) -> None:
    bad = {
        3: ({"task_type": "nope"}, "unknown task type 'nope'"),
        4: ({"task_type": "example", "payload": {"bogus": 1}}, "bogus"),
        5: ({"task_type": "example", "labels": ["has space"]}, "labels[0]: expected letters, digits"),
        6: ({"task_type": "example", "priority": 0}, "priority: expected 1 (most urgent) to 10"),
        7: ({"task_type": "example", "priority": True}, "priority: expected 1"),
        8: ({"task_type": "example", "subject": "a\x00b"}, "subject: holds the character U+0000"),
        9: ({"task_type": "example", "key": 7}, "key: expected a string"),
        10: ({"task_type": "example", "owner": "x"}, "owner: not a field of a fleet submission"),
        11: ("[1, 2]", "expected a JSON object"),
        12: ("{not json", "line"),
        13: ({"task_type": "example", "payload": {"note": "\x00"}}, "payload: holds the character U+0000"),
        14: ({"task_type": "example", "subject": "s" * 600}, "subject:"),
        15: ({"task_type": "example", "subject": 7}, "subject: input should be a valid string, found 7"),
    }
    lines: list[Any] = [LINES[0], LINES[1], *(line for line, _ in bad.values()), LINES[3]]
    refused = fleet_cli(capsys, dsn, "submit", "--batch", str(lines_file(tmp_path, lines)))
    assert refused.code == 2 and "Traceback" not in refused.err
    assert refused.err.startswith(f"agentd: {len(bad)} of {len(lines)} lines refused; nothing was written")
    for number, (_, says) in bad.items():
        [shown] = [line for line in refused.err.splitlines() if line.startswith(f"  line {number}: ")]
        assert says in shown, (number, shown)
    assert queue.counts()["tasks"]["queued"] == 0


@pytest.mark.process
def test_keys_make_sending_a_file_again_safe(
    dsn: str, queue: FleetQueue, capsys: pytest.CaptureFixture[str], state_dir: Path, tmp_path: Path
) -> None:
    lines = [{"task_type": "example", "key": f"k{n % 3}", "subject": f"s{n}"} for n in range(5)]
    path = lines_file(tmp_path, lines)
    first = fleet_cli(capsys, dsn, "submit", "--batch", str(path), "--json").json()
    assert [(s["line"], s["new"]) for s in first] == [(1, True), (2, True), (3, True), (4, False), (5, False)]
    assert first[3]["fleet_id"] == first[0]["fleet_id"]  # a key repeated in the file is one task
    again = fleet_cli(capsys, dsn, "submit", "--batch", str(path))
    assert again.code == 0 and again.out.startswith("0 fleet tasks submitted") and "5 already submitted" in again.out
    assert queue.counts()["tasks"]["queued"] == 3


@pytest.mark.deep
@pytest.mark.process
def test_500_lines_per_transaction_and_a_failed_one_says_where_to_resume(
    dsn: str, queue: FleetQueue, capsys: pytest.CaptureFixture[str], state_dir: Path, tmp_path: Path
) -> None:
    """Another submitter holds line 700's key uncommitted: the first 500 lines are in, one transaction; the
    second waits past the lock timeout and the command says where to resume."""
    lines: list[Any] = [{"task_type": "example", "subject": f"s{n}", "key": f"k{n}"} for n in range(1, 1202)]
    with psycopg.connect(dsn) as holder:
        holder.execute(
            "INSERT INTO fleet_tasks (idempotency_key, task_type, payload, labels, priority, origin) "
            "VALUES ('k700', 'example', '{}', '{}', 5, '{}')"
        )  # not committed: the batch's insert of k700 waits for it
        stopped = fleet_cli(capsys, dsn, "submit", "--batch", str(lines_file(tmp_path, lines)))
        holder.rollback()
    assert stopped.code == 1 and "Traceback" not in stopped.err
    assert "lines 1–500 were submitted (500 of 1,201); the lines after 500 were not: resume from line 501" in (
        stopped.err
    )
    assert "took too long" in stopped.err
    sent = fleet_cli(capsys, dsn, "submit", "--batch", str(lines_file(tmp_path, lines)))
    assert sent.code == 0 and sent.out.startswith("701 fleet tasks submitted") and "500 already submitted" in sent.out
    with psycopg.connect(dsn) as conn:
        transactions = conn.execute("SELECT count(DISTINCT xmin::text) FROM fleet_tasks").fetchone()
    assert transactions == (3,)  # 1–500 in one, 501–1000 and 1001–1201 in two more


def test_per_task_flags_and_a_missing_type_are_refused(
    capsys: pytest.CaptureFixture[str], state_dir: Path, tmp_path: Path
) -> None:
    path = str(lines_file(tmp_path, LINES))
    nowhere = "host=/nonexistent dbname=x"
    both = fleet_cli(capsys, nowhere, "submit", "--batch", path, "--type", "example", "--label", "gpu")
    assert both.code == 2 and both.err.startswith("agentd: --type, --label: not with --batch")
    neither = fleet_cli(capsys, nowhere, "submit")
    assert neither.code == 2 and "--type: required (or --batch FILE" in neither.err
    unreadable = fleet_cli(capsys, nowhere, "submit", "--batch", str(tmp_path / "missing.jsonl"))
    assert unreadable.code == 2 and "--batch: cannot read" in unreadable.err


VALUES = st.none() | st.booleans() | st.integers(-3, 12) | st.text(max_size=8) | st.lists(st.text(max_size=5))
FIELD_DICTS = st.dictionaries(
    st.sampled_from([*FIELDS, "owner"]),
    VALUES | st.sampled_from(["example", "goal", "gpu"]) | st.dictionaries(st.sampled_from(["note"]), VALUES),
    max_size=7,
)


@settings(max_examples=examples(300), deadline=None)
@given(FIELD_DICTS)
def test_a_line_is_a_submission_or_a_refusal_in_its_own_words(fields: dict[str, Any]) -> None:
    config = _example_config()
    try:
        new = judge(dict(fields), config, FakeClock().now(), flags=False)
    except InputError as exc:
        assert str(exc).split(":")[0].split("[")[0].split(".")[0] in [*FIELDS, "owner", "line"], str(exc)
        return
    assert isinstance(new, Submission) and new.task_type in config.task_types
    assert 1 <= new.priority <= 10 and type(new.priority) is int
    assert new.payload == fields.get("payload", {}) and list(new.labels) == fields.get("labels", [])


_CONFIGS: list[Config] = []


def _example_config() -> Config:
    """The example config, loaded once for the property's examples (its state dir never touched)."""
    from agentd.work.validation import load_config

    if not _CONFIGS:
        _CONFIGS.append(load_config(EXAMPLE_CONFIG))
    return _CONFIGS[0]


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_a_signal_stops_a_fleet_batch_between_two_transactions(queue: FleetQueue, dsn: str) -> None:
    """`fleet submit --batch` under Ctrl-C or SIGTERM (cli/common.py stop_between): the transaction under
    way ends, the next is never begun, and the note says where to resume."""
    from agentd.cli.fleet_submit import resume_note, send
    from agentd.errors import Interrupted

    config, now = _example_config(), FakeClock().now()
    fields = [{"task_type": "example", "key": f"k{n}"} for n in range(1, 1_202)]
    submissions = [(n, judge(line, config, now, flags=False)) for n, line in enumerate(fields, 1)]
    origin = {"submitted_by": "tester", "dispatch_context": {"originSurface": "cli", "originProductId": "agentd",
              "dispatchMode": "batch", "initiatedAt": "2026-11-26T00:00:00Z"}}  # fmt: skip
    asked = iter([None, None, "SIGINT"])
    sent, failed = send(queue, submissions, origin, lambda: next(asked))
    assert isinstance(failed, Interrupted) and failed.exit_code == 130 and len(sent) == 1_000
    assert "lines 1–1000 were submitted (1,000 of 1,201)" in resume_note(sent, 1_201)
    assert len(rows(dsn)) == 1_000 + 1  # and the events' count


@pytest.mark.process
@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_while_a_fleet_batch_waits_on_stdin_ends_it_and_sends_nothing(
    queue: FleetQueue, dsn: str, state_dir: Path, signal_name: str
) -> None:
    """As `task add --batch -` (tests/test_task_batch.py): only the sending is guarded; a signal while
    the lines are read ends the command at once, in the same words and exit code as one between sends."""
    import sys

    from support import stopped_while_reading

    argv = [sys.executable, "-m", "agentd", "--config", str(EXAMPLE_CONFIG), "fleet", "submit", "--batch", "-"]
    stopped_while_reading([*argv, "--dsn", dsn], json.dumps(LINES[0]).encode() + b"\n", signal_name)
    assert rows(dsn) == [{"events": {}}]
