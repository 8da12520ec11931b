"""Bulk INSERTs that name only the columns a row gives: a NULL bound to a column whose default is NULL
costs SQLite as much as a value (a task row's dozen such NULLs were a third of its insert), and
leaving the column out stores the same row."""

from __future__ import annotations

import functools
import itertools
import operator
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

_is_none = functools.partial(operator.is_, None)


class Writer(Protocol):
    """What runs the statements: the store's connection, or a Tx inside a verb's transaction."""

    def execute(self, sql: str, params: Sequence[Any], /) -> sqlite3.Cursor: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> sqlite3.Cursor: ...


class SparseInsert:
    """INSERT INTO `table` (`columns`) of rows in `columns` order. Each run of consecutive rows with
    the same NULLs among `nullable` goes in by one executemany of a statement naming only the
    others, in the rows' order. Hazard: every column in `nullable` must have no DEFAULT (NULL is its
    default), or leaving it out would store its default instead of the NULL (tests/test_store_sparse.py
    checks the schema)."""

    def __init__(self, table: str, columns: tuple[str, ...], nullable: tuple[str, ...]) -> None:
        self.table, self.columns, self.nullable = table, columns, nullable
        positions = [columns.index(name) for name in nullable]
        self._nullable_values = _picker(positions)
        self._statements: dict[tuple[bool, ...], tuple[str, Callable[[tuple[Any, ...]], tuple[Any, ...]]]] = {}

    def run(self, conn: Writer, rows: Iterable[tuple[Any, ...]]) -> None:
        """Insert the rows, in their order."""
        for shape, run in itertools.groupby(rows, self._shape):
            sql, pick = self._statement(shape)
            conn.executemany(sql, map(pick, run))

    def one(self, conn: Writer, row: tuple[Any, ...]) -> sqlite3.Cursor:
        """Insert one row (its cursor's lastrowid is the row's id)."""
        sql, pick = self._statement(self._shape(row))
        return conn.execute(sql, pick(row))

    def _shape(self, row: tuple[Any, ...]) -> tuple[bool, ...]:
        return tuple(map(_is_none, self._nullable_values(row)))

    def _statement(self, shape: tuple[bool, ...]) -> tuple[str, Callable[[tuple[Any, ...]], tuple[Any, ...]]]:
        """The INSERT naming the columns this shape gives, and what picks their values from a row."""
        if shape not in self._statements:
            left_out = {name for name, null in zip(self.nullable, shape, strict=True) if null}
            kept = [n for n, name in enumerate(self.columns) if name not in left_out]
            names = ", ".join(self.columns[n] for n in kept)
            sql = f"INSERT INTO {self.table} ({names}) VALUES ({', '.join('?' * len(kept))})"
            self._statements[shape] = (sql, _picker(kept))
        return self._statements[shape]


def _picker(positions: list[int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """The values at `positions` of a row, as a tuple (itemgetter of one position gives the value)."""
    if len(positions) == 1:
        (position,) = positions
        return lambda row: (row[position],)
    return operator.itemgetter(*positions)
