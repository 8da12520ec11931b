"""Plain rows for the CLI's fast paths: `agentd status`'s reads and `task add`'s insert, as dicts and
tuples, without the records (pydantic). They mirror the verbs named beside each one; tests hold the fast
paths' output to the verbs' on the same database (tests/test_fast_cli.py), so the records stay the one
description of every shape. Transactions and the event chain are store/base.py's own. Where a write is
the same on both paths (a waiting task's end), the verbs call the one here."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from agentd.clock import Clock
from agentd.store.base import StoreBase, Tx, connect, dumps, ts
from agentd.store.columns import CLAIMABLE
from agentd.store.migrations import available_migrations, require_current
from agentd.vocabulary import MACHINE_STATUS_OF

WAITING = ("pending", "retryable_failure")
# store/budget.py's claim branch with no budget hold: the oldest claimable task of one priority.
_BRANCH = f"""SELECT * FROM (
    SELECT id, priority, available_at FROM tasks
    WHERE {CLAIMABLE} AND priority = {{priority}}
    ORDER BY available_at, id LIMIT 1)"""


def open_plain(path: Path, clock: Clock, *, readonly: bool) -> StoreBase | None:
    """store/core.py `open_store` without the verbs; None where there is no database file (the full
    path then says what to do). A database behind the code is refused the same way."""
    if not path.is_file():
        return None
    conn = connect(path, readonly=readonly)
    try:
        require_current(conn, available_migrations(), path)
    except BaseException:
        conn.close()
        raise
    return StoreBase(conn, clock, path)


# --- what store/tasks.py queue_summary and store/status.py read ----------------------------------------


# A waiting task, due now and not held for approval: the reasons below come after those.
_DUE_UNHELD = "t.status IN ('pending', 'retryable_failure') AND t.awaiting_approval = 0 AND t.available_at <= ?"


def steered_waiting(tx: Tx, at: str) -> tuple[int, int]:
    """Due tasks an operator steered out of the claim's way, on both paths (store/tasks.py `queue_summary`
    too): (paused, after a task not yet completed and not paused). Found from the pauses and the links, so a
    long queue costs nothing here."""
    paused = tx.execute(
        f"SELECT COUNT(*) FROM task_pauses p CROSS JOIN tasks t ON t.id = p.task_id WHERE {_DUE_UNHELD}", (at,)
    ).fetchone()[0]
    after = tx.execute(
        f"""SELECT COUNT(DISTINCT l.after_id) FROM task_links l CROSS JOIN tasks t ON t.id = l.after_id
            JOIN tasks b ON b.id = l.before_id
            WHERE b.status != 'completed' AND {_DUE_UNHELD}
              AND NOT EXISTS (SELECT 1 FROM task_pauses p WHERE p.task_id = t.id)""",
        (at,),
    ).fetchone()[0]
    return int(paused), int(after)


def held_for_approval(tx: Tx, at: str) -> dict[tuple[str, bool], int]:
    """Waiting tasks held for an operator's approval, by (status, due later than `at`), on both paths
    (store/tasks.py `queue_summary` too). Found from the pending approvals (an index; store/control.py
    sets a task's awaiting_approval together with its pending `claim` approval and clears both
    together), so a long queue costs nothing here: the CROSS JOIN walks the approvals, not the queue."""
    rows = tx.execute(
        """SELECT t.status, t.available_at > ?, COUNT(DISTINCT t.id) FROM approvals a CROSS JOIN tasks t
           ON t.id = a.task_id
           WHERE a.status = 'pending' AND a.scope = 'claim' AND t.awaiting_approval = 1
               AND t.status IN ('pending', 'retryable_failure')
           GROUP BY 1, 2""",
        (at,),
    ).fetchall()
    return {(r[0], bool(r[1])): r[2] for r in rows}


def boundary_waiver(conn: Any) -> tuple[str, dict[str, Any]] | None:
    """The newest dispatch_boundary_waived event's time and payload (its partial index: migration 0017); None
    when there is none, or when its payload is no object naming who waived and which dispatcher (an edit:
    `agentd evidence verify` names it; status still answers)."""
    row = conn.execute(
        "SELECT timestamp, payload FROM events WHERE type = 'dispatch_boundary_waived' ORDER BY sequence DESC LIMIT 1"
    ).fetchone()
    if row is None:
        return None
    try:
        payload = json.loads(row[1])
    except (TypeError, ValueError, RecursionError):
        return None
    if not (isinstance(payload, dict) and isinstance(payload.get("by"), str) and type(payload.get("pid")) is int):
        return None
    return row[0], payload


# --- agentd task add (store/tasks.py enqueue_task, insert_task) ---------------------------------------


def enqueue_plain(store: StoreBase, new: dict[str, Any], now: datetime, event_payload: dict[str, Any]) -> int:
    """`enqueue_task` of a task admitted with every default resolved and no approval, workflow, schedule
    or parent (the only tasks the fast `task add` takes): the INSERT and its task_enqueued event."""
    with store.transaction():
        cursor = store.tx.execute(
            """INSERT INTO tasks (task_type, source, subject, description, priority, payload,
                   requested_profile_id, requested_adapter_id, requested_model, skill_ids,
                   evidence_requirements, workflow_id, workflow_state, workflow_iteration,
                   schedule_id, max_attempts, available_at, created_at, updated_at, parent_task_id, delegation_depth,
                   root_task_id, delegation_caps)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL, ?, ?, ?, ?, NULL, 0, NULL, NULL)""",
            (
                new["task_type"],
                new["source"],
                new["subject"],
                new["description"],
                new["priority"],
                dumps(new["payload"]),
                new["requested_profile_id"],
                new["requested_adapter_id"],
                new["requested_model"],
                dumps(list(new["skill_ids"])),
                dumps(new["evidence_requirements"]) if new["evidence_requirements"] is not None else None,
                new["max_attempts"],
                ts(new["available_at"]),
                ts(now),
                ts(now),
            ),
        )
        task_id = int(cursor.lastrowid or 0)
        payload = {
            "task_type": new["task_type"],
            "source": new["source"],
            "priority": new["priority"],
            "available_at": ts(new["available_at"]),
            **event_payload,
        }
        store.tx.event("task_enqueued", now, task_id=task_id, payload=payload)
    return task_id


# --- agentd approvals, approve, deny (store/control.py pending_approvals, resolve_approval) ------------


def resolve_claim(store: StoreBase, task_id: int, by: str, note: str | None, now: datetime, *, approved: bool) -> bool:
    """`resolve_approval` of a task held before its first claim: approved, it may be claimed; denied, it
    ends operator_canceled. False, with nothing written, for anything else (no such task, nothing
    pending, a side-effects approval): the full path answers those."""
    with store.transaction():
        row = store.tx.execute(
            """SELECT a.approval_id, a.scope FROM tasks t JOIN approvals a ON a.task_id = t.id
               WHERE t.id = ? AND a.status = 'pending'""",
            (task_id,),
        ).fetchall()
        if len(row) != 1 or row[0][1] != "claim":
            return False
        decide(store.tx, task_id, row[0][0], "claim", approved=approved, by=by, note=note, now=now)
    return True


def decide(
    tx: Tx, task_id: int, approval_id: str, scope: str, *, approved: bool, by: str, note: str | None, now: datetime
) -> None:
    """A pending approval decided, on both paths (store/control.py `resolve_approval` too): its row and its
    approval_resolved event; a claim approval's task may then be claimed, or, denied, ends
    operator_canceled. What a side-effects approval held back is the caller's to release or refuse."""
    tx.execute(
        """UPDATE approvals SET status = ?, decided_at = ?, decided_by = ?, reason = COALESCE(?, reason)
           WHERE approval_id = ?""",
        ("approved" if approved else "rejected", ts(now), by, note, approval_id),
    )
    payload = {"approval_id": approval_id, "decision": "approved" if approved else "denied", "by": by, "note": note}
    if scope == "side_effects":
        payload["scope"] = scope
    tx.event("approval_resolved", now, task_id=task_id, payload=payload)
    if scope == "claim":
        tx.execute("UPDATE tasks SET awaiting_approval = 0, updated_at = ? WHERE id = ?", (ts(now), task_id))
        if not approved:
            end_waiting(tx, task_id, canceled_outcome(denial(by, note)), now, "agentd")


