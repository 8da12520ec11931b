"""The SQLite connection, its pragmas, explicit transactions and the hash-chained event append.

Every verb of the Store runs as one plain function on one connection, so a whole
`BEGIN IMMEDIATE … COMMIT` is one call (one thread hop for AsyncStore), never three.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from agentd.clock import Clock, format_ts, stored_ts
from agentd.edge import printable
from agentd.faults import database_gone, file_identity, os_storage_error, storage_error
from agentd.hashing import (
    GENESIS_HASH,
    canonical_object,
    chain_hash_of_text,
    compact_json_writer,
    event_body_text,
    new_ulid,
)
from agentd.records import EVENT_TYPES

logger = logging.getLogger("agentd.events")

EVENT_SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 5_000  # SQLite's own wait for the write lock, per try
# How long a verb keeps retrying a write lock someone else holds, before it reports it. Services
# wait longer than an operator's command: losing an outcome is worse than waiting for it.
BUSY_RETRY_S = 30.0
SERVICE_BUSY_RETRY_S = 600.0
# FULL: a committed outcome or an accepted task survives a power cut. At one attempt at a
# time the ~150 µs it costs per transaction is noise (docs/decisions.md, "Durability").
SYNCHRONOUS = "FULL"


def connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open (creating 0600 if absent) the database with agentd's pragmas; `readonly` opens an
    existing one for reading only (also on a read-only file system or a copy nobody may write)."""
    try:
        return _open_readonly(path) if readonly else _open_writable(path)
    except OSError as exc:
        raise os_storage_error(exc, path) from None
    except sqlite3.Error as exc:
        raise storage_error(exc, path) or exc from None


def _open_writable(path: Path) -> sqlite3.Connection:
    if not path.exists():
        _create_database_file(path)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _create_database_file(path: Path) -> None:
    """The database file (0600), the state dir's owner's even when root creates it (`agentd init` as root
    in a state dir `agentd install` made): SQLite then gives its -wal and -shm that owner too."""
    from agentd.process.files import hand_over  # only where a database is made: not on the hot commands' path

    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        hand_over(fd, path.parent)
    finally:
        os.close(fd)


def _open_readonly(path: Path) -> sqlite3.Connection:
    """mode=ro reads a live database (its WAL included); where even that is impossible (a read-only
    copy whose -shm file cannot be created) the file is opened immutable: what it holds on disk."""
    uri = f"file:{quote(str(path.absolute()))}"
    last: sqlite3.Error | None = None
    for flags in ("mode=ro", "mode=ro&immutable=1"):
        conn = sqlite3.connect(
            f"{uri}?{flags}", uri=True, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
        )
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error as exc:
            conn.close()
            last = exc
            continue
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA query_only = 1")
        return conn
    assert last is not None
    raise last


_column_json = compact_json_writer(sort_keys=False)


def dumps(value: Any) -> str:
    """JSON for a column; NaN/Infinity are refused here (ValueError), never handed to SQLite."""
    if not value and type(value) in (dict, list):  # the most common payload and list: nothing to encode
        return "[]" if type(value) is list else "{}"
    return _column_json(value)


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def ts(moment: datetime | None) -> str | None:
    return None if moment is None else timestamp_text(moment)


def timestamp_text(moment: datetime) -> str:
    """format_ts, remembered for UTC times: a transaction writes the same `now` many times. The last one
    asked is answered first, by identity (a datetime never changes; hashing one for the cache's lookup was
    a twentieth of an event's append: issue 56). One tuple, read whole: threads never see a torn pair."""
    last = _last_text
    if last[0] is moment:
        return last[1]
    return _remember(moment) if moment.tzinfo is UTC else format_ts(moment)


def _remember(moment: datetime) -> str:
    global _last_text
    text = _utc_text(moment)
    _last_text = (moment, text)
    return text


_last_text: tuple[datetime | None, str] = (None, "")


@functools.lru_cache(maxsize=256)
def _utc_text(moment: datetime) -> str:
    return format_ts(moment)


