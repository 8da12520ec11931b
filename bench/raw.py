"""The raw sqlite3 baseline: the same migrated file (same tables and indexes), the same pragmas
(WAL, synchronous=FULL, foreign keys on), plain statements with no validation, events or attempt rows; one
transaction per row, as agentd commits them."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from agentd.clock import format_ts
from agentd.store.base import SYNCHRONOUS
from bench.agent import fresh, pending_tasks

INSERT = """INSERT INTO tasks (task_type, source, priority, payload, requested_profile_id, max_attempts,
                               available_at, created_at, updated_at)
            VALUES ('example', 'bench', 5, ?, 'operator', 3, ?, ?, ?)"""
CLAIM = """UPDATE tasks SET status = 'running', attempt_count = attempt_count + 1, started_at = :now, updated_at = :now
           WHERE id = (SELECT id FROM tasks WHERE status IN ('pending', 'retryable_failure') AND awaiting_approval = 0
                         AND available_at <= :now ORDER BY priority, available_at, id LIMIT 1)
           RETURNING id"""
COMPLETE = """UPDATE tasks SET status = 'completed', outcome = ?, finished_at = ?, updated_at = ? WHERE id = ?"""
OUTCOME = '{"status":"completed","machine_status":"ok","operator_summary":"ok"}'


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def migrated_file(directory: Path) -> tuple[Path, str]:
    """A migrated database (agentd's schema, nothing else of agentd used) and a timestamp."""
    _, store, clock = fresh(directory)
    store.close()
    return store.path, format_ts(clock.now())


def enqueue_per_s(directory: Path, count: int) -> float:
    path, now = migrated_file(directory)
    conn = connect(path)
    started = time.perf_counter()
    for _ in range(count):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(INSERT, ('{"note":"hello"}', now, now, now))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return count / elapsed


def claim_complete_per_s(directory: Path, count: int) -> float:
    """The claim (one UPDATE … RETURNING on the claim index) and the completion, one transaction each."""
    _, store, clock = fresh(directory)
    store.close()
    pending_tasks(store.path, count, clock.now())
    now = format_ts(clock.now())
    conn = connect(store.path)
    started = time.perf_counter()
    for _ in range(count):
        conn.execute("BEGIN IMMEDIATE")
        task_id = conn.execute(CLAIM, {"now": now}).fetchone()[0]
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(COMPLETE, (OUTCOME, now, now, task_id))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return count / elapsed


BATCH_INSERT = """INSERT INTO tasks (task_type, source, subject, priority, payload, requested_profile_id, max_attempts,
                                     available_at, created_at, updated_at)
                  VALUES (?, 'operator:bench', ?, 5, ?, 'operator', 3, ?, ?, ?)"""


def batch_insert_per_s(directory: Path, text: bytes) -> float:
    """The same JSON lines as `task add --batch` gets, each parsed (json.loads) and its row inserted,
    500 rows per transaction: a minimal importer, with no validation and no events."""
    path, now = migrated_file(directory)
    conn = connect(path)
    started = time.perf_counter()
    lines = text.splitlines()
    for start in range(0, len(lines), 500):
        conn.execute("BEGIN IMMEDIATE")
        for line in lines[start : start + 500]:
            intent = json.loads(line)
            conn.execute(
                BATCH_INSERT, (intent["task_type"], intent["subject"], json.dumps(intent["payload"]), now, now, now)
            )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return len(lines) / elapsed
