"""Constitution proposals (seed 000 §1b): recorded from their outbox entry exactly once, listed for the
operator, and decided by the operator only. Writing SOUL.md/PURPOSE.md is not the store's job: the
decision is recorded here after agentd/control/constitution.py has written the file."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentd.errors import InputError, NotFound
from agentd.hashing import new_ulid
from agentd.records import OutboxEntry
from agentd.store.base import StoreBase, Tx, parse_optional_ts, ts
from agentd.store.outbox import settle, still_pending
from agentd.store.rows import reads

if TYPE_CHECKING:  # pydantic's module
    from agentd.records.constitution import ConstitutionProposalRecord


@reads("constitution proposal", "proposal_id")
def proposal_from_row(row: sqlite3.Row) -> ConstitutionProposalRecord:
    from agentd.records.constitution import ConstitutionProposalRecord  # pydantic's module: loaded where it is used

    fields = dict(row)
    del fields["outbox_key"]
    fields["created_at"] = parse_optional_ts(row["created_at"])
    fields["decided_at"] = parse_optional_ts(row["decided_at"])
    return ConstitutionProposalRecord.model_validate(fields)


def _read(tx: Tx, proposal_id: str) -> ConstitutionProposalRecord:
    row = tx.execute("SELECT * FROM constitution_proposals WHERE proposal_id = ?", (proposal_id,)).fetchone()
    if row is None:
        raise NotFound(f"no constitution proposal {proposal_id!r}; `agentd constitution proposals --all` lists them")
    return proposal_from_row(row)


def _pending(tx: Tx, proposal_id: str) -> ConstitutionProposalRecord:
    proposal = _read(tx, proposal_id)
    if proposal.status != "pending":
        raise InputError(
            f"constitution proposal {proposal_id} is already {proposal.status} "
            f"(by {proposal.decided_by} at {ts(proposal.decided_at)}); nothing was written: only a pending "
            "proposal can be decided"
        )
    return proposal


class ConstitutionVerbs(StoreBase):
    def record_constitution_proposal(self, entry: OutboxEntry, now: datetime) -> str | None:
        """Store the proposal an outbox entry carries and settle the entry, in one transaction; a re-run
        finds the entry settled and does nothing (exactly once). Returns the new proposal's id."""
        with self.transaction():
            if not still_pending(self.tx, entry.outbox_id):
                return None
            proposal_id, payload = new_ulid(self.clock), entry.payload
            self.tx.execute(
                """INSERT INTO constitution_proposals (proposal_id, document, proposed_text, proposed_sha256,
                       base_sha256, reason, task_id, attempt_id, outbox_key, created_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    proposal_id,
                    payload["document"],
                    payload["proposed_text"],
                    payload["proposed_sha256"],
                    payload["base_sha256"],
                    payload["reason"],
                    entry.task_id,
                    entry.attempt_id,
                    entry.idempotency_key,
                    ts(now),
                ),
            )
            self.tx.event(
                "constitution_proposed",
                now,
                task_id=entry.task_id,
                attempt_id=entry.attempt_id,
                payload={
                    "proposal_id": proposal_id,
                    "document": payload["document"],
                    "path": payload.get("path"),
                    "proposed_sha256": payload["proposed_sha256"],
                    "base_sha256": payload["base_sha256"],
                    "reason": payload["reason"][:500],
                },
            )
            settle(self.tx, entry, "applied", {"proposal_id": proposal_id}, now)
        return proposal_id

    def constitution_proposals(self, *, include_decided: bool = False) -> list[ConstitutionProposalRecord]:
        """Pending proposals (or all of them), oldest first."""
        where = "" if include_decided else "WHERE status = 'pending'"
        rows = self.tx.execute(f"SELECT * FROM constitution_proposals {where} ORDER BY created_at, rowid").fetchall()
        return [proposal_from_row(row) for row in rows]

    def get_constitution_proposal(self, proposal_id: str) -> ConstitutionProposalRecord:
        return _read(self.tx, proposal_id)

    def accept_constitution_proposal(
        self,
        proposal_id: str,
        *,
        by: str,
        note: str | None,
        now: datetime,
        write: Callable[[ConstitutionProposalRecord], tuple[str, str]],
    ) -> ConstitutionProposalRecord:
        """Decide it accepted, under the write lock: the proposal is read and found pending, `write` puts
        its text in place and returns the versions it moved between, and the decision is recorded (who,
        when, the versions), with the other pending proposals for the same document, drafted against
        the text it replaced, superseded. A decision racing this one waits for the lock, then finds this
        one; if this one waited, it finds the other's and `write` is never called.

        Hazard: `write` runs inside the transaction (file writes, no SQL); what it raises rolls back."""
        with self.transaction():
            proposal = _pending(self.tx, proposal_id)
            versions = write(proposal)
            self._decide(proposal_id, "accepted", by, note, now, versions)
            superseded = [
                row[0]
                for row in self.tx.execute(
                    """SELECT proposal_id FROM constitution_proposals
                       WHERE status = 'pending' AND document = ? AND base_sha256 != ?""",
                    (proposal.document, proposal.proposed_sha256),
                ).fetchall()
            ]
            for other in superseded:
                self._decide(other, "superseded", by, f"superseded by {proposal_id}", now)
            payload: dict[str, Any] = {
                "proposal_id": proposal_id,
                "document": proposal.document,
                "sha256_before": proposal.base_sha256,
                "sha256_after": proposal.proposed_sha256,
                "version_before": versions[0],
                "version_after": versions[1],
                "by": by,
                "note": note,
                "superseded": superseded,
            }
            self.tx.event(
                "constitution_accepted", now, task_id=proposal.task_id, attempt_id=proposal.attempt_id, payload=payload
            )
            return _read(self.tx, proposal_id)

    def reject_constitution_proposal(
        self, proposal_id: str, *, by: str, reason: str, now: datetime
    ) -> ConstitutionProposalRecord:
        """Record that the operator rejected it, and why; the document is not touched."""
        with self.transaction():
            proposal = _pending(self.tx, proposal_id)
            self._decide(proposal_id, "rejected", by, reason, now)
            self.tx.event(
                "constitution_rejected",
                now,
                task_id=proposal.task_id,
                attempt_id=proposal.attempt_id,
                payload={"proposal_id": proposal_id, "document": proposal.document, "by": by, "reason": reason},
            )
            return _read(self.tx, proposal_id)

    def _decide(
        self,
        proposal_id: str,
        status: str,
        by: str,
        note: str | None,
        now: datetime,
        versions: tuple[str | None, str | None] = (None, None),
    ) -> None:
        self.tx.execute(
            """UPDATE constitution_proposals SET status = ?, decided_at = ?, decided_by = ?, decision_note = ?,
                   version_before = ?, version_after = ?
               WHERE proposal_id = ? AND status = 'pending'""",
            (status, ts(now), by, note, *versions, proposal_id),
        )
