"""What `agentd web` keeps (docs/web.md): the operators' bearer tokens (only a hash of each secret) and the
approval requests handed off to an external app, with the run context each carried."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from agentd import frozen_value
from agentd.clock import stored_ts
from agentd.errors import InputError, NotFound
from agentd.records import TaskRecord
from agentd.store.base import StoreBase, Tx, dumps, loads, parse_optional_ts, ts
from agentd.store.columns import TASK_COLUMNS, TASK_FROM, event_filter
from agentd.store.rows import holdable, task_from_row

HANDOFF_ERROR_CHARS = 500


# A hand-off's request still waits: its approval, or the tool call held for a person (docs/policy.md).
STILL_PENDING = """(EXISTS (SELECT 1 FROM approvals p WHERE p.approval_id = h.approval_id AND p.status = 'pending')
                   OR EXISTS (SELECT 1 FROM held_calls c WHERE c.call_id = h.approval_id AND c.status = 'pending'))"""


@frozen_value
class WebToken:
    """One operator's token as stored: never its secret, only the secret's SHA-256."""

    token_id: str
    name: str
    secret_sha256: str
    created_at: datetime
    created_by: str
    revoked_at: datetime | None
    revoked_by: str | None

    def as_dict(self) -> dict[str, Any]:
        """What `agentd web token list --json` shows: no hash either."""
        return {
            "name": self.name,
            "token_id": self.token_id,
            "created_at": ts(self.created_at),
            "created_by": self.created_by,
            "revoked_at": ts(self.revoked_at),
            "revoked_by": self.revoked_by,
        }


@frozen_value
class Handoff:
    """An approval request sent (or being sent) to the approval handler, with the context it carried."""

    approval_id: str
    task_id: int
    handler_id: str
    status: str  # pending, sent, failed
    attempts: int
    next_attempt_at: datetime
    last_error: str | None
    context: dict[str, Any]
    created_at: datetime
    sent_at: datetime | None


def _token(row: Any) -> WebToken:
    return WebToken(
        row["token_id"],
        row["name"],
        row["secret_sha256"],
        stored_ts(row["created_at"]),
        row["created_by"],
        parse_optional_ts(row["revoked_at"]),
        row["revoked_by"],
    )


def _handoff(row: Any) -> Handoff:
    return Handoff(
        row["approval_id"],
        row["task_id"],
        row["handler_id"],
        row["status"],
        row["attempts"],
        stored_ts(row["next_attempt_at"]),
        row["last_error"],
        loads(row["context"]),
        stored_ts(row["created_at"]),
        parse_optional_ts(row["sent_at"]),
    )


class WebVerbs(StoreBase):
    def add_web_token(
        self, token_id: str, name: str, secret_sha256: str, by: str, now: datetime, *, replace: bool = False
    ) -> WebToken:
        """A new token for `name`; a name with a live token is refused, unless `replace` (that one is
        revoked in the same transaction)."""
        with self.transaction():
            live = self._live_token(name)
            if live is not None and not replace:
                raise InputError(f"name: {name!r} has a token already; revoke it first, or pass --replace")
            if live is not None:
                self._revoke(live, by, now)
            self.tx.execute(
                """INSERT INTO web_tokens (token_id, name, secret_sha256, created_at, created_by)
                   VALUES (?, ?, ?, ?, ?)""",
                (token_id, name, secret_sha256, ts(now), by),
            )
            self.tx.event("web_token_added", now, payload={"name": name, "token_id": token_id, "by": by})
            return WebToken(token_id, name, secret_sha256, now, by, None, None)

    def revoke_web_token(self, name: str, by: str, now: datetime) -> WebToken:
        """End `name`'s live token: every request and session it made is refused from now on."""
        with self.transaction():
            live = self._live_token(name)
            if live is None:
                raise NotFound(f"name: no live token named {name!r} (`agentd web token list` shows them)")
            self._revoke(live, by, now)
            return self.web_token(live.token_id) or live

    def web_token(self, token_id: str) -> WebToken | None:
        """A token by its id, live or revoked; None if it never existed."""
        row = self.tx.execute("SELECT * FROM web_tokens WHERE token_id = ?", (token_id,)).fetchone()
        return None if row is None else _token(row)

    def web_tokens(self) -> list[WebToken]:
        """Every token ever issued, live ones first, then by name."""
        rows = self.tx.execute("SELECT * FROM web_tokens ORDER BY revoked_at IS NOT NULL, name, created_at").fetchall()
        return [_token(row) for row in rows]

    def _live_token(self, name: str) -> WebToken | None:
        row = self.tx.execute("SELECT * FROM web_tokens WHERE name = ? AND revoked_at IS NULL", (name,)).fetchone()
        return None if row is None else _token(row)

    def _revoke(self, token: WebToken, by: str, now: datetime) -> None:
        self.tx.execute(
            "UPDATE web_tokens SET revoked_at = ?, revoked_by = ? WHERE token_id = ?", (ts(now), by, token.token_id)
        )
        payload = {"name": token.name, "token_id": token.token_id, "by": by}
        self.tx.event("web_token_revoked", now, payload=payload)

    def tasks_matching(
        self, *, statuses: tuple[str, ...] = (), task_type: str | None = None, limit: int = 50
    ) -> list[TaskRecord]:
        """Newest first, of these statuses (any when empty) and this type (any when None): what the
        console lists, and what an action on many tasks acts on (its dry run counts the same rows)."""
        clauses, params = ["1"], list[object]()
        if statuses:
            clauses.append(f"t.status IN ({', '.join('?' * len(statuses))})")
            params += statuses
        if task_type is not None:
            clauses.append("t.task_type = ?")
            params.append(task_type)
        rows = self.tx.execute(
            f"SELECT {TASK_COLUMNS} FROM {TASK_FROM} WHERE {' AND '.join(clauses)} ORDER BY t.id DESC LIMIT ?",
            (*params, limit),
        ).fetchall()
        return [task_from_row(r) for r in rows]

    def event_rows(
        self,
        *,
        after: int = 0,
        task_id: int | None = None,
        attempt_id: str | None = None,
        types: tuple[str, ...] = (),
        limit: int = 200,
        last: bool = False,
    ) -> list[dict[str, Any]]:
        """Events as plain JSON objects, in sequence order after `after` (`last`: the newest `limit`),
        their type as written: the console shows (and streams) an event type this build does not know
        yet, which a newer service beside it may append, instead of failing the whole read."""
        where, params = event_filter(after=after, task_id=task_id, attempt_id=attempt_id, types=types)
        found = _plain_events(self.tx, where, params, ascending=not last, limit=limit)
        return found[::-1] if last else found

    def event_page(
        self,
        *,
        before: int | None = None,
        after: int | None = None,
        task_id: int | None = None,
        types: tuple[str, ...] = (),
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        """A page of events, newest first, as `event_rows` shapes them: the newest `limit` that match (below
        sequence `before` when given), or with `after` the `limit` that follow it (docs/web.md, "Events")."""
        where, params = event_filter(
            before=before,
            after=after,
            task_id=task_id,
            types=types,
            since=None if since is None else ts(since),
            until=None if until is None else ts(until),
        )
        forward = after is not None and before is None  # the page after a cursor: read upwards, shown newest first
        found = _plain_events(self.tx, where, params, ascending=forward, limit=limit)
        return found[::-1] if forward else found

    def event_frames(
        self, *, after: int = 0, task_id: int | None = None, types: tuple[str, ...] = (), limit: int = 200
    ) -> list[tuple[int, str]]:
        """(sequence, the event as JSON text) in sequence order after `after`: what `event_rows` returns,
        as SQLite's own JSON functions write it (a live stream sends it as it is, and a replay costs no
        parse and dump per event); a payload SQLite does not take for JSON is read as `event_rows` reads it."""
        where, params = event_filter(after=after, task_id=task_id, types=types)
        rows = self.tx.execute(
            f"""SELECT sequence, CASE WHEN json_valid(payload) AND json_type(payload) = 'object' THEN json_object(
                       'sequence', sequence, 'event_id', event_id, 'type', type, 'timestamp', timestamp,
                       'task_id', task_id, 'attempt_id', attempt_id, 'workflow_id', workflow_id,
                       'payload', json(payload)) END
                FROM events WHERE {where} ORDER BY sequence LIMIT ?""",
            (*params, limit),
        ).fetchall()
        return [(row[0], row[1] if row[1] is not None else self._event_json(row[0])) for row in rows]

    def _event_json(self, sequence: int) -> str:
        [row] = self.event_rows(after=sequence - 1, limit=1)
        return json.dumps(row, separators=(",", ":"))

    # --- approval hand-off ---------------------------------------------------------------------------

    def approvals_not_handed_off(self, limit: int = 50) -> list[tuple[str, int]]:
        """(approval_id, task_id) of pending approvals no hand-off row exists for yet, oldest first."""
        rows = self.tx.execute(
            """SELECT p.approval_id, p.task_id FROM approvals p
               WHERE p.status = 'pending'
                 AND NOT EXISTS (SELECT 1 FROM approval_handoffs h WHERE h.approval_id = p.approval_id)
               ORDER BY p.requested_at, p.task_id LIMIT ?""",
            (limit,),
        ).fetchall()
        return [(row[0], row[1]) for row in rows]

    def calls_not_handed_off(self, limit: int = 50) -> list[tuple[str, int]]:
        """(call_id, task_id) of tool calls held for a person that no hand-off row exists for yet, oldest
        first (docs/policy.md): a call's hand-off is keyed by its call id, as an approval's by its id."""
        rows = self.tx.execute(
            """SELECT c.call_id, c.task_id FROM held_calls c
               WHERE c.status = 'pending'
                 AND NOT EXISTS (SELECT 1 FROM approval_handoffs h WHERE h.approval_id = c.call_id)
               ORDER BY c.requested_at, c.rowid LIMIT ?""",
            (limit,),
        ).fetchall()
        return [(row[0], row[1]) for row in rows]

    def record_handoff(
        self, approval_id: str, task_id: int, handler_id: str, context: dict[str, Any], now: datetime
    ) -> Handoff:
        """The context an approval request is handed off with, fixed before its first send (a resend
        carries the same bytes' meaning); a second call for the same approval keeps the first."""
        with self.transaction():
            self.tx.execute(
                """INSERT INTO approval_handoffs (approval_id, task_id, handler_id, next_attempt_at, context,
                       created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (approval_id) DO NOTHING""",
                (approval_id, task_id, handler_id, ts(now), dumps(context), ts(now)),
            )
            found = self.handoff_of(approval_id)
            assert found is not None
            return found

    def due_handoffs(self, now: datetime, limit: int = 20) -> list[Handoff]:
        """Hand-offs whose next send is due and whose approval is still pending, oldest first; each one
        whose approval was resolved meanwhile is withdrawn first (nothing is sent for it)."""
        self.withdraw_settled_handoffs(now)
        rows = self.tx.execute(
            f"""SELECT h.* FROM approval_handoffs h
               WHERE h.status = 'pending' AND h.next_attempt_at <= ?
                 AND {STILL_PENDING}
               ORDER BY h.next_attempt_at LIMIT ?""",
            (ts(now), limit),
        ).fetchall()
        return [_handoff(row) for row in rows]

    def withdraw_settled_handoffs(self, now: datetime) -> int:
        """Each hand-off not sent yet whose approval is no longer pending (approved, denied, or asked
        again as a new request) ends `withdrawn`, with its event; how many."""
        with self.transaction():
            rows = self.tx.execute(
                f"""SELECT h.approval_id, h.task_id, h.handler_id FROM approval_handoffs h
                   WHERE h.status = 'pending' AND NOT {STILL_PENDING}"""
            ).fetchall()
            for approval_id, task_id, handler_id in rows:
                self.tx.execute(
                    "UPDATE approval_handoffs SET status = 'withdrawn' WHERE approval_id = ?", (approval_id,)
                )
                payload = {"approval_id": approval_id, "handler": handler_id, "why": "resolved before it was sent"}
                self.tx.event("approval_handoff_withdrawn", now, task_id=task_id, payload=payload)
            return len(rows)

    def handoff_of(self, approval_id: str) -> Handoff | None:
        """The hand-off of an approval, if there is one."""
        row = self.tx.execute("SELECT * FROM approval_handoffs WHERE approval_id = ?", (approval_id,)).fetchone()
        return None if row is None else _handoff(row)

    def finish_handoff_attempt(
        self, handoff: Handoff, status: str, error: str | None, next_attempt_at: datetime, now: datetime
    ) -> None:
        """One send's end, and its event: `sent`, `pending` again (a retry at next_attempt_at) or `failed`
        for good."""
        with self.transaction():
            self.tx.execute(
                """UPDATE approval_handoffs SET status = ?, attempts = attempts + 1, next_attempt_at = ?,
                       last_error = ?, sent_at = CASE WHEN ? = 'sent' THEN ? ELSE sent_at END
                   WHERE approval_id = ?""",
                (
                    status,
                    ts(next_attempt_at),
                    (error or "")[:HANDOFF_ERROR_CHARS] or None,
                    status,
                    ts(now),
                    handoff.approval_id,
                ),
            )
            kinds = {"sent": "approval_handed_off", "failed": "approval_handoff_failed"}
            kind = kinds.get(status, "approval_handoff_retrying")
            payload: dict[str, Any] = {"approval_id": handoff.approval_id, "handler": handoff.handler_id}
            payload |= {"attempts": handoff.attempts + 1} | ({"error": error} if error else {})
            payload |= {"next_attempt_at": ts(next_attempt_at)} if status == "pending" else {}
            self.tx.event(kind, now, task_id=handoff.task_id, payload=payload)

    def approval_context(self, task_id: int) -> dict[str, Any]:
        """What a task's pending approval is about: its id, scope, the last attempt (if any) and the
        dispatch context the task was submitted with (docs/web.md, "Approval hand-off")."""
        row = self.tx.execute(
            "SELECT approval_id, scope, reason FROM approvals WHERE task_id = ? AND status = 'pending'", (task_id,)
        ).fetchone()
        if row is None:
            raise InputError(f"task_id: task {task_id} is not waiting for approval")
        attempt = self.tx.execute(
            "SELECT attempt_id FROM task_attempts WHERE task_id = ? ORDER BY attempt_number DESC LIMIT 1", (task_id,)
        ).fetchone()
        enqueued = self.tx.execute(
            """SELECT CASE WHEN NOT json_valid(payload) THEN NULL
                           WHEN json_type(payload, '$.dispatch_context') = 'object'
                           THEN json_extract(payload, '$.dispatch_context') END FROM events
               WHERE type = 'task_enqueued' AND task_id = ? ORDER BY sequence LIMIT 1""",  # an edit reads as none
            (task_id,),
        ).fetchone()
        return {
            "approval_id": row[0],
            "scope": row[1],
            "reason": row[2],
            "task_id": task_id,
            "attempt_id": attempt[0] if attempt else None,
            "dispatch_context": loads(enqueued[0]) if enqueued and enqueued[0] else None,
        }


def _plain_events(tx: Tx, where: str, params: list[Any], *, ascending: bool, limit: int) -> list[dict[str, Any]]:
    """The events `where` selects as plain JSON objects (the console's shape), the first `limit` by sequence
    `ascending` or from the newest."""
    rows = tx.execute(
        f"""SELECT sequence, event_id, type, timestamp, task_id, attempt_id, workflow_id, payload FROM events
            WHERE {where} ORDER BY sequence {"ASC" if ascending else "DESC"} LIMIT ?""",
        (*params, limit),
    ).fetchall()
    return [{**dict(row), "payload": holdable(row["payload"]) or {}} for row in rows]
