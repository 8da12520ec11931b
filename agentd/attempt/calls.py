"""The attempt's tool calls, decided by the dispatcher while the attempt runs (docs/policy.md).

A `CallGate` serves the attempt's policy socket (`policy.sock` in its run dir) for as long as the attempt
runs. The harness's PreToolUse hook (agentd/process/hook.py), or a script's `agentd ask`, sends one call;
the gate checks the peer's credentials (the attempt's user), judges the call by the profile's effective
policy (agentd/config/tool_policy.py), records the decision as a chained event, and answers allow or
deny. A call an `ask` rule matches is held: `permission_requested`, a row in `held_calls`, the attempt's
timeout paused (RunTimer), until a person decides or `[policy] ask_timeout_s` passes and it is denied.

The attempt can ask, never decide: the socket has no verb but "judge this call", every answer comes from
the policy or a person, and an answer goes only to the connection that asked. A harness's request is
admitted only for a call the harness itself announced (claude's `tool_use` id in its stream, through the
attempt's CallLedger), once; any other request is refused, recorded once and counted. What one attempt
can make the gate do is bounded: its held time in all (`[policy] max_held_s`), the decisions recorded as
events (`[policy] max_recorded_decisions`; the rest are counted in one `tool_calls_suppressed`), and the
log lines a misbehaving peer causes (a hang-up is a debug line, refused peers one line a minute).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import socket
import struct
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from agentd.adapters.activity import EventText
from agentd.adapters.posture import claude_would_allow
from agentd.attempt.ledger import CallLedger
from agentd.attempt.live import redacting
from agentd.attempt.prepare import Prepared
from agentd.clock import Clock, age, format_ts
from agentd.config.settings import PolicySection
from agentd.config.tool_policy import COMMAND_KEYS, PATH_KEYS, URL_KEYS, Call, Policy, Ruling, command_of, decide
from agentd.errors import contained
from agentd.hashing import sha256_hex
from agentd.process.hook import HELD, REQUEST_MAX_BYTES
from agentd.process.timer import POLICY_VIOLATION as VIOLATION
from agentd.process.timer import RunTimer
from agentd.process.wake import Doorbell
from agentd.store import AsyncStore, CallDecided, GateEvent, Store

logger = logging.getLogger(__name__)

MAX_CONNECTIONS = 16  # at once, per attempt: more are closed unanswered (the hook then denies)
MAX_HELD = 8  # calls waiting for a person at once, per attempt: more are denied
READ_WITHIN_S = 10.0  # a request that does not arrive whole in this long is dropped
DECISION_POLL_S = 1.0  # a held call's row is read at least this often (the doorbell rings sooner)
SUMMARY_CHARS = 500
HELD_INPUT_MAX_CHARS = 4096  # of a held call's input as canonical JSON: what every surface can show whole
MAX_TRACED_DECISIONS = 1000  # per attempt, in its diagnostics and action trace; the events hold every one
ANNOUNCE_WAIT_S = 2.0  # claude prints a call's tool_use line ~50 ms before it runs the hook: waited for this long
REFUSED_LOG_EVERY_S = 60.0  # refused peers are logged at most once a minute, with a count
HARNESSES = ("claude-code", "codex")


def peer(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end (SO_PEERCRED: the kernel's word, not the peer's)."""
    pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid, uid


@contextlib.contextmanager
def folder_fd(path: Path) -> Iterator[str]:
    """`path` as /proc/self/fd/N/name: a unix socket's address holds 108 bytes, a run dir can be deeper."""
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def ruling_for(policy: Policy, request: dict[str, Any], workspace: str, cwd: str) -> tuple[Call, Ruling]:
    """The call a request describes (`cwd`: where the attempt runs, when the request does not say) and
    what the policy says of it: the gate's judgement, and `agentd policy test`'s."""
    given, said = request.get("input"), request.get("cwd")
    call = Call(
        request["tool"],
        given if isinstance(given, dict) else {},
        workspace,
        said if isinstance(said, str) and said else cwd,
    )
    return call, decide(policy, call)


