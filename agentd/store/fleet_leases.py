"""This agent's side of the fleet, in its own SQLite (docs/fleet.md): which local task holds which
fleet lease, and what becomes of it.

The fleet's queue on PostgreSQL decides who may run a task (store/fleet.py); this table remembers what
this agent took, so a restart renews, confirms and reports exactly what it holds, with the token it
was given. The task's own record, attempts and evidence are the agent's as always.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentd import frozen_value
from agentd.records import TERMINAL_STATUSES, NewTask
from agentd.store.base import StoreBase, dumps, loads, ts
from agentd.store.tasks import cancel_waiting, insert_task, request_cancel

WAITING = ("pending", "retryable_failure")
COST_CEILING_USD = 1e9  # a stored cost past any real one (written before the usage judge) is not summed


@frozen_value
class Taken:
    """A fleet task this agent claimed, admitted as a local task."""

    new: NewTask
    fleet_id: int
    token: int
    origin: dict[str, Any]


@frozen_value
class HeldLease:
    task_id: int
    fleet_id: int
    token: int
    status: str  # the local task's

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_STATUSES


class FleetLeaseVerbs(StoreBase):
    def record_fleet_claims(self, taken: list[Taken], now: datetime, confirmed_until: datetime) -> list[int]:
        """Each claimed fleet task becomes a local task holding its lease, in one transaction: its
        task_enqueued event carries the fleet id, the token and the dispatch context. The claim itself
        confirmed the lease, until `confirmed_until` (docs/fleet.md)."""
        ids = []
        with self.transaction() as tx:
            for claim in taken:
                fleet = {"fleet_id": claim.fleet_id, "fleet_token": claim.token, "origin": claim.origin}
                task_id = insert_task(tx, claim.new, now, fleet)
                tx.execute(
                    """INSERT INTO fleet_leases (task_id, fleet_id, token, origin, claimed_at, confirmed_at,
                           confirmed_until) VALUES (?, ?, ?, ?, ?, ?, ?)""",
                    (task_id, claim.fleet_id, claim.token, dumps(claim.origin), ts(now), ts(now), ts(confirmed_until)),
                )
                ids.append(task_id)
        return ids

    def fleet_leases_held(self) -> list[HeldLease]:
        """Every lease this agent holds, with its local task's status (finished ones await their report)."""
        rows = self.tx.execute(
            """SELECT f.task_id, f.fleet_id, f.token, t.status FROM fleet_leases f JOIN tasks t ON t.id = f.task_id
               WHERE f.state = 'held' ORDER BY f.task_id"""
        ).fetchall()
        return [HeldLease(*row) for row in rows]

    def fleet_lease_of(self, task_id: int) -> dict[str, Any] | None:
        """The task's fleet lease as `task show` gives it; None for a task that did not come from a fleet."""
        row = self.tx.execute(
            """SELECT fleet_id, token, origin, state, claimed_at, confirmed_at, ended_at, lost_reason
               FROM fleet_leases WHERE task_id = ?""",
            (task_id,),
        ).fetchone()
        if row is None:
            return None
        found = {key: value for key, value in zip(row.keys(), row, strict=True) if value is not None}
        return {**found, "origin": loads(row["origin"])}

    def fleet_leases_confirmed(self, task_ids: list[int], now: datetime, until: datetime) -> int:
        """The fleet renewed these leases just now: a task of theirs may start until `until` (the local
        claim's condition, store/budget.py CONFIRMED). How many wait to run (the dispatcher may claim them)."""
        if not task_ids:
            return 0
        with self.transaction(durable=False) as tx:  # lost to a power cut, the next round confirms again
            tx.rows_in(
                "UPDATE fleet_leases SET confirmed_at = ?, confirmed_until = ? WHERE state = 'held' AND task_id IN "
                "({marks}) RETURNING task_id",
                task_ids,
                ts(now),
                ts(until),
            )
            waiting = tx.rows_in(f"SELECT id FROM tasks WHERE status IN {WAITING} AND id IN ({{marks}})", task_ids)
        return len(waiting)

    def defer_fleet_tasks(self, task_ids: list[int], reason: str, now: datetime) -> None:
        """The fleet could not be asked (PostgreSQL unreachable): these tasks wait, not started, until it
        answers again; local work goes on meanwhile. One event each (the link says it once per outage)."""
        with self.transaction() as tx:
            for task_id in task_ids:
                tx.event("fleet_task_deferred", now, task_id=task_id, payload={"reason": reason})

    def fleet_task_facts(self, task_id: int) -> dict[str, Any]:
        """A finished task as the fleet is told of it (agentd/services/fleet.py adds the evidence pointers): its
        status and summary, attempts, cost, and its last attempt."""
        task = self.tx.execute("SELECT status, attempt_count, outcome FROM tasks WHERE id = ?", (task_id,)).fetchone()
        outcome = loads(task["outcome"]) if task["outcome"] else None
        cost = self.tx.execute(
            "SELECT total(cost_usd) FROM task_attempts WHERE task_id = ? AND cost_usd BETWEEN 0 AND ?",
            (task_id, COST_CEILING_USD),
        ).fetchone()[0]
        last = self.tx.execute(
            "SELECT attempt_id FROM task_attempts WHERE task_id = ? ORDER BY attempt_number DESC LIMIT 1", (task_id,)
        ).fetchone()
        return {
            "task_id": task_id,
            "status": task["status"],
            "summary": outcome.get("operator_summary") if isinstance(outcome, dict) else None,
            "attempts": task["attempt_count"],
            "cost_usd": round(cost, 6),
            "attempt_id": last[0] if last else None,
        }

    def fleet_lease_reported(self, task_id: int, fleet_status: str, now: datetime) -> None:
        with self.transaction():
            row = self.tx.execute(
                "UPDATE fleet_leases SET state = 'reported', ended_at = ? WHERE task_id = ? AND state = 'held' "
                "RETURNING fleet_id, token",
                (ts(now), task_id),
            ).fetchone()
            if row is not None:
                payload = {"fleet_id": row[0], "fleet_token": row[1], "fleet_status": fleet_status}
                self.tx.event("fleet_result_reported", now, task_id=task_id, payload=payload)

    def drop_fleet_leases(self, reason: str, now: datetime) -> int:
        """Every lease still held is lost (an agent whose [fleet] was removed: no one can renew or confirm
        them); their tasks that wait end operator_canceled. How many."""
        held = [lease.task_id for lease in self.fleet_leases_held()]
        for task_id in held:
            self.fleet_lease_lost(task_id, reason, now)
        return len(held)

    def fleet_lease_lost(self, task_id: int, reason: str, now: datetime) -> str | None:
        """The fleet refused this lease's token: the lease is lost. A task still waiting here ends
        operator_canceled; a running one is asked to stop (its result would not count). Returns what
        was done to the task: "canceled", "requested" or None (it had finished)."""
        with self.transaction():
            row = self.tx.execute(
                """UPDATE fleet_leases SET state = 'lost', ended_at = ?, lost_reason = ?
                   WHERE task_id = ? AND state = 'held' RETURNING fleet_id, token""",
                (ts(now), reason, task_id),
            ).fetchone()
            if row is None:
                return None
            payload = {"fleet_id": row[0], "fleet_token": row[1], "reason": reason}
            self.tx.event("fleet_lease_lost", now, task_id=task_id, payload=payload)
            status = self.tx.execute("SELECT status FROM tasks WHERE id = ?", (task_id,)).fetchone()[0]
            if status in WAITING:
                from agentd.records import TaskOutcome  # pydantic's, loaded only when a lease is lost

                outcome = TaskOutcome.failure(f"the fleet lease was lost: {reason}", "operator_canceled")
                cancel_waiting(self.tx, task_id, outcome, now, by="fleet")
                return "canceled"
            if status == "running":
                request_cancel(self.tx, task_id, now, by="fleet")
                return "requested"
            return None
