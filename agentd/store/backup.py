"""The database's part in a backup (docs/backup-and-archive.md): SQLite's online backup of a live database
into a file of its own, and moving the attempts' evidence paths when a restore puts the state dir elsewhere."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from agentd.errors import AgentdError
from agentd.faults import os_storage_error, storage_error
from agentd.store.base import StoreBase, connect


def snapshot_database(source: Path, target: Path) -> None:
    """One consistent copy of the live database at `source` in the new file `target` (0600), through SQLite's
    online backup API: all pages in one step, inside one read transaction, so the copy is the database as one
    commit left it while the services go on writing (WAL readers never block the writer). Never a file copy:
    the WAL holds commits the main file does not have yet. The copy is left in rollback-journal mode, whole
    in one file."""
    fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    os.close(fd)
    live = connect(source, readonly=True)
    try:
        copy = sqlite3.connect(target, isolation_level=None)
        try:
            live.backup(copy)  # pages=-1: every page in one step (stepwise restarts on each write of the source)
            copy.execute("PRAGMA journal_mode = DELETE")
        finally:
            copy.close()
    except sqlite3.Error as exc:
        raise storage_error(exc, source) or exc from None
    except OSError as exc:
        raise os_storage_error(exc, target) from None
    finally:
        live.close()


def database_version(path: Path) -> int:
    """The highest migration a database file has applied (0: none, or not a database agentd made), read without
    writing: what a restore checks before it opens a backup's database as this agentd's."""
    from agentd.store.migrations import applied_rows

    try:
        conn = connect(path, readonly=True)
    except (sqlite3.Error, AgentdError):
        return 0
    try:
        return max((row[0] for row in applied_rows(conn)), default=0)
    except sqlite3.Error:
        return 0
    finally:
        conn.close()


class BackupVerbs(StoreBase):
    def backup_attempts(self) -> list[tuple[int, str, bool, bool]]:
        """Every attempt row as a backup reads it: (task id, attempt id, ended, evidence pruned), plain values (a
        backup of 10,000 attempts builds no records)."""
        rows = self.tx.execute(
            """SELECT task_id, attempt_id, ended_at IS NOT NULL, evidence_pruned_at IS NOT NULL
               FROM task_attempts ORDER BY task_id, attempt_number"""
        ).fetchall()
        return [(row[0], row[1], bool(row[2]), bool(row[3])) for row in rows]

    def relocate_evidence_dirs(self, old_root: str, new_root: str) -> int:
        """Each attempt row's evidence_dir under `old_root` (a state dir's attempts/) is put under `new_root`:
        a restore into another state dir (the boot sweep seals an open attempt where its row says). Returns
        how many rows moved."""
        old, new = old_root.rstrip("/") + "/", new_root.rstrip("/") + "/"
        with self.transaction():
            cursor = self.tx.execute(
                """UPDATE task_attempts SET evidence_dir = ?2 || substr(evidence_dir, length(?1) + 1)
                   WHERE substr(evidence_dir, 1, length(?1)) = ?1""",
                (old, new),
            )
        return cursor.rowcount

    def forget_services(self) -> None:
        """A restored database's dispatch lock and service rows name the processes that ran on the state it was
        taken from, not this one's: the lock is cleared and the rows marked stopped, so the services start (the
        boot sweep then closes the attempts they left open)."""
        with self.transaction():
            self.tx.execute("DELETE FROM dispatch_lock")
            self.tx.execute("UPDATE service_status SET status = 'stopped'")
