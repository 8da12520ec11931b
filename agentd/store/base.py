"""The SQLite connection, its pragmas, explicit transactions and the hash-chained event append.

Every verb of the Store runs as one plain function on one connection, so a whole
`BEGIN IMMEDIATE … COMMIT` is one call (one thread hop for AsyncStore), never three.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from agentd.clock import Clock, format_ts, parse_ts
from agentd.hashing import GENESIS_HASH, chain_hash, new_ulid
from agentd.records import EVENT_TYPES

logger = logging.getLogger("agentd.events")

EVENT_SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 10_000
# FULL: a committed outcome or an accepted task survives a power cut. At one attempt at a
# time the ~150 µs it costs per transaction is noise (README, "Durability").
SYNCHRONOUS = "FULL"


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating 0600 if absent) the database with agentd's pragmas."""
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def ts(moment: datetime | None) -> str | None:
    return None if moment is None else format_ts(moment)


def parse_optional_ts(text: str | None) -> datetime | None:
    return None if text is None else parse_ts(text)


class StoreBase:
    """The connection and the two primitives every verb uses: a transaction and an event."""

    def __init__(self, conn: sqlite3.Connection, clock: Clock, path: Path) -> None:
        self._conn = conn
        self.clock = clock
        self.path = path
        self._log_after_commit: list[tuple[str, dict[str, Any]]] = []

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE: take the write lock up front so the transaction cannot deadlock."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            self._log_after_commit.clear()
            raise
        self._conn.execute("COMMIT")
        for event_type, fields in self._log_after_commit:
            logger.info("%s %s", event_type, " ".join(f"{k}={v}" for k, v in fields.items() if v is not None))
        self._log_after_commit.clear()

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
        if event_type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {event_type!r}; add it to records.EVENT_TYPES")
        last = self._conn.execute("SELECT sequence, hash FROM events ORDER BY sequence DESC LIMIT 1").fetchone()
        sequence, prev_hash = (last[0] + 1, last[1]) if last else (1, GENESIS_HASH)
        body = {
            "event_id": new_ulid(self.clock),
            "type": event_type,
            "timestamp": format_ts(now),
            "sequence": sequence,
            "schema_version": EVENT_SCHEMA_VERSION,
            "task_id": task_id,
            "attempt_id": attempt_id,
            "workflow_id": workflow_id,
            "schedule_id": schedule_id,
            "sensor_id": sensor_id,
            "payload": payload or {},
            "refs": refs or {},
        }
        self._conn.execute(
            """INSERT INTO events (sequence, event_id, type, timestamp, schema_version, task_id,
                   attempt_id, workflow_id, schedule_id, sensor_id, payload, refs, prev_hash, hash)
               VALUES (:sequence, :event_id, :type, :timestamp, :schema_version, :task_id,
                   :attempt_id, :workflow_id, :schedule_id, :sensor_id, :payload_json, :refs_json,
                   :prev_hash, :hash)""",
            {
                **body,
                "payload_json": dumps(body["payload"]),
                "refs_json": dumps(body["refs"]),
                "prev_hash": prev_hash,
                "hash": chain_hash(prev_hash, body),
            },
        )
        self._log_after_commit.append(
            (
                event_type,
                {
                    "task": task_id,
                    "attempt": attempt_id,
                    "workflow": workflow_id,
                    "schedule": schedule_id,
                    "sensor": sensor_id,
                    **_loggable(payload),
                },
            )
        )
        return sequence


def _loggable(payload: dict[str, Any] | None) -> dict[str, Any]:
    """The short scalar fields of a payload, for the one log line per transition."""
    if not payload:
        return {}
    return {
        k: v for k, v in payload.items() if isinstance(v, int | float | bool) or (isinstance(v, str) and len(v) <= 80)
    }