def summary(tool: str, tool_input: dict[str, Any], event_text: EventText) -> str:
    """What a person judges a call by: the tool and its command, path or URL (else its input), redacted, on
    one line with every blank shown (agentd/edge.py `visible_cut`); a cut one ends with how much is left out
    and the sha256 of the whole input every surface shows beside it (docs/policy.md, "Asking a person")."""
    whole, name = held_input(tool_input, event_text), event_text(tool, 100)
    note = f"; input sha256 {whole['input_sha256'][:12]}…" if whole["input_sha256"] else ""
    for keys in (COMMAND_KEYS, PATH_KEYS, URL_KEYS):
        found = next((tool_input[k] for k in keys if isinstance(tool_input.get(k), str)), None)
        if found is not None:
            return f"{name}: {event_text(found, SUMMARY_CHARS, note)}"
    if whole["input_json"] is None:
        return f"{name}: {event_text.value(tool_input, SUMMARY_CHARS)}"
    return f"{name}: {event_text(whole['input_json'], SUMMARY_CHARS, note)}"


def held_input(tool_input: dict[str, Any], event_text: EventText) -> dict[str, Any]:
    """A call's whole input as a held call keeps it: `input_json`, the canonical JSON text of the redacted
    input, its length (`input_chars`) and the sha256 of exactly that text; each None when the input is not
    JSON agentd can write (nested too deep)."""
    try:
        text = event_text.canonical(tool_input)
    except (ValueError, RecursionError):
        return dict.fromkeys(("input_json", "input_chars", "input_sha256"))
    return {"input_json": text, "input_chars": len(text), "input_sha256": sha256_hex(text.encode())}


def why_not_held(whole: dict[str, Any], waiting: int) -> str | None:
    """Why a call an `ask` rule matched is denied rather than held (its input cannot be shown whole on every
    surface, or MAX_HELD calls wait already), or None."""
    if whole["input_json"] is None:
        return "denied: its input is not JSON agentd can show a person (nested too deep), so it is not held"
    if whole["input_chars"] > HELD_INPUT_MAX_CHARS:
        return (
            f"denied: its input is {whole['input_chars']:,} characters as JSON, more than the "
            f"{HELD_INPUT_MAX_CHARS:,} a person can be shown whole, so it is not held (docs/policy.md)"
        )
    if waiting >= MAX_HELD:
        return f"denied: {MAX_HELD} calls of this attempt already wait for a person"
    return None


@dataclass
class Counts:
    """What the gate did with the attempt's calls beyond what it recorded one by one."""

    recorded: int = 0  # decisions written as events
    suppressed: int = 0  # decisions past [policy] max_recorded_decisions: made, counted, not written
    refused: int = 0  # requests refused unjudged (not from the harness's own tool loop)
    refused_logged_at: float = -math.inf
    refused_since_log: int = 0