def parse_optional_ts(text: str | None) -> datetime | None:
    """A nullable time column (clock.stored_ts: UnreadableRow where an edit left something else)."""
    return None if text is None else stored_ts(text)


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """The cyclic GC paused for a bulk step (as Mercurial's util.nogc does): judging a run's output or
    writing a batch leaves many objects alive until the step ends, and the collector would walk
    everything the process holds several times per step (a third of the judging time for 20,000
    sensor lines, a sixth of their recording, measured). These steps make no reference cycles worth
    waiting for; reference counting frees what they drop. Only the caller that paused it resumes it,
    so nested or concurrent pauses end with it running."""
    was_running = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_running:
            _to_the_oldest_generation()
            gc.enable()


def _to_the_oldest_generation() -> None:
    """Every object the collector tracks moves to its oldest generation, with no walk (freeze and
    unfreeze merge its lists; freeze zeroes the young count). Without it, the first allocation after
    a bulk step starts a young collection over everything the step made and kept (20,000 sensor
    lines' records: a quarter of judging them), and then again as they age. A cycle the step left
    is still collected, at the next full collection."""
    gc.freeze()
    gc.unfreeze()


class AppendEvent(Protocol):
    """StoreBase._append_event's signature: what `Tx.event` is."""

    def __call__(
        self,
        event_type: str,
        now: datetime,
        *,
        task_id: int | None = ...,
        attempt_id: str | None = ...,
        workflow_id: int | None = ...,
        schedule_id: str | None = ...,
        sensor_id: str | None = ...,
        payload: dict[str, Any] | None = ...,
        refs: dict[str, Any] | None = ...,
    ) -> int: ...


