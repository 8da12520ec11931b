"""Every tool call a harness reports, held to the decision agentd made on it (docs/policy.md, "Every call
accounted for").

The policy hook runs beside the attempt, as the attempt's user: whatever the attempt does to it, a call it
did not let through must not run unseen. A `CallLedger` reads the harness's own stream as agentd's runner
pumps it (every byte, before the output cap) and keeps, per call:

- claude-code: each `tool_use` the model asked for (its id and tool), announced before claude runs the
  hook, and each `tool_result`. The gate admits a hook's request only for an announced id, and records its
  decision here. A result that ran (not an error) for a call no decision let run is a violation at once; an
  error result for a call with no decision waits for claude's `result` record, whose `permission_denials`
  says claude refused it; one it does not list is a violation too.
- codex: each `command_execution` item codex starts must match a command the gate allowed and no earlier
  item used (codex names no call id in its stream). codex's tools run in its sandbox, which cannot reach
  the hook or the socket; anything that starts without a decision is a violation at once.

A violation ends the run at once (`on_violation`): its process group is killed, the attempt ends
`policy_violation`, and the sealed manifest lists the calls (agentd/attempt/conclude.py).
"""

from __future__ import annotations

import shlex
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio

from agentd.attempt.live import Lines, json_record
from agentd.edge import printable

TAP_LINE_MAX_BYTES = 4 * 1024 * 1024  # a longer line is skipped: a call that long was refused by the hook
MAX_KEPT = 10_000  # calls remembered per attempt; past it the oldest are forgotten
MAX_VIOLATIONS = 20  # kept per attempt (the first stops it; more can arrive before the kill lands)
SHELLS = ("/bin/bash", "/bin/sh", "bash", "sh", "/usr/bin/bash", "/usr/bin/zsh", "zsh")

Violation = dict[str, Any]


