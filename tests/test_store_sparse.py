"""Bulk inserts that leave out the NULL columns (agentd/store/sparse.py) store exactly the rows a full
INSERT stores, in the same order, and only leave out columns whose default is NULL."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_properties import FAST

from agentd.store import Store
from agentd.store.sensing import _SENSOR_EVENTS
from agentd.store.sparse import SparseInsert
from agentd.store.tasks import _TASKS, _TASKS_WITH_ID

INSERTS = {"tasks": _TASKS, "tasks with id": _TASKS_WITH_ID, "sensor_events": _SENSOR_EVENTS}


@pytest.mark.parametrize("name", INSERTS)
def test_every_column_a_row_may_leave_out_has_no_default(store: Store, name: str) -> None:
    """Leaving a column out stores its default: only a column whose default is NULL may be left out."""
    insert = INSERTS[name]
    with sqlite3.connect(store.path) as conn:
        schema = {row[1]: row for row in conn.execute(f"PRAGMA table_info({insert.table})")}
    assert set(insert.columns) <= set(schema), set(insert.columns) - set(schema)
    for column in insert.nullable:
        _cid, _name, _type, notnull, default, _pk = schema[column]
        assert default is None and not notnull, (insert.table, column, default, notnull)


def test_a_column_with_a_default_is_caught_by_that_check(tmp_path: Path) -> None:
    """The schema check above can fail: a nullable column declared with a DEFAULT is found."""
    with sqlite3.connect(tmp_path / "t.db") as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT DEFAULT 'x')")
        default = {row[1]: row[4] for row in conn.execute("PRAGMA table_info(t)")}["a"]
    assert default == "'x'"  # what the parametrized test asserts is None


COLUMNS = ("id", "a", "b", "c", "d")
VALUE = st.one_of(st.none(), st.integers(-3, 3), st.text("xy", max_size=2))
ROWS = st.lists(st.tuples(VALUE, VALUE, VALUE, st.text("z", max_size=2)), max_size=12)


@FAST
@given(ROWS)
def test_a_sparse_insert_stores_what_a_full_insert_stores_in_the_same_order(rows: list[tuple[Any, ...]]) -> None:
    sparse = SparseInsert("t", COLUMNS, ("a", "b", "c"))
    numbered = [(n + 1, *row) for n, row in enumerate(rows)]
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a, b, c, d NOT NULL, seen INTEGER)")
    conn.execute(  # each row's place in the order of insertion
        "CREATE TRIGGER seen AFTER INSERT ON t BEGIN UPDATE t SET seen = (SELECT COUNT(*) FROM t) WHERE id = new.id;END"
    )
    sparse.run(conn, numbered)
    by_sparse = conn.execute("SELECT * FROM t ORDER BY id").fetchall()
    conn.execute("DELETE FROM t")
    conn.executemany("INSERT INTO t (id, a, b, c, d) VALUES (?, ?, ?, ?, ?)", numbered)
    assert by_sparse == conn.execute("SELECT * FROM t ORDER BY id").fetchall()
    one = sparse.one(conn, (len(rows) + 1, None, 1, None, "z"))
    assert one.lastrowid == len(rows) + 1
    assert conn.execute("SELECT a, b, c, d FROM t WHERE id = ?", (len(rows) + 1,)).fetchone() == (None, 1, None, "z")
