"""The fleet's queue on PostgreSQL (docs/fleet.md): every statement agentd runs against it.

Each verb is one short transaction: no transaction is ever held across an attempt. A claim takes rows
with `FOR UPDATE SKIP LOCKED`, so claimers never wait on each other, and gives each a fencing token
from a sequence (it only grows). Every later write of the agent that claimed — renew, confirm, complete,
fail — is guarded by that token and by the task still being leased: a task whose lease expired and was
claimed again, or that an operator canceled, refuses the old token's writes (recorded as `refused`),
so a rescuer can never have its work overwritten by the agent it rescued. Lease times are the server's
clock, never an agent's. The connection (psycopg 3, imported on first use) is agentd/store/fleet_connect.py's;
every read of a row selects it as agentd/store/fleet_rows.py says, so no row can make a read raise.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from agentd import frozen_value
from agentd.errors import InputError, NotFound, SchemaMismatch
from agentd.resources import data_dir
from agentd.store.fleet_connect import connect, unavailable
from agentd.store.fleet_rows import COLUMNS, NAMES, FleetTask, Lease, event_of, read_as
from agentd.store.migrations import Migration, available_migrations

TERMINAL = ("completed", "failed", "canceled")


# What an agent runs for every task: each statement writes its own events (data-modifying CTEs), so a
# row and its history change in the same statement, hence the same transaction.
REQUEUE_EXPIRED = """
    WITH expired AS (
        UPDATE fleet_tasks SET status = 'queued', lease_agent = NULL, lease_token = NULL, lease_expires_at = NULL,
            updated_at = now()
        WHERE id IN (SELECT id FROM fleet_tasks WHERE status = 'leased' AND lease_expires_at < now()
                     FOR UPDATE SKIP LOCKED)
        RETURNING id)
    INSERT INTO fleet_events (task_id, type) SELECT id, 'lease_expired' FROM expired ORDER BY id"""
CLAIM = """
    WITH next AS (
        SELECT id FROM fleet_tasks
        WHERE status = 'queued' AND task_type = ANY(%(types)s) AND labels <@ %(labels)s
        ORDER BY priority, created_at, id LIMIT {limit}
        FOR UPDATE SKIP LOCKED),
    claimed AS (
        UPDATE fleet_tasks t SET status = 'leased', lease_agent = %(agent)s,
            lease_token = nextval('fleet_lease_tokens'),
            lease_expires_at = now() + make_interval(secs => %(lease_s)s),
            claims = t.claims + 1, updated_at = now()
        FROM next WHERE t.id = next.id
        RETURNING {returning}),
    noted AS (
        INSERT INTO fleet_events (task_id, type, agent, token)
        SELECT id, 'claimed', lease_agent, lease_token FROM claimed ORDER BY lease_token)
    SELECT {columns} FROM claimed ORDER BY priority, created_at, id"""
FINISH = """
    WITH done AS (
        UPDATE fleet_tasks SET status = %(status)s, result = %(result)s, finished_at = now(), updated_at = now(),
            lease_expires_at = NULL
        WHERE id = %(id)s AND lease_token = %(token)s AND status = 'leased' RETURNING id, lease_agent, lease_token)
    INSERT INTO fleet_events (task_id, type, agent, token, detail)
    SELECT id, %(status)s, lease_agent, lease_token, %(detail)s FROM done RETURNING task_id"""


def _claim_sql(limit: int) -> str:
    """CLAIM with its LIMIT written in (checked first: it becomes SQL text). A parameter there made
    PostgreSQL plan the claim anew at every run: the generic plan, costed for an unknown limit (a tenth
    of the table), never beat a custom one, and planning cost more than running it. Written in, each
    limit's statement keeps one cached plan."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"a claim's limit is a positive integer, not {limit!r}")
    return _claim_sql_for(limit)


@functools.lru_cache(maxsize=64)
def _claim_sql_for(limit: int) -> str:
    returning = ", ".join(f"t.{name}" for name in NAMES)
    return CLAIM.format(limit=limit, returning=returning, columns=COLUMNS)


def fleet_migrations() -> list[Migration]:
    return available_migrations(data_dir("migrations") / "fleet")


@frozen_value
class Submission:
    """One task to submit, as `agentd fleet submit` judged it (agentd/cli/fleet_submit.py)."""

    task_type: str
    subject: str | None
    payload: dict[str, Any]
    labels: tuple[str, ...] = ()
    priority: int = 5
    key: str | None = None

    def check(self, names: dict[str, str] | None = None) -> None:
        """InputError for what PostgreSQL cannot store (U+0000 in text or jsonb), by the name the caller
        gives each field (a flag, a line's field)."""
        names = names or {}
        for value, field_name in ((self.subject, "subject"), (self.key, "key"), (self.payload, "payload")):
            if _without_nul(value) != value:
                raise InputError(
                    f"{names.get(field_name, field_name)}: holds the character U+0000, which PostgreSQL cannot "
                    "store; remove it"
                )


