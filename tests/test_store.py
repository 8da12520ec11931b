"""The SQLite file: migrations, modes, the event chain and the claim's query plan."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentd.clock import FakeClock
from agentd.errors import SchemaMismatch
from agentd.hashing import canonical_json
from agentd.records import TaskIntent
from agentd.store import Store, init_state_dir, migrate, open_store
from agentd.store.migrations import Migration, available_migrations
from agentd.work.intake import admit_task

NEXT = len(available_migrations()) + 1  # the version a new migration would get


def test_migrate_twice_is_a_no_op(tmp_path: Path, clock: FakeClock) -> None:
    db = tmp_path / "agentd.db"
    first = migrate(db, clock)
    assert [m.filename for m in first] == [m.filename for m in available_migrations()]
    assert migrate(db, clock) == []
    store = open_store(db, clock)
    assert store.schema_version == len(first)
    assert [e.type for e in store.read_events()] == ["migration_applied"] * len(first)


def test_an_edited_applied_migration_is_refused_by_name(tmp_path: Path, clock: FakeClock) -> None:
    db = tmp_path / "agentd.db"
    migrate(db, clock)
    edited = [Migration(m.version, m.name, m.sql + "\n-- edited\n") for m in available_migrations()]
    with pytest.raises(SchemaMismatch, match=r"migration 0001_initial\.sql was edited after it was applied"):
        open_store(db, clock, edited)
    with pytest.raises(SchemaMismatch, match=r"0001_initial\.sql was edited"):
        migrate(db, clock, edited)


def test_a_database_behind_the_code_says_run_migrate(tmp_path: Path, clock: FakeClock) -> None:
    db = tmp_path / "agentd.db"
    migrate(db, clock)
    newer = [*available_migrations(), Migration(len(available_migrations()) + 1, "later", "CREATE TABLE later (x);")]
    with pytest.raises(
        SchemaMismatch, match=rf"behind this agentd \(pending: {NEXT:04d}_later.sql\); run `agentd migrate`"
    ):
        open_store(db, clock, newer)
    assert [m.filename for m in migrate(db, clock, newer)] == [f"{NEXT:04d}_later.sql"]
    open_store(db, clock, newer).close()


def test_a_database_newer_than_the_code_is_refused(tmp_path: Path, clock: FakeClock) -> None:
    db = tmp_path / "agentd.db"
    newer = [*available_migrations(), Migration(len(available_migrations()) + 1, "later", "CREATE TABLE later (x);")]
    migrate(db, clock, newer)
    with pytest.raises(SchemaMismatch, match="newer than the code; upgrade agentd"):
        open_store(db, clock)


def test_a_failing_migration_leaves_nothing_behind(tmp_path: Path, clock: FakeClock) -> None:
    db = tmp_path / "agentd.db"
    migrate(db, clock)
    broken = [
        *available_migrations(),
        Migration(NEXT, "broken", "CREATE TABLE half (x);\nINSERT INTO nowhere VALUES (1);"),
    ]
    with pytest.raises(sqlite3.OperationalError):
        migrate(db, clock, broken)
    with pytest.raises(SchemaMismatch, match=rf"pending: {NEXT:04d}_broken\.sql"):
        open_store(db, clock, broken)
    store = open_store(db, clock)
    assert store.schema_version == NEXT - 1


def test_missing_database_says_init(tmp_path: Path, clock: FakeClock) -> None:
    with pytest.raises(SchemaMismatch, match="run `agentd init`"):
        open_store(tmp_path / "agentd.db", clock)
    assert not (tmp_path / "agentd.db").exists()


def test_state_dir_is_0700_and_database_0600(tmp_path: Path, clock: FakeClock) -> None:
    state = tmp_path / "state"
    init_state_dir(state, tmp_path / "ws")
    migrate(state / "agentd.db", clock)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "agentd.db").stat().st_mode) == 0o600
    store = open_store(state / "agentd.db", clock)
    assert [p.name for p in state.iterdir() if p.name.startswith("agentd.db-")]  # WAL in use
    for sidecar in state.glob("agentd.db-*"):
        assert stat.S_IMODE(sidecar.stat().st_mode) == 0o600
    store.close()


def _intent(**fields: Any) -> TaskIntent:
    return TaskIntent.model_validate({"task_type": "example", "source": "test", "payload": {}, **fields})


def test_the_event_chain_detects_edits_and_removals(store: Store, config: Any, clock: FakeClock) -> None:
    for n in range(3):
        store.enqueue_task(admit_task(_intent(subject=f"t{n}"), config, clock.now(), trusted=True), clock.now())
    assert store.verify_event_chain() == []
    with sqlite3.connect(store.path) as raw:
        raw.execute("UPDATE events SET payload = json_set(payload, '$.priority', 1) WHERE sequence = 3")
    assert [(b.sequence, b.reason) for b in store.verify_event_chain()] == [
        (3, "hash does not match the event's content")
    ]
    with sqlite3.connect(store.path) as raw:
        raw.execute("DELETE FROM events WHERE sequence = 3")
    reasons = {b.reason for b in store.verify_event_chain()}
    assert "expected sequence 3: events are missing" in reasons


JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=8))
JSON_OBJECT = st.dictionaries(
    st.text(max_size=4),
    st.recursive(JSON_LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner)),
    max_size=4,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=JSON_OBJECT, refs=JSON_OBJECT)
def test_an_event_stores_the_canonical_text_it_hashed(store: Store, payload: Any, refs: Any) -> None:
    """The payload and refs are encoded once (issue #43 a): the columns hold canonical_json's text, and
    the chain still verifies from the rows."""
    with store.transaction():
        store.tx.event("sensor_event_recorded", store.clock.now(), payload=payload, refs=refs)
    with sqlite3.connect(store.path) as raw:
        stored = raw.execute("SELECT payload, refs FROM events ORDER BY sequence DESC LIMIT 1").fetchone()
    assert stored == (canonical_json(payload).decode(), canonical_json(refs).decode())
    assert store.verify_event_chain() == []


def test_the_events_lose_their_json_checks_and_keep_every_row_and_the_chain(
    tmp_path: Path, store: Store, config: Any, clock: FakeClock
) -> None:
    """Migration events_without_json_checks (issue #43 a) on a database made before it: the rows, their
    sequences and the chain are as they were, the AUTOINCREMENT mark too; no json_valid is left on
    events; UNIQUE(event_id) still refuses a second row with an id."""
    for n in range(3):
        store.enqueue_task(admit_task(_intent(subject=f"t{n}"), config, clock.now(), trusted=True), clock.now())
    with sqlite3.connect(store.path) as raw:
        rows = raw.execute("SELECT * FROM events ORDER BY sequence").fetchall()
    migrations = available_migrations()
    [dropping] = [m for m in migrations if m.name == "events_without_json_checks"]
    older = tmp_path / "older.db"
    migrate(older, clock, [m for m in migrations if m.version < dropping.version])
    marks = ", ".join("?" * len(rows[0]))
    with sqlite3.connect(older) as raw:  # the chain of `store`, as a database made before would hold one
        raw.execute("DELETE FROM events")
        raw.executemany(f"INSERT INTO events VALUES ({marks})", rows)
        raw.execute("UPDATE sqlite_sequence SET seq = 1000 WHERE name = 'events'")
    applied = [m.name for m in migrate(older, clock)]
    assert applied == [m.name for m in migrations if m.version >= dropping.version]
    with sqlite3.connect(older) as raw:
        kept = raw.execute("SELECT * FROM events ORDER BY sequence").fetchall()
        assert kept[: len(rows)] == rows and [r[2] for r in kept[len(rows) :]] == ["migration_applied"] * len(applied)
        assert raw.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone() == (1000,)
        table = raw.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()[0]
        indexes = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'events'")}
        with pytest.raises(sqlite3.IntegrityError, match=r"UNIQUE constraint failed: events\.event_id"):
            raw.execute(f"INSERT INTO events VALUES ({marks})", (9999, *rows[0][1:]))
    assert "json_valid" not in table and {"events_task", "events_workflow"} <= indexes
    reopened = open_store(older, clock)
    assert reopened.verify_event_chain() == []
    reopened.close()


def test_claim_query_seeks_the_claim_index_at_100k_tasks(store: Store) -> None:
    # Test data only: 100k pending tasks of every priority, some due, some in the future.
    with sqlite3.connect(store.path) as raw:
        raw.execute(
            """WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)
               INSERT INTO tasks (task_type, source, priority, requested_profile_id, max_attempts,
                                  available_at, created_at, updated_at, status)
               SELECT 'example', 'test', 1 + i % 10, 'operator', 3,
                      printf('2026-11-22T10:%02d:00.000000Z', i % 60), '2026-11-22T09:00:00.000000Z',
                      '2026-11-22T09:00:00.000000Z', CASE WHEN i % 3 = 0 THEN 'completed' ELSE 'pending' END
               FROM n"""
        )
    for analyze in (False, True):
        plan = store.explain_claim(store.clock.now(), analyze=analyze)
        seeks = [line for line in plan if "USING INDEX tasks_claim (priority=? AND available_at<?)" in line]
        assert len(seeks) == 10, plan
        assert not any(line.startswith("SCAN tasks") for line in plan), plan


def test_an_older_databases_unknown_exit_status_becomes_error_with_its_exit_unseen(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Migration 0017 (issue 41): a boot-swept attempt's `unknown`, outside seed 000 §8's enum, is rewritten
    as `error` with `exit_seen: false`; its other diagnostics and the attempts that were not swept stay."""
    db = tmp_path / "agentd.db"
    older = [m for m in available_migrations() if m.version < 17]
    migrate(db, clock, older)
    conn = sqlite3.connect(db)
    now = "2026-11-20T10:00:00.000000Z"
    conn.execute(
        "INSERT INTO tasks (task_type, source, requested_profile_id, max_attempts, priority, payload, status,"
        " created_at, updated_at, available_at)"
        " VALUES ('example', 'test', 'operator', 3, 5, '{}', 'completed', ?, ?, ?)",
        (now, now, now),
    )
    rows = [
        ("01JC0000000000000000SWEPT0", 1, "unknown", '{"killed_pids": [7]}'),
        ("01JC00000000000000000000K0", 2, "ok", None),
    ]
    for attempt_id, number, exit_status, diagnostics in rows:
        conn.execute(
            "INSERT INTO task_attempts (attempt_id, task_id, attempt_number, adapter_id, adapter_kind, runner_id,"
            " started_at, ended_at, exit_status, diagnostics) VALUES (?, 1, ?, 'script', 'script', 'r', ?, ?, ?, ?)",
            (attempt_id, number, now, now, exit_status, diagnostics),
        )
    conn.commit()
    conn.close()
    migrate(db, clock)
    store = open_store(db, clock)
    swept, ok = store.attempts_of(1)
    assert (swept.exit_status, swept.diagnostics) == ("error", {"killed_pids": [7], "exit_seen": False})
    assert (ok.exit_status, ok.diagnostics) == ("ok", None)
    store.close()


def test_a_call_held_before_inputs_were_kept_is_read_and_decided_saying_so(
    tmp_path: Path, clock: FakeClock, config: Any
) -> None:
    """Migration 0021 adds a held call's whole input; a row held before it keeps NULL, reads back as a call
    whose input was not kept (`agentd approvals` says so), and its decision's event names no digest."""
    from agentd.cli.common import held_input_words

    db, migrations = tmp_path / "agentd.db", available_migrations()
    migrate(db, clock, [m for m in migrations if m.version < 21])
    store = open_store(db, clock, [m for m in migrations if m.version < 21])
    task = store.enqueue_task(admit_task(_intent(), config, clock.now(), trusted=True), clock.now())
    with store.transaction() as conn:
        conn.execute(
            """INSERT INTO held_calls (call_id, task_id, attempt_id, tool, summary, rule, requested_at)
               VALUES ('01JC3M9V6V4ZC0K1S1Y4AQ7W2E', ?, 'a', 'Bash', 'Bash: ls', 'ask: rule 1', ?)""",
            (task.task_id, "2026-01-01T00:00:00.000000Z"),
        )
    store.close()
    assert next(m.filename for m in migrate(db, clock)) == "0021_held_call_inputs.sql"
    store = open_store(db, clock)
    [held] = store.pending_calls()
    assert (held.input_json, held.input_chars, held.input_sha256, held.digest()) == (None, None, None, {})
    assert held_input_words(vars(held), whole=True).startswith("input not kept")
    store.decide_call(held.call_id, allowed=False, by="alice", reason="no", now=clock.now())
    [denied] = store.read_events(types=("tool_call_denied",))
    assert "input_sha256" not in denied.payload
    with pytest.raises(sqlite3.IntegrityError), store.transaction() as conn:  # a digest is of the text kept
        conn.execute("UPDATE held_calls SET input_json = 'x', input_chars = 2, input_sha256 = 'short'")
