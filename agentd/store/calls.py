"""Tool calls a running attempt's harness asked for (docs/policy.md): every decision on one is a chained
event, and a call an `ask` rule holds waits in `held_calls` until a person (or the timeout) decides.

The dispatcher's gate (agentd/attempt/calls.py) writes the automatic decisions and the held calls and
reads what was decided; `agentd approve --call`, the console and the API decide them here, so a decision
is one transaction with its event whichever way it comes."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from agentd import frozen_value
from agentd.clock import stored_ts
from agentd.errors import InputError, NotFound
from agentd.hashing import new_ulid
from agentd.store.base import StoreBase, Tx, ts

CallStatus = Literal["pending", "allowed", "denied"]
EVENT_OF = {"allowed": "tool_call_allowed", "denied": "tool_call_denied"}
GateEvent = Literal["tool_call_refused", "tool_calls_suppressed", "tool_call_undecided"]


@frozen_value
class HeldCall:
    call_id: str
    task_id: int
    attempt_id: str
    tool: str
    summary: str
    rule: str
    requested_at: datetime
    status: CallStatus = "pending"
    decided_by: str | None = None
    reason: str | None = None
    task_type: str = ""
    subject: str | None = None
    input_json: str | None = None  # the whole input, redacted (migration 0021); None: held before it was kept
    input_chars: int | None = None
    input_sha256: str | None = None  # of exactly input_json, UTF-8

    @property
    def decided(self) -> bool:
        return self.status != "pending"

    def digest(self) -> dict[str, Any]:
        """What ties a decision to the input a person was shown: its length and sha256 (none for a call held
        before inputs were kept)."""
        if self.input_sha256 is None:
            return {}
        return {"input_chars": self.input_chars, "input_sha256": self.input_sha256}


class CallDecided(InputError):
    """The call a decision names was decided already (by a person, or by its timeout)."""


_COLUMNS = """c.call_id, c.task_id, c.attempt_id, c.tool, c.summary, c.rule, c.requested_at, c.status,
              c.decided_by, c.reason, t.task_type, t.subject, c.input_json, c.input_chars, c.input_sha256"""


def _held(row: Any) -> HeldCall:
    call_id, task_id, attempt_id, tool, summary, rule, requested_at, *rest = row
    return HeldCall(call_id, task_id, attempt_id, tool, summary, rule, stored_ts(requested_at), *rest)


class CallVerbs(StoreBase):
    def record_call(self, task_id: int, attempt_id: str, allowed: bool, payload: dict[str, Any], now: datetime) -> None:
        """A decision the policy made on its own (a rule, or the default): its event, durable before the
        harness hears it."""
        with self.transaction():
            event = "tool_call_allowed" if allowed else "tool_call_denied"
            said = payload if allowed else {**payload, "refused_by": "agentd"}  # the other layer: policy_denied
            self.tx.event(event, now, task_id=task_id, attempt_id=attempt_id, payload=said)

    def record_gate_event(
        self, event: GateEvent, task_id: int, attempt_id: str, payload: dict[str, Any], now: datetime
    ) -> None:
        """What the gate says of an attempt's calls beyond each decision: a request it refused unjudged, the
        decisions it only counted, a call that ran without a decision (docs/policy.md)."""
        with self.transaction():
            self.tx.event(event, now, task_id=task_id, attempt_id=attempt_id, payload=payload)

    def record_model_call(self, task_id: int, attempt_id: str, payload: dict[str, Any], now: datetime) -> None:
        """One model call of the attempt through agentd's gateway, as the provider answered it (docs/gateway.md)."""
        with self.transaction():
            self.tx.event("model_call_finished", now, task_id=task_id, attempt_id=attempt_id, payload=payload)

    def record_egress(self, task_id: int, attempt_id: str, payload: dict[str, Any], now: datetime) -> None:
        """One connection the attempt's egress proxy took, allowed or refused (docs/gateway.md)."""
        with self.transaction():
            self.tx.event("egress_connection", now, task_id=task_id, attempt_id=attempt_id, payload=payload)

    def hold_call(self, task_id: int, attempt_id: str, payload: dict[str, Any], now: datetime) -> str:
        """A call an `ask` rule holds: waiting for a person from now (`permission_requested`, which holds the
        payload whole: its input, redacted, with its length and sha256)."""
        with self.transaction():
            call_id = new_ulid(self.clock)
            self.tx.execute(
                """INSERT INTO held_calls (call_id, task_id, attempt_id, tool, summary, rule, requested_at,
                                           input_json, input_chars, input_sha256)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    call_id,
                    task_id,
                    attempt_id,
                    payload["tool"],
                    payload["summary"],
                    payload["rule"],
                    ts(now),
                    *(payload.get(key) for key in ("input_json", "input_chars", "input_sha256")),
                ),
            )
            event_payload = {"call_id": call_id, **payload}
            self.tx.event("permission_requested", now, task_id=task_id, attempt_id=attempt_id, payload=event_payload)
            return call_id

    def decide_call(self, call_id: str, *, allowed: bool, by: str, reason: str | None, now: datetime) -> HeldCall:
        """A person's decision (or the timeout's: `by` says which), once: a call already decided is
        CallDecided, naming who decided it."""
        with self.transaction():
            held = self._held_call(call_id)
            if held.decided:
                raise CallDecided(f"call {call_id} was already {held.status} by {held.decided_by}")
            _decide(self.tx, held, allowed, by, reason, now)
            return self._held_call(call_id)

    def held_call(self, call_id: str) -> HeldCall:
        return self._held_call(call_id)

    def close_calls(self, attempt_id: str, by: str, now: datetime) -> int:
        """The attempt ended with calls still waiting: each is denied (`by`: why), so nothing stays pending."""
        with self.transaction():
            return deny_pending(self.tx, attempt_id, by, now)

    def pending_calls(self) -> list[HeldCall]:
        """Calls waiting for a person, oldest first."""
        rows = self.tx.execute(
            f"SELECT {_COLUMNS} FROM held_calls c JOIN tasks t ON t.id = c.task_id "
            "WHERE c.status = 'pending' ORDER BY c.requested_at, c.rowid"
        ).fetchall()
        return [_held(row) for row in rows]

    def _held_call(self, call_id: str) -> HeldCall:
        row = self.tx.execute(
            f"SELECT {_COLUMNS} FROM held_calls c JOIN tasks t ON t.id = c.task_id WHERE c.call_id = ?", (call_id,)
        ).fetchone()
        if row is None:
            raise NotFound(f"no held tool call {call_id!r}: `agentd approvals` lists the calls that wait")
        return _held(row)


def _decide(tx: Tx, held: HeldCall, allowed: bool, by: str, reason: str | None, now: datetime) -> None:
    status = "allowed" if allowed else "denied"
    tx.execute(
        "UPDATE held_calls SET status = ?, decided_at = ?, decided_by = ?, reason = ? WHERE call_id = ?",
        (status, ts(now), by, reason, held.call_id),
    )
    payload = {
        "call_id": held.call_id,
        "tool": held.tool,
        "summary": held.summary,
        "rule": held.rule,
        **held.digest(),
        "decided_by": by,
        **({"reason": reason} if reason else {}),
        "waited_s": round(max(0.0, (now - held.requested_at).total_seconds()), 3),
        **({} if allowed else {"refused_by": "agentd"}),
    }
    tx.event(EVENT_OF[status], now, task_id=held.task_id, attempt_id=held.attempt_id, payload=payload)


def deny_pending(tx: Tx, attempt_id: str, by: str, now: datetime) -> int:
    """Deny the attempt's calls that still wait, in the caller's transaction: the attempt's end (however it
    ended: a boot sweep's reclaim too) leaves no call pending for a person to answer in vain."""
    rows = tx.execute(
        f"SELECT {_COLUMNS} FROM held_calls c JOIN tasks t ON t.id = c.task_id "
        "WHERE c.attempt_id = ? AND c.status = 'pending'",
        (attempt_id,),
    ).fetchall()
    for row in rows:
        _decide(tx, _held(row), False, by, "the attempt ended before anyone decided", now)
    return len(rows)