class CallLedger:
    def __init__(self, kind: str, on_violation: Callable[[Violation], None]) -> None:
        self.kind, self.on_violation = kind, on_violation
        self.lines = Lines(TAP_LINE_MAX_BYTES, keep_long=False)
        self.announced: dict[str, str] = {}  # claude: tool_use id → tool, not yet answered by a result
        self.decided: dict[str, str] = {}  # claude: tool_use id → "allow" or "deny"
        self.unsettled: dict[str, str] = {}  # claude: an error result with no decision: refused by claude?
        self.allowed: deque[str] = deque(maxlen=MAX_KEPT)  # codex: commands allowed and not yet started
        self.violations: list[Violation] = []
        self.calls = 0  # tool calls the harness reported
        self._news = anyio.Event()

    # --- the stream (the runner's tap: every chunk claude or codex writes to its stdout) ---------------

    def tap(self, chunk: bytes) -> None:
        for line in self.lines.feed(chunk):
            record = json_record(line.decode("utf-8", errors="replace"))
            if record is not None:
                self._read(record)

    def _read(self, record: dict[str, Any]) -> None:
        if self.kind == "claude-code":
            self._claude(record)
        elif self.kind == "codex":
            self._codex(record)

    def _claude(self, record: dict[str, Any]) -> None:
        kind = record.get("type")
        if kind == "assistant":
            for block in _blocks(record, "tool_use"):
                if isinstance(block.get("id"), str) and block["id"]:
                    self._announce(block["id"][:200], str(block.get("name") or "")[:200])
        elif kind == "user":
            for block in _blocks(record, "tool_result"):
                if isinstance(block.get("tool_use_id"), str):
                    refused = block.get("is_error") is True and _refusal(block.get("content"))
                    self._claude_result(block["tool_use_id"][:200], block.get("is_error") is True, refused)
        elif kind == "result":
            self._settle(record.get("permission_denials"))

    def _announce(self, call_id: str, tool: str) -> None:
        if call_id not in self.announced:
            self.calls += 1
        self.announced[call_id] = tool
        _bounded(self.announced)
        self._news.set()
        self._news = anyio.Event()

    def _claude_result(self, call_id: str, is_error: bool, refused: bool) -> None:
        tool = self.announced.pop(call_id, "?")
        decision = self.decided.get(call_id)
        if decision == "allow" or (decision == "deny" and is_error) or refused:
            return
        if not is_error:
            said = "ran although agentd denied it" if decision == "deny" else "ran without a decision from agentd"
            self._violated(tool, call_id, said)
        else:  # claude's own refusal (its permission check, with nothing allowed) unless its result says otherwise
            self.unsettled[call_id] = tool
            _bounded(self.unsettled)

    def _settle(self, denials: Any) -> None:
        """claude's `result` lists the calls it refused: those were not run."""
        for denial in denials if isinstance(denials, list) else []:
            if isinstance(denial, dict) and isinstance(denial.get("tool_use_id"), str):
                self.unsettled.pop(denial["tool_use_id"][:200], None)

    def _codex(self, record: dict[str, Any]) -> None:
        item = record.get("item")
        if record.get("type") != "item.started" or not isinstance(item, dict):
            return
        if item.get("type") != "command_execution":
            return
        self.calls += 1
        command = str(item["command"]) if isinstance(item.get("command"), str) else ""
        ran = _script_of(command)
        if ran in self.allowed:
            self.allowed.remove(ran)
            return
        self._violated("Bash", str(item.get("id") or "")[:200], f"started without a decision from agentd: {command}")

    # --- the gate's side ---------------------------------------------------------------------------------

    async def announcement(self, call_id: str, within_s: float) -> str | None:
        """The tool of the call the harness announced under `call_id`, waiting up to `within_s` for its line
        (claude prints it just before it runs the hook); None when it never came."""
        with anyio.move_on_after(within_s):
            while call_id not in self.announced:
                await self._news.wait()
        return self.announced.get(call_id)

    def decide(self, call_id: str | None, allowed: bool, command: str | None) -> None:
        """The gate's decision on a call, as the harness will act on it."""
        if self.kind == "claude-code" and call_id:
            self.decided[call_id] = "allow" if allowed else "deny"
            _bounded(self.decided)
        elif self.kind == "codex" and allowed and command is not None:
            self.allowed.append(command)

    def decision(self, call_id: str) -> str | None:
        return self.decided.get(call_id)

    def ended(self) -> list[Violation]:
        """At the run's end: claude's error results that no refusal of its own explains are violations too
        (a run cut off before its result record leaves each of them unexplained)."""
        for call_id, tool in list(self.unsettled.items()):
            self._violated(tool, call_id, "its result was an error, but claude did not list it as refused")
        self.unsettled.clear()
        return self.violations

    def _violated(self, tool: str, call_id: str, what: str) -> None:
        if len(self.violations) >= MAX_VIOLATIONS:
            return
        violation = {"tool": printable(tool)[:200], "call_id": printable(call_id)[:200], "what": printable(what)[:500]}
        self.violations.append(violation)
        self.on_violation(violation)


def _blocks(record: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [block for block in content if isinstance(block, dict) and block.get("type") == kind]


# How claude words a call its own permission check refused (2.1.197): a tool's own output, run or failed,
# never starts so (claude prefixes a failed command's output with "Exit code N").
CLAUDE_REFUSALS = ("Permission to use ", "Claude requested permissions to ")


def _refusal(content: Any) -> bool:
    """A tool result's content is claude's own refusal of the call (so the call did not run)."""
    if isinstance(content, list):  # [{"type": "text", "text": …}]
        content = next((b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"), None)
    return isinstance(content, str) and content.startswith(CLAUDE_REFUSALS)


def _bounded(kept: dict[str, Any]) -> None:
    while len(kept) > MAX_KEPT:
        del kept[next(iter(kept))]


def _script_of(command: str) -> str:
    """The script of codex's `/bin/bash -lc '<script>'` (its item's command), as its hook was asked about it."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if len(words) == 3 and words[0] in SHELLS and words[1] in ("-lc", "-c"):
        return words[2]
    return command
