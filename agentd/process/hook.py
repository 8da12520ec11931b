"""The tool-call hook: what claude-code's and codex's PreToolUse hook runs (docs/policy.md).

Run as a script (`python -I …/hook.py claude --socket PATH --within S`), so it loads nothing of agentd
but this file and the standard library: a harness starts it once per tool call. It reads the harness's
one JSON object from stdin, asks the dispatcher over the attempt's policy socket, and answers the
harness in its PreToolUse format. It always answers, and answers deny on anything but the dispatcher's
allow: both harnesses run the call when a hook exits 1 or passes its timeout (they fail open), so this
program never does either. It never answers `ask` (claude headless denies it, codex ignores it): a
held call waits here, and the answer is allow or deny.

The dispatcher answers at once or says `{"held": true}` first (a person decides the call): a dispatcher
that says neither within FIRST_WORD_S (stopped, overloaded, restarting) is a deny, never a long wait. This
program is one guard among several and not the last: it runs as the attempt's user, so claude runs with
nothing allowed but what it answers, codex's tools in a sandbox that cannot see it, and every call the
harness reports is held to a recorded decision (docs/policy.md, "What each harness enforces").

`agentd ask` (a script's way to ask from inside its attempt) uses `ask` below with the same socket.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

REQUEST_MAX_BYTES = 1024 * 1024  # of the harness's tool input; a bigger call is denied, never cut
ANSWER_MAX_BYTES = 64 * 1024
DEFAULT_WITHIN_S = 60.0
FIRST_WORD_S = 10.0  # the dispatcher answers, or says the call is held, within this; else the call is denied
HELD = b'{"held":true}'  # the dispatcher's first line for a call a person decides
HARNESSES = ("claude", "codex")
CHECK = "--check"  # after the arguments: only parse them, say which Python runs, exit 0 (agentd/process/hook_check.py)


class Unanswered(Exception):
    """The dispatcher gave no usable answer: the call is denied, and this says why."""


def connect(path: str, within_s: float) -> socket.socket:
    """A connection to the unix socket at `path`, however long the path is (sun_path holds 108 bytes;
    an attempt's run dir can be deeper): through the folder's descriptor in /proc."""
    folder = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(within_s)
        try:
            sock.connect(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
        except BaseException:
            sock.close()
            raise
        return sock
    finally:
        os.close(folder)


def ask(path: str, request: dict[str, Any], within_s: float, first_word_s: float = FIRST_WORD_S) -> dict[str, Any]:
    """The dispatcher's answer to `request` (one JSON line each way): within `first_word_s` seconds, or, when
    its first line says the call is held for a person, within `within_s` seconds in all."""
    line = json.dumps(request, separators=(",", ":")).encode() + b"\n"
    if len(line) > REQUEST_MAX_BYTES:
        raise Unanswered(f"the call's input is {len(line)} bytes, more than the {REQUEST_MAX_BYTES} agentd judges")
    started = time.monotonic()
    first = min(first_word_s, within_s)
    try:
        with connect(path, first) as sock:
            sock.sendall(line)
            reader = _Lines(sock)
            said = reader.line(started + first, f"agentd did not answer within {first:g}s")
            if said.strip() == HELD:
                said = reader.line(started + within_s, f"no decision reached the hook within {within_s:g}s")
            return _answer(said)
    except OSError as exc:
        raise Unanswered(f"agentd's policy socket could not be reached: {exc.strerror or exc}") from None


class _Lines:
    """The dispatcher's answer lines, each read before its own deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.data = sock, b""

    def line(self, ends: float, late: str) -> bytes:
        while b"\n" not in self.data:
            left = ends - time.monotonic()
            if left <= 0:
                raise Unanswered(late)
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(4096)
            except TimeoutError:
                raise Unanswered(late) from None
            if not chunk:
                raise Unanswered("agentd closed the policy socket without an answer")
            self.data += chunk
            if len(self.data) > ANSWER_MAX_BYTES:
                raise Unanswered("agentd's answer is too long")
        line, self.data = self.data.split(b"\n", 1)
        return line


def _answer(line: bytes) -> dict[str, Any]:
    try:
        answer = json.loads(line)
    except ValueError:
        raise Unanswered("agentd's answer is not JSON") from None
    if not isinstance(answer, dict) or answer.get("decision") not in ("allow", "deny"):
        raise Unanswered("agentd's answer has no decision")
    if not isinstance(answer.get("reason"), str):
        answer["reason"] = ""
    return answer


def request_of(harness: str, hook_input: Any) -> dict[str, Any]:
    """The harness's PreToolUse input as agentd's request: the tool, its input, where it runs."""
    if not isinstance(hook_input, dict) or not isinstance(hook_input.get("tool_name"), str):
        raise Unanswered("the harness's hook input has no tool_name")
    tool_input = hook_input.get("tool_input")
    return {
        "harness": harness,
        "tool": hook_input["tool_name"],
        "input": tool_input if isinstance(tool_input, dict) else {},
        "cwd": hook_input.get("cwd") if isinstance(hook_input.get("cwd"), str) else "",
        "tool_use_id": hook_input.get("tool_use_id") if isinstance(hook_input.get("tool_use_id"), str) else None,
    }


def said(answer: dict[str, Any]) -> str:
    """The PreToolUse answer both harnesses read: deny with the reason; a person's allow as allow; the
    policy's allow as nothing, so the harness's own permission settings still decide (docs/policy.md)."""
    if answer["decision"] == "allow" and not answer.get("explicit"):
        return ""
    output = {
        "hookEventName": "PreToolUse",
        "permissionDecision": answer["decision"],
        "permissionDecisionReason": answer["reason"] or f"{answer['decision']} by agentd's tool policy",
    }
    return json.dumps({"hookSpecificOutput": output})


def main(argv: list[str]) -> int:
    """Always exit 0 with an answer (see the module docstring); a usage error is a deny too."""
    if argv[-1:] == [CHECK]:  # no answer: one line and exit 0 once the arguments before it parse, else 2
        return _check(argv[:-1])
    try:
        harness, path, within_s = _arguments(argv)
        raw = sys.stdin.buffer.read(REQUEST_MAX_BYTES + 1)
        if len(raw) > REQUEST_MAX_BYTES:
            raise Unanswered(f"the call is more than the {REQUEST_MAX_BYTES} bytes agentd judges")
        try:
            hook_input = json.loads(raw)
        except ValueError:
            raise Unanswered("the harness's hook input is not JSON") from None
        answer = ask(path, request_of(harness, hook_input), within_s)
    except Unanswered as exc:
        answer = {"decision": "deny", "reason": f"agentd denied this call: {exc}"}
    except Exception as exc:
        answer = {"decision": "deny", "reason": f"agentd denied this call: its hook failed ({type(exc).__name__})"}
    text = said(answer)
    if text:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    return 0


def _check(argv: list[str]) -> int:
    try:
        _arguments(argv)
    except Unanswered as exc:
        sys.stderr.write(f"agentd hook: {exc}\n")
        return 2
    sys.stdout.write(f"agentd hook ok: Python {sys.version.split()[0]} at {sys.executable}\n")
    return 0


def _arguments(argv: list[str]) -> tuple[str, str, float]:
    if len(argv) != 5 or argv[0] not in HARNESSES or argv[1] != "--socket" or argv[3] != "--within":
        raise Unanswered("the hook was called as `hook.py claude|codex --socket PATH --within SECONDS`")
    try:
        within_s = float(argv[4])
    except ValueError:
        raise Unanswered("--within is not a number of seconds") from None
    return argv[0], argv[2], within_s if within_s > 0 else DEFAULT_WITHIN_S


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