class Tx:
    """The store's connection as verbs compose it: a helper that takes part in its caller's transaction
    (or reads) is given this, never the connection itself. It does not begin or commit: the verb whose
    `with store.transaction() as tx:` it runs inside does, so a composed unit of work stays one
    transaction and one thread hop (AsyncStore)."""

    __slots__ = ("_store", "event")

    def __init__(self, store: StoreBase) -> None:
        self._store = store
        # Append a hash-chained event in this transaction: the store's own append (StoreBase._append_event),
        # bound once, where a method passing **fields on was a tenth of each append (issue 56).
        self.event: AppendEvent = store._append_event

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> sqlite3.Cursor:
        return self._store._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any] | Mapping[str, Any]]) -> sqlite3.Cursor:
        return self._store._conn.executemany(sql, rows)

    def rows_in(self, sql: str, values: list[Any], *params: Any) -> list[sqlite3.Row]:
        return self._store._rows_in(sql, values, *params)

    def tuples(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[tuple[Any, ...]]:
        """The rows as plain tuples (no sqlite3.Row): for reads that take every column of many rows."""
        cursor = self._store._conn.cursor()
        cursor.row_factory = None
        return cursor.execute(sql, params).fetchall()

    @property
    def clock(self) -> Clock:
        return self._store.clock


class StoreBase:
    """The connection and the two primitives every verb uses: a transaction and an event."""

    def __init__(self, conn: sqlite3.Connection, clock: Clock, path: Path) -> None:
        self._conn = conn
        self.clock = clock
        self.path = path
        self.busy_retry_s = BUSY_RETRY_S
        self._log_after_commit: list[tuple[str, dict[str, Any]]] = []
        # The chain's last (sequence, hash) as this transaction left it: under BEGIN IMMEDIATE no one
        # else appends, so only the first event of a transaction reads it. Forgotten at every BEGIN.
        self._chain_head: tuple[int, str] | None = None
        # Rows _append_event holds back inside `_events_batched()`, written by one executemany.
        self._held_events: list[tuple[Any, ...]] | None = None
        # Which file the path named when it was opened: a transaction on a file that was deleted or
        # replaced since would write where no one reads it (docs/reliability.md, "Storage").
        self._opened = file_identity(path)
        self.tx = Tx(self)  # what helpers are given (reads, and writes inside a verb's transaction)
        self._depth = 0  # transactions open: a verb called inside another's joins it (one commit)

    def close(self) -> None:
        self._conn.close()

    def _rows_in(self, sql: str, values: list[Any], *params: Any) -> list[sqlite3.Row]:
        """`sql` whose `{marks}` is an IN list of `values` (after `params`), run 500 values at a time:
        under SQLite's bound-parameter limit however many there are."""
        rows: list[sqlite3.Row] = []
        for start in range(0, len(values), 500):
            chunk = values[start : start + 500]
            rows += self._conn.execute(sql.format(marks=", ".join("?" * len(chunk))), (*params, *chunk)).fetchall()
        return rows

    @contextmanager
    def transaction(self, *, durable: bool = True) -> Iterator[Tx]:
        """BEGIN IMMEDIATE: take the write lock up front so the transaction cannot deadlock. A lock
        someone else holds is waited for (with backoff, up to busy_retry_s); a storage fault
        (disk full, read-only, I/O error) rolls back and becomes one StorageError.

        `durable=False` commits without the fsync (synchronous=NORMAL for this one commit): the
        next durable commit makes it durable too (WAL frames are written in order). Only for rows a
        power cut may lose because what follows them re-creates the truth (docs/decisions.md, "Durability").

        A verb called inside another verb's transaction joins it: one commit for both (the attempt
        boundary's, docs/design.md "Dispatch"), and still all or nothing of its own: a savepoint, rolled
        back to if the verb raises (the outer transaction may catch that and go on)."""
        if self._depth:
            yield from self._joined()
            return
        if not durable:
            self._conn.execute("PRAGMA synchronous = NORMAL")
        self._begin()
        self._depth = 1
        try:
            yield self.tx
            self._conn.execute("COMMIT")
        except BaseException as exc:
            self._rollback()
            self._log_after_commit.clear()
            if isinstance(exc, sqlite3.Error) and (fault := storage_error(exc, self.path)) is not None:
                raise fault from None
            raise
        finally:
            self._depth = 0
            if not durable:
                self._conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
        for event_type, fields in self._log_after_commit:
            shown = " ".join(f"{k}={printable(str(v))}" for k, v in fields.items() if v is not None)
            logger.info("%s %s", event_type, shown)
        self._log_after_commit.clear()

    def _joined(self) -> Iterator[Tx]:
        name = f"joined_{self._depth}"
        head, logged = self._chain_head, len(self._log_after_commit)
        self._conn.execute(f"SAVEPOINT {name}")
        self._depth += 1
        try:
            yield self.tx
        except BaseException:
            self._conn.execute(f"ROLLBACK TO {name}")
            self._chain_head = head  # the events it appended are gone: the head is what it was
            del self._log_after_commit[logged:]
            raise
        finally:
            self._depth -= 1
            self._conn.execute(f"RELEASE {name}")

    @contextmanager
    def snapshot(self) -> Iterator[Tx]:
        """Reads that see one state of the database (a deferred read transaction: in WAL it takes no
        lock and never waits for a writer); inside a transaction, that transaction's own view."""
        if self._conn.in_transaction:
            yield self.tx
            return
        self._conn.execute("BEGIN DEFERRED")
        try:
            yield self.tx
        finally:
            self._rollback()  # nothing was written: ending it is all that is left

    @contextmanager
    def _events_batched(self) -> Iterator[None]:
        """Inside a transaction: the events appended meanwhile are written by one executemany when it
        ends (the same rows, sequences and hashes, in the same transaction; a bulk verb's statements
        per event go from one to a share of one). Hazard: nothing may read the events table inside
        it, since the rows are not there yet; the chain head each append needs is kept in memory. The
        cyclic GC is paused meanwhile."""
        held: list[tuple[Any, ...]] = []
        self._held_events = held
        try:
            with no_cycle_collection():  # a bulk step (no_cycle_collection says why)
                yield
        finally:
            self._held_events = None
        if held:  # only on success: an exception rolls the transaction back anyway
            self._conn.executemany(_INSERT_EVENT, held)

    def require_present(self, *, reading: bool = False) -> None:
        """DatabaseGone if the file this store opened was deleted, moved away or replaced since: a
        writer must not write to it, and a follower (`reading`) would go on reading what no one writes
        any more."""
        if (gone := database_gone(self.path, self._opened, reading=reading)) is not None:
            raise gone

    def _begin(self) -> None:
        self.require_present()  # no write reaches a database nobody else can see: every service exits on it
        self._chain_head = None  # another process may have appended since our last transaction
        deadline, pause = time.monotonic() + self.busy_retry_s, 0.05
        while True:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.Error as exc:
                busy = getattr(exc, "sqlite_errorcode", 0) & 0xFF in (5, 6)  # BUSY, LOCKED
                if not busy or time.monotonic() + pause > deadline:
                    raise storage_error(exc, self.path) or exc from None
            time.sleep(pause)  # on the store's worker thread: the event loop is not held up
            pause = min(pause * 2, 2.0)

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                logger.warning("ROLLBACK failed; SQLite rolls the transaction back itself", exc_info=True)

    def _append_event(
        self,
        event_type: str,
        now: datetime,
        *,
        task_id: int | None = None,
        attempt_id: str | None = None,
        workflow_id: int | None = None,
        schedule_id: str | None = None,
        sensor_id: str | None = None,
        payload: dict[str, Any] | None = None,
        refs: dict[str, Any] | None = None,
    ) -> int:
        """Append one event to the chain; call only inside a transaction."""
        if event_type not in _EVENT_TYPES:
            raise ValueError(f"unknown event type {event_type!r}; add it to records.EVENT_TYPES")
        last = (
            self._chain_head
            or self._conn.execute("SELECT sequence, hash FROM events ORDER BY sequence DESC LIMIT 1").fetchone()
        )
        sequence, prev_hash = (last[0] + 1, last[1]) if last else (1, GENESIS_HASH)
        event_id, timestamp = new_ulid(self.clock), timestamp_text(now)
        # The hash is over the event's body as events.py's verify rebuilds it from the row (chain_hash of
        # the dict of these fields); event_body_text writes those bytes without building the dict. The
        # payload and refs are encoded once, canonically: the same text is hashed and stored. Each value is
        # named once, not gathered into tuples and spread again (issue 56).
        payload_text = canonical_object(payload) if payload else "{}"
        refs_text = canonical_object(refs) if refs else "{}"
        body = event_body_text(
            event_id,
            event_type,
            timestamp,
            sequence,
            EVENT_SCHEMA_VERSION,
            task_id,
            attempt_id,
            workflow_id,
            schedule_id,
            sensor_id,
            payload_text,
            refs_text,
        )
        event_hash = chain_hash_of_text(prev_hash, body)
        row = (
            sequence,
            event_id,
            event_type,
            timestamp,
            EVENT_SCHEMA_VERSION,
            task_id,
            attempt_id,
            workflow_id,
            schedule_id,
            sensor_id,
            payload_text,
            refs_text,
            prev_hash,
            event_hash,
        )
        if self._held_events is None:
            self._conn.execute(_INSERT_EVENT, row)
        else:
            self._held_events.append(row)
        self._chain_head = (sequence, event_hash)
        if logger.isEnabledFor(logging.INFO):  # the line is written at commit: nothing to build if it is not
            ids = {"task": task_id, "attempt": attempt_id, "workflow": workflow_id, "schedule": schedule_id}
            self._log_after_commit.append((event_type, {**ids, "sensor": sensor_id, **_loggable(payload)}))
        return sequence


_EVENT_TYPES = frozenset(EVENT_TYPES)
_INSERT_EVENT = """INSERT INTO events (sequence, event_id, type, timestamp, schema_version, task_id, attempt_id,
        workflow_id, schedule_id, sensor_id, payload, refs, prev_hash, hash)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""


def _loggable(payload: dict[str, Any] | None) -> dict[str, Any]:
    """The short scalar fields of a payload, for the one log line per transition."""
    if not payload:
        return {}
    return {
        k: v for k, v in payload.items() if isinstance(v, int | float | bool) or (isinstance(v, str) and len(v) <= 80)
    }