class CallGate:
    def __init__(
        self, prepared: Prepared, section: PolicySection, db: AsyncStore, clock: Clock, doorbell: Doorbell
    ) -> None:
        """The gate of a prepared attempt with a hook: its tool policy, its redactor and its harness's ledger are
        the attempt's own (`prepared`); `section`: the config's [policy]."""
        self.prepared, self.policy, self.section = prepared, prepared.policy.tools, section
        self.ask_timeout_s = section.ask_timeout_s
        self.db, self.clock, self.doorbell, self.event_text = db, clock, doorbell, redacting(prepared.redactor)
        self.timer: RunTimer = prepared.ctx.timer
        assert prepared.ctx.hook is not None
        self.path = prepared.ctx.hook.socket
        user = prepared.ctx.user
        self.uid = user.uid if user is not None else os.getuid()
        self.workspace = os.path.realpath(prepared.ctx.workspace)
        self.kind = prepared.ctx.adapter.kind
        self.ledger: CallLedger | None = None
        if self.kind in HARNESSES:  # every call its stream reports is held to a decision
            self.ledger = CallLedger(self.kind, lambda _: self.timer.end(VIOLATION, at_once=True))
        self.listener: socket.socket | None = None
        self.connections = 0
        self.held: dict[str, tuple[str, float]] = {}  # call id → (summary, since): what status shows
        self.decided: list[dict[str, Any]] = []  # every answer, in order, for the action trace
        self.counts = Counts()

    def open(self) -> None:
        """Bind the socket before the attempt starts (so it exists when the first call comes, and nothing the
        attempt made can sit at its name); a failure here fails the attempt, never runs it unguarded."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
        try:
            with folder_fd(self.path) as address:
                listener.bind(address)
            user = self.prepared.ctx.user
            if user is not None:  # the run user's group may connect; no one else reaches the run dir
                os.chown(self.path, -1, user.gid, follow_symlinks=False)
            os.chmod(self.path, 0o660 if user is not None else 0o600)
            listener.listen(MAX_CONNECTIONS)
        except BaseException:
            listener.close()
            raise
        self.listener = listener

    async def serve(self) -> None:
        """Answer calls until cancelled (the attempt ended)."""
        assert self.listener is not None
        loop = asyncio.get_running_loop()
        async with anyio.create_task_group() as answering:
            while True:
                conn, _ = await loop.sock_accept(self.listener)
                if self.connections >= MAX_CONNECTIONS:
                    conn.close()
                    continue
                self.connections += 1
                answering.start_soon(self._answer, conn)

    def findings(self) -> dict[str, Any]:
        """What the attempt's diagnostics say of its calls beyond each decision (docs/policy.md)."""
        found: dict[str, Any] = {}
        if self.ledger is not None:
            found["tool_calls_reported"] = self.ledger.calls
            if violations := self.ledger.ended():
                found["policy_violations"] = list(violations)
        if self.counts.suppressed:
            found["tool_calls_suppressed"] = self.counts.suppressed
        if self.counts.refused:
            found["tool_calls_refused"] = self.counts.refused
        return found

    async def close(self) -> None:
        """The attempt ended: the socket goes, any call still held is denied (nothing stays pending), and what
        was only counted is said once."""
        if self.listener is not None:
            self.listener.close()
            with contextlib.suppress(OSError):
                self.path.unlink()
        with anyio.CancelScope(shield=True), contained(logger, "held calls of %s not closed", self.prepared.attempt_id):
            await self.db.call(Store.close_calls, self.prepared.attempt_id, "attempt ended", self.clock.now())
            await self._said_at_end()

    async def _said_at_end(self) -> None:
        task_id, attempt_id = self.prepared.task.task_id, self.prepared.attempt_id
        found: list[tuple[GateEvent, dict[str, Any]]] = []
        if self.counts.suppressed:
            found.append(("tool_calls_suppressed", {"count": self.counts.suppressed, "recorded": self.counts.recorded}))
        for violation in self.ledger.violations if self.ledger is not None else []:
            found.append(("tool_call_undecided", violation))
        for event, payload in found:
            await self.db.call(Store.record_gate_event, event, task_id, attempt_id, payload, self.clock.now())

    def waiting(self) -> str | None:
        """`waiting for a decision on Bash: git push … (2m)`, the oldest held call, or None."""
        if not self.held:
            return None
        text, since = min(self.held.values(), key=lambda held: held[1])
        return f"waiting for a decision on {text} ({age(anyio.current_time() - since)})"

    async def _answer(self, conn: socket.socket) -> None:
        try:
            with conn, contained(logger, "a tool call of attempt %s was not answered", self.prepared.attempt_id):
                _, uid = peer(conn)
                if uid != self.uid:
                    await self._refuse(f"a peer with uid {uid} (the attempt runs as {self.uid})")
                    return
                answer = await self._answer_to(conn, await self._request(conn))
                await _said(conn, json.dumps(answer).encode() + b"\n")
        finally:
            self.connections -= 1

    async def _answer_to(self, conn: socket.socket, request: dict[str, Any] | str) -> dict[str, Any]:
        if isinstance(request, str):
            return _deny(request)
        if self.ledger is not None and self.ledger.violations:
            return _deny("this attempt is being ended: a tool call ran without agentd's decision")
        problem = await self._admitted(request)
        if problem is not None:
            await self._refuse(problem)
            return _deny(problem)
        return await self.judge(request, self._held_said(conn))

    def _held_said(self, conn: socket.socket) -> Callable[[], Awaitable[None]]:
        """What tells the hook its call waits for a person (it gives up on a dispatcher that says nothing)."""

        async def said() -> None:
            await _said(conn, HELD + b"\n")

        return said

    async def _admitted(self, request: dict[str, Any]) -> str | None:
        """Why a harness's request is not judged (None: it is): not a call the harness announced, or one
        already decided."""
        if self.kind != "claude-code" or self.ledger is None:
            return None  # codex's tools cannot reach the socket (its sandbox); a script asks for itself
        call_id = request.get("tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            return "the call names no tool_use_id claude announced"
        announced = await self.ledger.announcement(call_id[:200], ANNOUNCE_WAIT_S)
        if announced is None:
            return f"claude announced no tool call {call_id[:80]!r} in its stream"
        if announced != request["tool"]:
            return f"claude announced {call_id[:80]!r} as {announced[:80]}, not {str(request['tool'])[:80]}"
        if self.ledger.decision(call_id[:200]) is not None:
            return f"tool call {call_id[:80]!r} was decided already"
        return None

    async def _refuse(self, why: str) -> None:
        """A request not from the harness's own tool loop: refused unjudged, recorded once, logged once a minute."""
        counts = self.counts
        counts.refused += 1
        counts.refused_since_log += 1
        now = anyio.current_time()
        if now - counts.refused_logged_at >= REFUSED_LOG_EVERY_S:
            logger.warning(
                "policy socket of attempt %s: %d request(s) refused unjudged, the last: %s",
                self.prepared.attempt_id,
                counts.refused_since_log,
                why,
            )
            counts.refused_logged_at, counts.refused_since_log = now, 0
        if counts.refused == 1:
            task_id, attempt_id = self.prepared.task.task_id, self.prepared.attempt_id
            payload = {"reason": why[:500], "note": "later refusals are counted in the attempt's diagnostics"}
            refused: GateEvent = "tool_call_refused"
            await self.db.call(Store.record_gate_event, refused, task_id, attempt_id, payload, self.clock.now())

    async def _request(self, conn: socket.socket) -> dict[str, Any] | str:
        """The call, or why it cannot be judged."""
        loop, data = asyncio.get_running_loop(), b""
        with anyio.move_on_after(READ_WITHIN_S):
            while b"\n" not in data and len(data) <= REQUEST_MAX_BYTES:
                chunk = await loop.sock_recv(conn, 65536)
                if not chunk:
                    break
                data += chunk
        line = data.split(b"\n", 1)[0]
        if b"\n" not in data:
            return "the call did not arrive whole (one JSON line of at most 1 MiB)"
        try:
            request = json.loads(line)
        except (ValueError, RecursionError):
            return "the call is not JSON"
        if not isinstance(request, dict) or not isinstance(request.get("tool"), str) or not request["tool"]:
            return "the call names no tool"
        return request

    async def judge(
        self, request: dict[str, Any], on_hold: Callable[[], Awaitable[None]] | None = None
    ) -> dict[str, Any]:
        """The answer to one call: the policy's, or (an `ask` rule) a person's. `on_hold`: told when the call
        starts to wait for a person."""
        call, ruling = await anyio.to_thread.run_sync(  # it resolves paths: the disk
            ruling_for, self.policy, request, self.workspace, str(self.prepared.ctx.cwd)
        )
        tool_input = dict(call.input)
        call_id = str(request["tool_use_id"])[:200] if request.get("tool_use_id") else None
        payload = {
            "tool": call.tool[:200],
            "summary": summary(call.tool[:200], tool_input, self.event_text),
            "rule": ruling.describe(),
            **({"tool_use_id": call_id} if call_id else {}),
            **({"harness": str(request["harness"])[:40]} if request.get("harness") else {}),
        }
        requested_at = self.clock.now()
        if ruling.decision == "ask":
            answer = await self._hold(ruling, payload, tool_input, on_hold)
        else:
            answer = {"decision": ruling.decision, "reason": ruling.reason, "by": "policy"}
            decided = {**payload, "decided_by": "policy", "reason": ruling.reason}
            await self._record(ruling.decision == "allow", decided)
        if answer["decision"] == "allow" and claude_would_allow(self.prepared.ctx.adapter, call):
            answer["explicit"] = True  # claude allows nothing of its own under a policy (agentd/adapters/posture.py)
        if self.ledger is not None:
            self.ledger.decide(call_id, answer["decision"] == "allow", command_of(call))
        return self._noted(payload, requested_at, answer)

    async def _record(self, allowed: bool, decided: dict[str, Any]) -> None:
        """An automatic decision's event, durable before the harness hears it, while the attempt's events
        last ([policy] max_recorded_decisions); past that, counted (`tool_calls_suppressed` at the end)."""
        if self.counts.recorded >= self.section.max_recorded_decisions:
            self.counts.suppressed += 1
            return
        self.counts.recorded += 1
        task_id, attempt_id = self.prepared.task.task_id, self.prepared.attempt_id
        await self.db.call(Store.record_call, task_id, attempt_id, allowed, decided, self.clock.now())

    def _noted(self, payload: dict[str, Any], requested_at: datetime, answer: dict[str, Any]) -> dict[str, Any]:
        """Keep the decision for the attempt's sealed action trace (docs/policy.md, "What the evidence
        records"): a call codex blocked leaves nothing in its own stream."""
        if len(self.decided) < MAX_TRACED_DECISIONS:
            self.decided.append(
                {
                    "tool": payload["tool"],
                    "summary": payload["summary"],
                    "rule": payload["rule"],
                    "decision": answer["decision"],
                    "decided_by": answer["by"],
                    "requested_at": format_ts(requested_at),
                    "decided_at": format_ts(self.clock.now()),
                }
            )
        return answer

    async def _hold(
        self,
        ruling: Ruling,
        payload: dict[str, Any],
        tool_input: dict[str, Any],
        on_hold: Callable[[], Awaitable[None]] | None,
    ) -> dict[str, Any]:
        """A person's answer to the call, held with its whole input (docs/policy.md, "Asking a person"), or the
        policy's denial, saying why no one is asked (`why_not_held`, `_unheld`)."""
        whole = held_input(tool_input, self.event_text)
        reason = why_not_held(whole, len(self.held)) or self._unheld()
        if reason is not None:
            digest = {"input_chars": whole["input_chars"], "input_sha256": whole["input_sha256"]}
            await self._record(False, {**payload, **digest, "decided_by": "policy", "reason": reason})
            return {"decision": "deny", "reason": reason, "by": "policy"}
        task_id, attempt_id = self.prepared.task.task_id, self.prepared.attempt_id
        call_id = await self.db.call(Store.hold_call, task_id, attempt_id, {**payload, **whole}, self.clock.now())
        self.counts.recorded += 1
        self.held[call_id] = (payload["summary"], anyio.current_time())
        within_s = min(self.ask_timeout_s, self.section.held_budget_s - self.timer.held_total_s())
        self.timer.hold()
        try:
            if on_hold is not None:
                await on_hold()
            held = await self._decision(call_id, within_s)
        finally:
            self.timer.release()
            self.held.pop(call_id, None)
        allowed = held.status == "allowed"
        reason = held.reason or f"{held.status} by {held.decided_by}"
        if not allowed and held.decided_by != "timeout":
            reason = f"denied by {held.decided_by}: {held.reason}" if held.reason else f"denied by {held.decided_by}"
        return {"decision": "allow" if allowed else "deny", "reason": reason, "by": held.decided_by, "explicit": True}

    def _unheld(self) -> str | None:
        """Why this attempt can have no more calls wait for a person (None: it can)."""
        if self.counts.recorded >= self.section.max_recorded_decisions:
            most = self.section.max_recorded_decisions
            return f"denied: this attempt's calls passed [policy] max_recorded_decisions = {most}"
        if self.section.held_budget_s - self.timer.held_total_s() < 1:
            return (
                f"denied: this attempt's calls have waited for people {self.section.held_budget_s:g}s in all "
                "([policy] max_held_s); no more are held"
            )
        return None

    async def _decision(self, call_id: str, within_s: float) -> Any:
        """The held call once decided: by a person, or denied here when `within_s` passes (ask_timeout_s, or
        what is left of the attempt's held time)."""
        late = (
            f"no one decided within [policy] ask_timeout_s = {self.ask_timeout_s:g}s"
            if within_s >= self.ask_timeout_s
            else "no one decided before this attempt's time for people ran out ([policy] max_held_s)"
        )
        return await decision_on(self.db, self.doorbell, self.clock, call_id, within_s, late)


async def decision_on(
    db: AsyncStore, doorbell: Doorbell, clock: Clock, call_id: str, within_s: float, late: str
) -> Any:
    """A held call once decided: by a person, or denied by `timeout` (saying `late`) when `within_s` passes. Its
    row is read as the doorbell rings, at least every DECISION_POLL_S."""
    ends = anyio.current_time() + within_s
    while True:
        held = await db.read(Store.held_call, call_id)
        if held.decided:
            return held
        left = ends - anyio.current_time()
        if left <= 0:
            with contextlib.suppress(CallDecided):  # decided by a person meanwhile: read below
                await db.call(Store.decide_call, call_id, allowed=False, by="timeout", reason=late, now=clock.now())
            return await db.read(Store.held_call, call_id)
        await doorbell.wait(min(DECISION_POLL_S, left))


async def _said(conn: socket.socket, line: bytes) -> None:
    """Send to a hook that may have gone (killed, or a peer that hung up): that is its business, a debug line."""
    try:
        await asyncio.get_running_loop().sock_sendall(conn, line)
    except (BrokenPipeError, ConnectionResetError) as exc:
        logger.debug("policy socket: the peer hung up before its answer (%s)", exc)


def _deny(problem: str) -> dict[str, Any]:
    return {"decision": "deny", "reason": f"agentd denied this call: {problem}", "by": "policy"}
