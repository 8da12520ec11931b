"""A proposed revision of the agent's constitution (seed 000 §1b), as the operator reviews it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentd.records.base import Record, Timestamp

ProposalStatus = Literal["pending", "accepted", "rejected", "superseded"]
Document = Literal["soul", "purpose"]


class ConstitutionProposalRecord(Record):
    """agentd: one outcome's proposal, stored when its outbox entry is applied; only the operator
    decides it (`agentd constitution accept|reject`)."""

    schema_id = "agent-runtime/constitution.proposal/v1"
    proposal_id: str
    document: Document
    proposed_text: str
    proposed_sha256: str
    base_sha256: str = Field(description="the document's hash the agent proposed against (its bundle's)")
    reason: str
    task_id: int
    attempt_id: str
    status: ProposalStatus
    created_at: Timestamp
    decided_at: Timestamp | None = None
    decided_by: str | None = None
    decision_note: str | None = None
    version_before: str | None = Field(default=None, description="accepted: [constitution] version it replaced")
    version_after: str | None = Field(default=None, description="accepted: [constitution] version it set")
