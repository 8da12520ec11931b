"""A stored row to its record (agentd/store/rows.py): whatever an edit left in a column, reading it back is
the record or one UnreadableRow line naming the row, never another exception; a row agentd wrote reads
back as the value it wrote (docs/decisions.md, "One shape per fact")."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from rig import Rig
from support import examples

from agentd.errors import UnreadableRow
from agentd.records import record_json
from agentd.store import open_store

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.binary(max_size=8)
)
JSON_TEXT = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**66), 2**66) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
).map(lambda value: json.dumps(value))  # NaN and Infinity too: json writes them
COLUMN_VALUES = SCALARS | JSON_TEXT | st.sampled_from(["{", "[]", "{}", '{"status": "completed"}', "2026-13-01"])

TASK_COLUMNS = (
    "task_type", "source", "subject", "priority", "payload", "status", "max_attempts", "attempt_count",
    "available_at", "created_at", "started_at", "outcome", "skill_ids", "evidence_requirements",
    "workflow_iteration", "free_attempt_count", "cancel_requested_at", "delegation_depth", "delegation_caps",
)  # fmt: skip
ATTEMPT_COLUMNS = (
    "attempt_number", "adapter_id", "started_at", "ended_at", "exit_status", "retry_class", "side_effects",
    "pid", "diagnostics", "input_tokens", "cost_usd",
)  # fmt: skip
EVENT_COLUMNS = ("type", "timestamp", "sequence", "task_id", "payload", "refs", "hash")


def edit(path: Path, statement: str, value: Any) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")  # an edit need not keep agentd's checks
        conn.execute(statement, (value,))
        conn.commit()


@pytest_asyncio.fixture
async def written(rig: Rig) -> tuple[Rig, int]:
    """A task agentd ran to its end: its row, its attempt's and its events as agentd wrote them."""
    task = rig.add(subject="finished")
    await rig.drain()
    return rig, task.task_id


@pytest.mark.asyncio
async def test_a_row_agentd_wrote_reads_back_as_the_value_it_wrote(written: tuple[Rig, int]) -> None:
    rig, task_id = written
    task = rig.store.get_task_or_raise(task_id)
    assert task.outcome is not None and task.outcome.status == "completed"
    [attempt] = rig.store.attempts_of(task_id)
    assert attempt.exit_status == "ok" and attempt.ended_at is not None
    assert task in rig.store.list_tasks(limit=10)
    assert record_json(task) == record_json(rig.store.get_task_or_raise(task_id))
    events = rig.events(task_id)
    assert events and all(e.task_id == task_id for e in events)


COLUMNS = (
    [("tasks", column) for column in TASK_COLUMNS]
    + [("task_attempts", column) for column in ATTEMPT_COLUMNS]
    + [("events", column) for column in EVENT_COLUMNS]
)


@pytest.mark.asyncio
async def test_whatever_an_edit_leaves_in_a_column_reading_is_the_record_or_one_line(
    written: tuple[Rig, int], tmp_path: Path
) -> None:
    rig, task_id = written
    rig.close()  # its last connection closed: the WAL is in the file
    original = rig.config.db_path.read_bytes()
    copies = iter(range(1_000_000))

    @settings(max_examples=examples(300), deadline=None)
    @given(where=st.sampled_from(COLUMNS), value=COLUMN_VALUES)
    def each(where: tuple[str, str], value: Any) -> None:
        table, column = where
        path = tmp_path / f"edited-{next(copies)}.db"
        path.write_bytes(original)
        if table == "events":
            statement = f"UPDATE events SET {column} = ? WHERE sequence = (SELECT max(sequence) FROM events)"
        else:
            statement = f"UPDATE {table} SET {column} = ? WHERE {'id' if table == 'tasks' else 'task_id'} = {task_id}"
        try:
            edit(path, statement, value)
        except sqlite3.IntegrityError:
            assume(False)  # an edit SQLite itself refuses (NOT NULL): nothing to read
        store = open_store(path, rig.clock)
        try:
            for read in (
                lambda: store.get_task(task_id),
                lambda: store.list_tasks(limit=10),
                lambda: store.attempts_of(task_id),
                lambda: store.read_events(limit=100_000),
            ):
                try:
                    read()
                except UnreadableRow as exc:
                    said = str(exc)
                    assert "in the database is not a row agentd wrote" in said and "\n" not in said, said
        finally:
            store.close()
            path.unlink()

    each()