def denial(by: str, note: str | None) -> str:
    """What a denied task's outcome says."""
    return f"denied by {by}: {note}" if note else f"denied by {by}"


def canceled_outcome(summary: str) -> dict[str, Any]:
    """`TaskOutcome.failure(summary, "operator_canceled")` as the tasks table stores it (its JSON without
    the fields it leaves unset); tests/test_fast_cli.py holds the two equal for any summary."""
    return {
        "status": "operator_canceled",
        "machine_status": MACHINE_STATUS_OF["operator_canceled"],
        "operator_summary": summary,
    }


def end_waiting(tx: Tx, task_id: int, outcome: dict[str, Any], now: datetime, by: str) -> None:
    """A task that is not running ends operator_canceled with `outcome` (a TaskOutcome's stored JSON), and
    waits for no operator any more; the caller holds the transaction (store/tasks.py `cancel_waiting`)."""
    summary = outcome["operator_summary"]
    tx.execute(
        """UPDATE tasks SET status = 'operator_canceled', outcome = ?, finished_at = ?, updated_at = ?
           WHERE id = ?""",
        (dumps(outcome), ts(now), ts(now), task_id),
    )
    tx.event(
        "task_finished", now, task_id=task_id, payload={"status": "operator_canceled", "summary": summary, "by": by}
    )
    # Its pending approval is closed (denied, by whoever canceled it, with the cancel's summary), or
    # `approvals` and the oldest-approval gauge would keep it forever.
    rows = tx.execute(
        """UPDATE approvals SET status = 'rejected', decided_at = ?, decided_by = ?, reason = ?
           WHERE task_id = ? AND status = 'pending' RETURNING approval_id""",
        (ts(now), by, summary, task_id),
    ).fetchall()
    tx.execute("UPDATE tasks SET awaiting_approval = 0 WHERE id = ? AND awaiting_approval = 1", (task_id,))
    for (approval_id,) in rows:
        payload = {"approval_id": approval_id, "decision": "denied", "by": by, "note": f"task canceled: {summary}"}
        tx.event("approval_resolved", now, task_id=task_id, payload=payload)
