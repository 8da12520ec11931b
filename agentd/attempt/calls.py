"""The attempt's tool calls, decided by the dispatcher while the attempt runs (docs/policy.md).

A `CallGate` serves the attempt's policy socket (`policy.sock` in its run dir) for as long as the attempt
runs. The harness's PreToolUse hook (agentd/process/hook.py), or a script's `agentd ask`, sends one call;
the gate checks the peer's credentials (the attempt's user), judges the call by the profile's effective
policy (agentd/config/tool_policy.py), records the decision as a chained event, and answers allow or
deny. A call an `ask` rule matches is held: `permission_requested`, a row in `held_calls`, the attempt's
timeout paused (RunTimer), until a person decides or `[policy] ask_timeout_s` passes and it is denied.

The attempt can ask, never decide: the socket has no verb but "judge this call", every answer comes from
the policy or a person, and an answer goes only to the connection that asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import struct
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from agentd.adapters.activity import Shown
from agentd.attempt.prepare import Prepared
from agentd.clock import Clock, age, format_ts
from agentd.config.tool_policy import COMMAND_KEYS, PATH_KEYS, URL_KEYS, Call, Policy, Ruling, decide
from agentd.errors import contained
from agentd.hashing import sha256_hex
from agentd.process.hook import REQUEST_MAX_BYTES
from agentd.process.runner import RunTimer
from agentd.process.wake import Doorbell
from agentd.store import AsyncStore, Store
from agentd.store.calls import CallDecided

logger = logging.getLogger(__name__)

MAX_CONNECTIONS = 16  # at once, per attempt: more are closed unanswered (the hook then denies)
MAX_HELD = 8  # calls waiting for a person at once, per attempt: more are denied
READ_WITHIN_S = 10.0  # a request that does not arrive whole in this long is dropped
DECISION_POLL_S = 1.0  # a held call's row is read at least this often (the doorbell rings sooner)
SUMMARY_CHARS = 500
HELD_INPUT_MAX_CHARS = 4096  # of a held call's input as canonical JSON: what every surface can show whole
MAX_TRACED_DECISIONS = 1000  # per attempt, in its diagnostics and action trace; the events hold every one


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


def summary(tool: str, tool_input: dict[str, Any], shown: Shown) -> str:
    """What a person judges a call by: the tool and its command, path or URL (else its input), redacted, on
    one line with every blank shown (agentd/edge.py `visible_cut`); a cut one ends with how much is left out
    and the sha256 of the whole input every surface shows beside it (docs/policy.md, "Asking a person")."""
    whole, name = held_input(tool_input, shown), shown(tool, 100)
    note = f"; input sha256 {whole['input_sha256'][:12]}…" if whole["input_sha256"] else ""
    for keys in (COMMAND_KEYS, PATH_KEYS, URL_KEYS):
        found = next((tool_input[k] for k in keys if isinstance(tool_input.get(k), str)), None)
        if found is not None:
            return f"{name}: {shown(found, SUMMARY_CHARS, note)}"
    if whole["input_json"] is None:
        return f"{name}: {shown.value(tool_input, SUMMARY_CHARS)}"
    return f"{name}: {shown(whole['input_json'], SUMMARY_CHARS, note)}"


def held_input(tool_input: dict[str, Any], shown: Shown) -> dict[str, Any]:
    """A call's whole input as a held call keeps it: `input_json`, the canonical JSON text of the redacted
    input, its length (`input_chars`) and the sha256 of exactly that text; each None when the input is not
    JSON agentd can write (nested too deep)."""
    try:
        text = shown.canonical(tool_input)
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


class CallGate:
    def __init__(
        self,
        prepared: Prepared,
        policy: Policy,
        ask_timeout_s: float,
        db: AsyncStore,
        clock: Clock,
        doorbell: Doorbell,
        timer: RunTimer,
        shown: Shown,
    ) -> None:
        self.prepared, self.policy, self.ask_timeout_s = prepared, policy, ask_timeout_s
        self.db, self.clock, self.doorbell, self.timer, self.shown = db, clock, doorbell, timer, shown
        assert prepared.ctx.hook is not None
        self.path = prepared.ctx.hook.socket
        user = prepared.ctx.user
        self.uid = user.uid if user is not None else os.getuid()
        self.workspace = os.path.realpath(prepared.ctx.workspace)
        self.listener: socket.socket | None = None
        self.connections = 0
        self.held: dict[str, tuple[str, float]] = {}  # call id → (summary, since): what status shows
        self.decided: list[dict[str, Any]] = []  # every answer, in order, for the action trace

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

    async def close(self) -> None:
        """The attempt ended: the socket goes, and any call still held is denied (nothing stays pending)."""
        if self.listener is not None:
            self.listener.close()
            with contextlib.suppress(OSError):
                self.path.unlink()
        with anyio.CancelScope(shield=True), contained(logger, "held calls of %s not closed", self.prepared.attempt_id):
            await self.db.call(Store.close_calls, self.prepared.attempt_id, "attempt ended", self.clock.now())

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
                    logger.warning(
                        "policy socket: a peer with uid %d was refused (the attempt runs as %d)", uid, self.uid
                    )
                    return
                request = await self._request(conn)
                answer = await self.judge(request) if isinstance(request, dict) else _deny(request)
                await asyncio.get_running_loop().sock_sendall(conn, json.dumps(answer).encode() + b"\n")
        finally:
            self.connections -= 1

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

    async def judge(self, request: dict[str, Any]) -> dict[str, Any]:
        """The answer to one call: the policy's, or (an `ask` rule) a person's."""
        call, ruling = await anyio.to_thread.run_sync(  # it resolves paths: the disk
            ruling_for, self.policy, request, self.workspace, str(self.prepared.ctx.cwd)
        )
        tool_input = dict(call.input)
        payload = {
            "tool": call.tool[:200],
            "summary": summary(call.tool[:200], tool_input, self.shown),
            "rule": ruling.describe(),
            **({"tool_use_id": str(request["tool_use_id"])[:200]} if request.get("tool_use_id") else {}),
            **({"harness": str(request["harness"])[:40]} if request.get("harness") else {}),
        }
        requested_at = self.clock.now()
        if ruling.decision == "ask":
            return self._noted(payload, requested_at, await self._hold(ruling, payload, tool_input))
        allowed = ruling.decision == "allow"
        task_id, attempt_id = self.prepared.task.task_id, self.prepared.attempt_id
        decided = {**payload, "decided_by": "policy", "reason": ruling.reason}
        await self.db.call(Store.record_call, task_id, attempt_id, allowed, decided, self.clock.now())
        answer = {"decision": ruling.decision, "reason": ruling.reason, "by": "policy"}
        return self._noted(payload, requested_at, answer)

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

    async def _hold(self, ruling: Ruling, payload: dict[str, Any], tool_input: dict[str, Any]) -> dict[str, Any]:
        """A person's answer to the call, held with its whole input (docs/policy.md, "Asking a person"), or the
        policy's denial, saying why no one is asked (`why_not_held`)."""
        whole = held_input(tool_input, self.shown)
        task_id, attempt_id = self.prepared.task.task_id, self.prepared.attempt_id
        reason = why_not_held(whole, len(self.held))
        if reason is not None:
            digest = {"input_chars": whole["input_chars"], "input_sha256": whole["input_sha256"]}
            decided = {**payload, **digest, "decided_by": "policy", "reason": reason}
            await self.db.call(Store.record_call, task_id, attempt_id, False, decided, self.clock.now())
            return {"decision": "deny", "reason": reason, "by": "policy"}
        call_id = await self.db.call(Store.hold_call, task_id, attempt_id, {**payload, **whole}, self.clock.now())
        self.held[call_id] = (payload["summary"], anyio.current_time())
        self.timer.hold()
        try:
            held = await self._decision(call_id)
        finally:
            self.timer.release()
            self.held.pop(call_id, None)
        allowed = held.status == "allowed"
        reason = held.reason or f"{held.status} by {held.decided_by}"
        if not allowed and held.decided_by != "timeout":
            reason = f"denied by {held.decided_by}: {held.reason}" if held.reason else f"denied by {held.decided_by}"
        return {"decision": "allow" if allowed else "deny", "reason": reason, "by": held.decided_by, "explicit": True}

    async def _decision(self, call_id: str) -> Any:
        """The held call once decided: by a person, or denied here when ask_timeout_s passes."""
        ends = anyio.current_time() + self.ask_timeout_s
        while True:
            held = await self.db.read(Store.held_call, call_id)
            if held.decided:
                return held
            left = ends - anyio.current_time()
            if left <= 0:
                reason = f"no one decided within [policy] ask_timeout_s = {self.ask_timeout_s:g}s"
                with contextlib.suppress(CallDecided):  # decided by a person meanwhile: read below
                    await self.db.call(
                        Store.decide_call, call_id, allowed=False, by="timeout", reason=reason, now=self.clock.now()
                    )
                return await self.db.read(Store.held_call, call_id)
            await self.doorbell.wait(min(DECISION_POLL_S, left))


def _deny(problem: str) -> dict[str, Any]:
    return {"decision": "deny", "reason": f"agentd denied this call: {problem}", "by": "policy"}
