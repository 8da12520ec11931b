"""`migrations/NNNN_name.sql`, applied in order, each with its checksummed row in one transaction.

A database behind the code, one whose applied migration was edited, or one newer than the
code is refused with a message that says what to do (docs/design.md, "Storage").
"""

from __future__ import annotations

import re
import sqlite3
from datetime import datetime
from pathlib import Path

from agentd import frozen_value
from agentd.clock import format_ts
from agentd.errors import SchemaMismatch
from agentd.hashing import sha256_hex
from agentd.resources import data_dir

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# A migration that rebuilds a table others reference starts with this line: it runs with foreign
# keys off (SQLite cannot switch them inside a transaction) and is checked before it commits.
FOREIGN_KEYS_OFF = "-- agentd: foreign_keys off"


@frozen_value
class Migration:
    version: int
    name: str
    sql: str

    @property
    def filename(self) -> str:
        return f"{self.version:04d}_{self.name}.sql"

    @property
    def checksum(self) -> str:
        return sha256_hex(self.sql.encode())

    @property
    def rebuilds_tables(self) -> bool:
        return self.sql.startswith(FOREIGN_KEYS_OFF)


def available_migrations(directory: Path | None = None) -> list[Migration]:
    directory = directory or data_dir("migrations")
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise SchemaMismatch(f"{path}: migration files are named NNNN_name.sql")
        found.append(Migration(int(match[1]), match[2], path.read_text(encoding="utf-8")))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise SchemaMismatch(f"{directory}: migration versions must run 1, 2, 3… without gaps; found {versions}")
    return found


def _ensure_table(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE IF NOT EXISTS schema_migrations (
               version INTEGER PRIMARY KEY, name TEXT NOT NULL,
               checksum TEXT NOT NULL, applied_at TEXT NOT NULL)"""
    )


def applied_rows(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'").fetchone()
    if exists is None:
        return []
    return conn.execute("SELECT version, name, checksum FROM schema_migrations ORDER BY version").fetchall()


def pending_migrations(conn: sqlite3.Connection, migrations: list[Migration]) -> list[Migration]:
    """The migrations still to apply; raise if what was applied does not match the code."""
    known = {m.version: m for m in migrations}
    applied = applied_rows(conn)
    for row in applied:
        migration = known.get(row["version"])
        if migration is None:
            raise SchemaMismatch(
                f"the database has migration {row['version']:04d}_{row['name']}.sql applied, which this "
                f"agentd does not know: the database is newer than the code; upgrade agentd"
            )
        if migration.checksum != row["checksum"]:
            raise SchemaMismatch(
                f"migration {migration.filename} was edited after it was applied (checksum "
                f"{row['checksum'][:12]}… in the database, {migration.checksum[:12]}… on disk); restore "
                f"the original file and put the change in a new migration"
            )
    done = {row["version"] for row in applied}
    return [m for m in migrations if m.version not in done]


def apply_migrations(conn: sqlite3.Connection, now: datetime, migrations: list[Migration]) -> list[Migration]:
    """Apply every pending migration, each in its own transaction; return those applied."""
    _ensure_table(conn)
    pending = pending_migrations(conn, migrations)
    for migration in pending:
        if migration.rebuilds_tables:
            conn.execute("PRAGMA foreign_keys = OFF")
        try:
            _apply(conn, migration, now)
        finally:
            conn.execute("PRAGMA foreign_keys = ON")
    return pending


def _apply(conn: sqlite3.Connection, migration: Migration, now: datetime) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _statements(migration.sql):
            conn.execute(statement)
        broken = conn.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise SchemaMismatch(
                f"migration {migration.filename} would leave {len(broken)} rows pointing at nothing "
                f"(first: table {broken[0][0]}, row {broken[0][1]}); nothing was changed"
            )
        conn.execute(
            "INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, ?)",
            (migration.version, migration.name, migration.checksum, format_ts(now)),
        )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def require_current(conn: sqlite3.Connection, migrations: list[Migration], path: Path) -> int:
    """The schema version, if the database is exactly as the code expects; else SchemaMismatch."""
    pending = pending_migrations(conn, migrations)
    if pending:
        names = ", ".join(m.filename for m in pending)
        raise SchemaMismatch(f"the database at {path} is behind this agentd (pending: {names}); run `agentd migrate`")
    return len(migrations)


def _statements(sql: str) -> list[str]:
    """Split a script into whole statements (sqlite3.complete_statement understands triggers)."""
    statements, buffer = [], ""
    for line in sql.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    leftover = [line.strip() for line in buffer.splitlines() if line.strip()]
    if leftover and not all(line.startswith("--") for line in leftover):
        raise SchemaMismatch(f"a migration ends with an incomplete statement: {buffer.strip()[:80]!r}")
    return statements