def _scrubbed(value: Any) -> str:
    """JSON of what agentd itself writes (a result, an event's detail), U+0000 replaced by U+FFFD: a
    summary an attempt wrote must never make its report impossible."""
    return json.dumps(_without_nul(value))


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(key): _without_nul(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    return value


class FleetQueue:
    """The verbs, over one connection."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @classmethod
    def open(cls, dsn: str) -> FleetQueue:
        return cls(connect(dsn))

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """One short transaction; a connection that failed under it is FleetUnavailable (the server
        rolled the transaction back: nothing of it happened)."""
        with unavailable(), self.conn.transaction(), self.conn.cursor() as cursor:
            yield cursor

    @contextmanager
    def _statement(self) -> Iterator[Any]:
        """A cursor for one statement, its own transaction (the connection autocommits): no BEGIN and
        COMMIT to wait for, so a verb that is one statement is one round trip."""
        with unavailable(), self.conn.cursor() as cursor:
            yield cursor

    @property
    def broken(self) -> bool:
        return bool(self.conn.closed or self.conn.broken)

    # --- schema --------------------------------------------------------------------------------------

    def migrate(self) -> list[Migration]:
        """Apply the fleet's pending migrations, each checksummed, in one transaction each (a lock keeps
        two `fleet init` from racing); refuse a database whose applied migration differs from the code."""
        applied = []
        with self._transaction() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(4242)")
            cur.execute(
                """CREATE TABLE IF NOT EXISTS fleet_schema_migrations (
                       version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL,
                       applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"""
            )
            cur.execute("SELECT version, checksum FROM fleet_schema_migrations ORDER BY version")
            done = {row["version"]: row["checksum"] for row in cur.fetchall()}
            for migration in fleet_migrations():
                if migration.version in done:
                    if done[migration.version] != migration.checksum:
                        raise SchemaMismatch(f"fleet migration {migration.filename} was edited after it was applied")
                    continue
                cur.execute(migration.sql)
                cur.execute(
                    "INSERT INTO fleet_schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, migration.checksum),
                )
                applied.append(migration)
        return applied

    def require_current(self) -> None:
        with self._transaction() as cur:
            cur.execute("SELECT to_regclass('fleet_schema_migrations') AS present")
            if cur.fetchone()["present"] is None:
                raise SchemaMismatch("the fleet's database has no schema yet: run `agentd fleet init --dsn …`")
            cur.execute("SELECT version, checksum FROM fleet_schema_migrations")
            done = {row["version"]: row["checksum"] for row in cur.fetchall()}
        for migration in fleet_migrations():
            if done.get(migration.version) != migration.checksum:
                raise SchemaMismatch(
                    f"the fleet's schema is behind or edited ({migration.filename}): run `agentd fleet init`"
                )

    # --- submitting ---------------------------------------------------------------------------------

    def submit(
        self,
        task_type: str,
        subject: str | None,
        payload: dict[str, Any],
        *,
        labels: Sequence[str] = (),
        priority: int = 5,
        key: str | None = None,
        origin: dict[str, Any],
    ) -> tuple[FleetTask, bool]:
        """(the task, whether it is new). A repeated idempotency key is the task made the first time."""
        new = Submission(task_type, subject, payload, tuple(labels), priority, key)
        [done] = self.submit_many([new], origin=origin)
        return done

    def submit_many(self, submissions: Sequence[Submission], *, origin: dict[str, Any]) -> list[tuple[FleetTask, bool]]:
        """Each submission as `submit` makes it, all in one transaction (all or none), in order: (the task,
        whether it is new) for each. A key repeated within them is one task too."""
        for new in submissions:
            new.check()
        with self._transaction() as cur:
            return [self._submit_one(cur, new, origin) for new in submissions]

    def _submit_one(self, cur: Any, new: Submission, origin: dict[str, Any]) -> tuple[FleetTask, bool]:
        cur.execute(
            f"""INSERT INTO fleet_tasks (idempotency_key, task_type, subject, payload, labels, priority, origin)
                VALUES (%s, %s, %s, %s, %s, %s, %s)
                ON CONFLICT (idempotency_key) DO NOTHING RETURNING {COLUMNS}""",
            (
                new.key,
                new.task_type,
                new.subject,
                json.dumps(new.payload),
                sorted(set(new.labels)),
                new.priority,
                json.dumps(origin),
            ),
        )
        row = cur.fetchone()
        if row is not None:
            self._event(cur, row["id"], "submitted", detail={"by": origin.get("submitted_by")})
            return FleetTask.of(row), True
        cur.execute(f"SELECT {COLUMNS} FROM fleet_tasks WHERE idempotency_key = %s", (new.key,))
        return FleetTask.of(cur.fetchone()), False

    # --- an agent's side ------------------------------------------------------------------------------

    def claim(
        self, agent: str, task_types: Sequence[str], labels: Sequence[str], lease_s: float, limit: int = 1
    ) -> list[Lease]:
        """Up to `limit` queued tasks this agent can run (its task types; every label of the task among its
        labels), most urgent first, each with a new token. Leases that expired are queued again first.

        One transaction in one round trip: the requeue and the claim go out together in psycopg's pipeline
        and PostgreSQL runs them as one implicit transaction, committed at the pipeline's end (each
        statement writes its own events). The claim sees the tasks the requeue just queued."""
        params = {"types": list(task_types), "labels": sorted(set(labels)), "agent": agent, "lease_s": lease_s}
        with unavailable(), self.conn.cursor() as cur:
            with self.conn.pipeline():
                cur.execute(REQUEUE_EXPIRED)
                cur.execute(_claim_sql(limit), params)
            rows = cur.fetchall()
        return [Lease(FleetTask.of(row), row_token) for row in rows if (row_token := row["lease_token"])]

    def renew(self, fleet_id: int, token: int, lease_s: float) -> bool:
        """Extend one lease; False when the token is no longer the task's (renew_all)."""
        return fleet_id not in self.renew_all({fleet_id: token}, lease_s)

    def renew_all(self, leases: dict[int, int], lease_s: float) -> set[int]:
        """Renew many leases (fleet id → token) in one statement; the fleet ids whose token is no longer
        current (each recorded as refused) come back: those leases are lost."""
        if not leases:
            return set()
        with self._transaction() as cur:
            cur.execute(
                """UPDATE fleet_tasks t SET lease_expires_at = now() + make_interval(secs => %s), updated_at = now()
                   FROM unnest(%s::bigint[], %s::bigint[]) AS mine (id, token)
                   WHERE t.id = mine.id AND t.lease_token = mine.token AND t.status = 'leased' RETURNING t.id""",
                (lease_s, list(leases), list(leases.values())),
            )
            lost = set(leases) - {row["id"] for row in cur.fetchall()}
            for fleet_id in sorted(lost):
                self._refused(cur, fleet_id, leases[fleet_id], "renew")
            return lost

    def publish_reset(self, credential: str, until: datetime, reason: str, agent: str) -> None:
        """A provider's reset this agent heard, for the fleet's other agents on the credential (docs/gateway.md)."""
        with self._statement() as cur:
            cur.execute(
                """INSERT INTO fleet_provider_resets (credential, until, reason, agent) VALUES (%s, %s, %s, %s)
                   ON CONFLICT (credential) DO UPDATE SET until = excluded.until,
                       reason = excluded.reason, agent = excluded.agent, recorded_at = now()
                   WHERE excluded.until > fleet_provider_resets.until""",
                (credential, until, reason[:2000], agent),
            )

    def provider_resets(self) -> list[tuple[str, datetime, str, str]]:
        """(credential, until, reason, agent) of each reset still ahead, by this server's clock."""
        with self._statement() as cur:
            cur.execute("SELECT credential, until, reason, agent FROM fleet_provider_resets WHERE until > now()")
            return [(r["credential"], r["until"], r["reason"], r["agent"]) for r in cur.fetchall()]

    def witness_head(self, agent: str, sequence: int, head_hash: str) -> bool:
        """The agent's chain head as of now, kept for `evidence verify --against-fleet`: a row per head, never
        changed (False: this sequence was witnessed already, with whatever hash it had then)."""
        with self._statement() as cur:
            cur.execute(
                """INSERT INTO fleet_witnessed_heads (agent, sequence, hash) VALUES (%s, %s, %s)
                   ON CONFLICT (agent, sequence) DO NOTHING""",
                (agent, sequence, head_hash),
            )
            return bool(cur.rowcount)

    def witnessed_heads(self, agent: str) -> list[tuple[int, str]]:
        """(sequence, hash) of every head the fleet witnessed for the agent, the latest first."""
        with self._statement() as cur:
            cur.execute(
                "SELECT sequence, hash FROM fleet_witnessed_heads WHERE agent = %s ORDER BY sequence DESC", (agent,)
            )
            return [(int(r["sequence"]), r["hash"]) for r in cur.fetchall()]

    def finish(self, fleet_id: int, token: int, status: str, result: dict[str, Any]) -> bool:
        """Write the agent's result back (completed or failed): only with the current token of a task
        still leased. False (recorded as refused) otherwise: the work stays the agent's local record.
        The same write again (the agent died before it noted the first) is True and changes nothing."""
        if status not in ("completed", "failed"):
            raise ValueError(f"a fleet task ends completed or failed, not {status!r}")
        with self._statement() as cur:  # the common case, one round trip: the write and its event
            cur.execute(
                FINISH,
                {
                    "status": status,
                    "result": _scrubbed(result),
                    "id": fleet_id,
                    "token": token,
                    "detail": _scrubbed({"summary": result.get("summary")}),
                },
            )
            if cur.fetchone() is not None:
                return True
        with self._transaction() as cur:  # refused, or this token's own write made before
            cur.execute("SELECT status, lease_token FROM fleet_tasks WHERE id = %s", (fleet_id,))
            now = cur.fetchone()
            if now is not None and now["status"] == status and now["lease_token"] == token:
                return True  # this token's own write, already made
            self._refused(cur, fleet_id, token, status)
            return False

    def _refused(self, cur: Any, fleet_id: int, token: int, what: str) -> None:
        cur.execute("SELECT status, lease_token FROM fleet_tasks WHERE id = %s", (fleet_id,))
        now = cur.fetchone()
        if now is not None:
            detail = {"write": what, "status": now["status"], "current_token": now["lease_token"]}
            self._event(cur, fleet_id, "refused", token=token, detail=detail)

    # --- an operator's side ---------------------------------------------------------------------------

    def cancel(self, fleet_id: int, by: str) -> FleetTask:
        """A queued or leased task ends canceled (its agent's next write is refused: lease lost)."""
        with self._transaction() as cur:
            cur.execute(f"SELECT {COLUMNS} FROM fleet_tasks WHERE id = %s FOR UPDATE", (fleet_id,))
            row = cur.fetchone()
            if row is None:
                raise NotFound(f"no fleet task {fleet_id}")
            if row["status"] in TERMINAL:
                raise InputError(f"fleet task {fleet_id} is already {row['status']}")
            cur.execute(
                f"""UPDATE fleet_tasks SET status = 'canceled', finished_at = now(), updated_at = now(),
                        lease_expires_at = NULL WHERE id = %s RETURNING {COLUMNS}""",
                (fleet_id,),
            )
            canceled = cur.fetchone()
            self._event(cur, fleet_id, "canceled", detail={"by": by})
            return FleetTask.of(canceled)

    def get(self, fleet_id: int) -> FleetTask:
        with self._transaction() as cur:
            cur.execute(f"SELECT {COLUMNS} FROM fleet_tasks WHERE id = %s", (fleet_id,))
            row = cur.fetchone()
        if row is None:
            raise NotFound(f"no fleet task {fleet_id}")
        return FleetTask.of(row)

    def events(self, fleet_id: int) -> list[dict[str, Any]]:
        """The task's history, oldest first (fleet_rows.py `event_of`: `at` as ISO-8601 text, a detail
        agentd cannot hold None, with why in `unreadable`)."""
        with self._transaction() as cur:
            columns = ", ".join(map(read_as, ("type", "agent", "token", "detail", "at")))
            cur.execute(f"SELECT {columns} FROM fleet_events WHERE task_id = %s ORDER BY id", (fleet_id,))
            return [event_of(row) for row in cur.fetchall()]

    def counts(self) -> dict[str, Any]:
        """Tasks by status, leases by agent, and the oldest queued task's age (seconds)."""
        with self._transaction() as cur:
            cur.execute("SELECT status, count(*) AS n FROM fleet_tasks GROUP BY status")
            statuses = {row["status"]: row["n"] for row in cur.fetchall()}
            cur.execute("SELECT lease_agent, count(*) AS n FROM fleet_tasks WHERE status = 'leased' GROUP BY 1")
            leases = {row["lease_agent"]: row["n"] for row in cur.fetchall()}
            cur.execute(
                "SELECT extract(epoch FROM now() - min(created_at)) AS age FROM fleet_tasks "
                "WHERE status = 'queued' AND isfinite(created_at)"  # a row's 'infinity' is no age
            )
            age = cur.fetchone()["age"]
        return {
            "tasks": {s: statuses.get(s, 0) for s in ("queued", "leased", *TERMINAL)},
            "leases": leases,
            "oldest_queued_age_s": float(age) if age is not None else None,
        }

    def _event(
        self,
        cur: Any,
        fleet_id: int,
        kind: str,
        agent: str | None = None,
        token: int | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        cur.execute(
            "INSERT INTO fleet_events (task_id, type, agent, token, detail) VALUES (%s, %s, %s, %s, %s)",
            (fleet_id, kind, agent, token, _scrubbed(detail or {})),
        )
