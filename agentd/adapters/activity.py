"""What a harness is doing while it runs, read from its stream as it is written (docs/live.md).

A `StreamParser` turns the JSON records of claude-code's stream-json or codex's `--json` stream into
`Activity`: tool calls started and finished, model turns with their usage, the agent's todo list (seed
003 AgentTodo). A script's progress lines become `attempt_progress`. Total: whatever a record holds, the
worst it does is yield nothing. Every text shown is redacted by value before it is cut (`EventText`), so no
part of a secret survives at the cut, then shown whole on one line or cut with a marker (agentd/edge.py
`visible_cut`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentd import frozen_value
from agentd.edge import SHOWN_WINDOW_CHARS, printable, scrub_value, visible_cut
from agentd.hashing import canonical_json, sha256_hex
from agentd.usage import judge_number

SUMMARY_MAX_CHARS = 200  # of a tool call's input or result, on one line
PROGRESS_MAX_CHARS = 500  # of one progress line a script wrote
TODOS_MAX = 100  # todos kept per attempt; a list longer than this is cut
TODO_STATUS = {"pending": "open", "in_progress": "in-progress", "completed": "done"}  # claude's TodoWrite
TURN_USAGE = {"input_tokens": "input_tokens", "output_tokens": "output_tokens"}  # ours → both harnesses' names
CODEX_MESSAGE_ITEMS = ("agent_message", "reasoning", "error", "todo_list")  # not tool calls


@frozen_value
class Activity:
    """One event-to-be: its type (agentd/records/event_names.py `LIVE_EVENT_TYPES`) and payload."""

    type: str
    payload: dict[str, Any]


class EventText:
    """Text as an event may hold it: redacted by value, then as agentd/edge.py `visible_cut` shows it (one line,
    every blank but a single space escaped or counted, at most a limit, a cut always marked)."""

    def __init__(self, redact: Callable[[str], str] = lambda text: text, reach: int = 0) -> None:
        self.redact, self.reach = redact, reach

    def __call__(self, text: str, limit: int = SUMMARY_MAX_CHARS, note: str = "") -> str:
        # Redact a window of it (the text may be megabytes; a run of blanks shows as its count, so the window
        # is wider than the limit), then cut. A window cut short loses its last `reach` characters, where an
        # unrecognised start of a secret may sit; what is not shown is counted in the cut's marker.
        window = text[: max(SHOWN_WINDOW_CHARS, limit) + self.reach]
        redacted = self.redact(window)
        if len(window) == len(text):
            return visible_cut(redacted, limit, note=note)
        kept = redacted[: max(0, len(redacted) - self.reach)]
        return visible_cut(kept, limit, more=len(text) - len(window) + len(redacted) - len(kept), note=note)

    def value(self, value: Any, limit: int = SUMMARY_MAX_CHARS) -> str:
        """A JSON value for people: a command when it has one, its text, else compact JSON."""
        if isinstance(value, dict) and isinstance(value.get("command"), str):
            value = value["command"]
        if isinstance(value, str):
            return self(value, limit)
        try:  # as the action trace shows it (agentd/evidence/action_trace.py): the two views agree
            text = canonical_json(scrub_value(value)).decode()
        except (ValueError, RecursionError):
            text = f"<{type(value).__name__}>"
        return self(text, limit)

    def canonical(self, value: Any) -> str:
        """`value` whole, as canonical JSON text, every string in it (keys too) and every number that spells a
        secret redacted: a held call's input as a person is shown it (docs/policy.md, "Asking a person").
        Raises ValueError or RecursionError for what JSON cannot hold."""
        return canonical_json(self._redacted(scrub_value(value))).decode()

    def _redacted(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {self.redact(str(key)): self._redacted(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._redacted(item) for item in value]
        if isinstance(value, int | float) and not isinstance(value, bool) and self.redact(str(value)) != str(value):
            return self.redact(str(value))
        return value


class StreamParser(Protocol):
    def feed(self, record: dict[str, Any], at: str) -> list[Activity]:
        """What one JSON record of the stream says happened (`at`: when it was read)."""

    def close(self, at: str) -> list[Activity]:
        """What the end of the stream completes (a turn it never closed)."""


@dataclass
class Todos:
    """An attempt's todo list as seed 003 AgentTodo records, kept across updates: a todo the agent
    removed before it was done is `dropped`; one seen before keeps its createdAt. Each names the attempt it
    was seen in (`runId`); its session is the agent's, which the exports add (agentd/outlook/correlation.py)."""

    attempt_id: str
    event_text: EventText
    items: dict[str, dict[str, Any]] = field(default_factory=dict)  # todoId → AgentTodo, in first-seen order

    def update(self, listed: list[tuple[Any, str, str]], at: str) -> Activity:
        """`listed`: (the harness's id or None, text, AgentTodo status) of every todo it now lists."""
        current: set[str] = set()
        for given, text, status in listed[:TODOS_MAX]:
            todo_id = self._id(given, text)
            current.add(todo_id)
            self._set(todo_id, self.event_text(text), status, at)
        for todo_id, todo in self.items.items():
            if todo_id not in current and todo["status"] not in ("done", "dropped"):
                self._set(todo_id, todo["text"], "dropped", at)
        while len(self.items) > TODOS_MAX:  # the oldest go first
            del self.items[next(iter(self.items))]
        return Activity("todos_updated", {"todos": [dict(todo) for todo in self.items.values()]})

    def _id(self, given: Any, text: str) -> str:
        if isinstance(given, str | int) and not isinstance(given, bool) and str(given):
            return self.event_text(str(given), 100)
        return sha256_hex(text.encode("utf-8", "replace"))[:16]  # the same text is the same todo

    def _set(self, todo_id: str, text: str, status: str, at: str) -> None:
        todo = self.items.get(todo_id)
        if todo is None:
            self.items[todo_id] = {
                "todoId": todo_id,
                "runId": self.attempt_id,
                "text": text,
                "status": status,
                "createdAt": at,
                "updatedAt": at,
            }
        elif (todo["text"], todo["status"]) != (text, status):
            todo.update(text=text, status=status, updatedAt=at)


def usage_payload(turn: int, usage: Any, names: dict[str, str]) -> dict[str, Any]:
    """model_turn_completed's payload: the turn's number and what of its usage is a number usage may be
    (agentd/usage.py); what is not is left out."""
    payload: dict[str, Any] = {"turn": turn}
    if isinstance(usage, dict):
        for ours, theirs in names.items():
            number, _ = judge_number(usage.get(theirs), ours)
            if number is not None:
                payload[ours] = number
    return payload


def text_of(content: Any) -> str:
    """A tool result's text: the string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


class ClaudeStream:
    """claude-code's stream-json: tool_use blocks start calls, tool_result blocks finish them, TodoWrite's
    input is the todo list, and an assistant message (its id) is a model turn, completed when the next
    message, a tool result or the result record comes."""

    def __init__(self, attempt_id: str, event_text: EventText) -> None:
        self.event_text, self.todos = event_text, Todos(attempt_id, event_text)
        self.calls: dict[str, str] = {}  # open call id → tool name
        self.turns = 0
        self.turn: tuple[Any, Any] | None = None  # the open turn's (message id, usage)

    def feed(self, record: dict[str, Any], at: str) -> list[Activity]:
        kind = record.get("type")
        message = record.get("message")
        blocks = _blocks(message)
        if kind == "assistant" and isinstance(message, dict):
            found = self._turn(message.get("id"), message.get("usage"))
            return found + [a for block in blocks for a in self._assistant(block, at)]
        if kind == "user":
            return self.close(at) + [a for block in blocks for a in self._result(block)]
        if kind == "system" and record.get("subtype") == "compact_boundary":
            return [compaction(record.get("compact_metadata"))]
        return self.close(at) if kind == "result" else []

    def close(self, at: str) -> list[Activity]:
        if self.turn is None:
            return []
        _, usage = self.turn
        self.turn, self.turns = None, self.turns + 1
        return [Activity("model_turn_completed", usage_payload(self.turns, usage, TURN_USAGE))]

    def _turn(self, message_id: Any, usage: Any) -> list[Activity]:
        closed = self.close("") if self.turn is not None and (message_id is None or message_id != self.turn[0]) else []
        self.turn = (message_id, usage)
        return closed

    def _assistant(self, block: dict[str, Any], at: str) -> list[Activity]:
        if block.get("type") != "tool_use":
            return []
        call_id, tool = (
            self.event_text(str(block.get("id") or ""), 100),
            self.event_text(str(block.get("name") or "?"), 100),
        )
        if len(self.calls) < 1000:  # calls never finished are not remembered without end
            self.calls[call_id] = tool
        found = [
            Activity(
                "tool_started", {"call_id": call_id, "tool": tool, "summary": self.event_text.value(block.get("input"))}
            )
        ]
        if tool == "TodoWrite" and isinstance(block.get("input"), dict):
            found.append(self.todos.update(_claude_todos(block["input"].get("todos")), at))
        return found

    def _result(self, block: dict[str, Any]) -> list[Activity]:
        if block.get("type") != "tool_result":
            return []
        call_id = self.event_text(str(block.get("tool_use_id") or ""), 100)
        payload = {
            "call_id": call_id,
            "tool": self.calls.pop(call_id, "?"),
            "ok": block.get("is_error") is not True,
            "summary": self.event_text(text_of(block.get("content"))),
        }
        return [Activity("tool_finished", payload)]


def compaction(metadata: Any) -> Activity:
    """A compaction claude reports (its `compact_boundary` record, 2.1.197): what started it and the tokens
    before and after, where they are counts (docs/live.md)."""
    given = metadata if isinstance(metadata, dict) else {}
    payload: dict[str, Any] = {}
    if isinstance(given.get("trigger"), str):
        payload["trigger"] = printable(given["trigger"][:20])
    for name in ("pre_tokens", "post_tokens"):
        count, _ = judge_number(given.get(name), name)
        if count is not None:
            payload[name] = int(count)
    return Activity("context_compacted", payload)


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []


def _claude_todos(todos: Any) -> list[tuple[Any, str, str]]:
    """TodoWrite's `todos`: [{content, status: pending | in_progress | completed, activeForm, id?}]."""
    if not isinstance(todos, list):
        return []
    return [
        (todo.get("id"), todo["content"], TODO_STATUS.get(str(todo.get("status")), "open"))
        for todo in todos
        if isinstance(todo, dict) and isinstance(todo.get("content"), str)
    ]


class CodexStream:
    """codex's `exec --json` events: an item that is not a message (command_execution, file_change,
    mcp_tool_call, web_search, …) is a tool call from item.started to item.completed; a todo_list item
    is the plan; turn.completed is a model turn with its usage."""

    def __init__(self, attempt_id: str, event_text: EventText) -> None:
        self.event_text, self.todos = event_text, Todos(attempt_id, event_text)
        self.started: set[str] = set()
        self.turns = 0

    def feed(self, record: dict[str, Any], at: str) -> list[Activity]:
        kind, item = record.get("type"), record.get("item")
        if kind == "turn.completed":
            self.turns += 1
            return [Activity("model_turn_completed", usage_payload(self.turns, record.get("usage"), TURN_USAGE))]
        if not isinstance(kind, str) or not kind.startswith("item.") or not isinstance(item, dict):
            return []
        if item.get("type") == "todo_list":
            return [self.todos.update(_codex_todos(item.get("items")), at)]
        if item.get("type") in CODEX_MESSAGE_ITEMS or not isinstance(item.get("type"), str):
            return []
        return self._tool(kind, item)

    def close(self, at: str) -> list[Activity]:
        return []

    def _tool(self, kind: str, item: dict[str, Any]) -> list[Activity]:
        call_id, tool = self.event_text(str(item.get("id") or ""), 100), self.event_text(item["type"], 100)
        found = []
        if call_id not in self.started and len(self.started) < 10_000:
            self.started.add(call_id)
            found.append(Activity("tool_started", {"call_id": call_id, "tool": tool, "summary": self._input(item)}))
        if kind == "item.completed":
            ok = item.get("status") == "completed" and item.get("exit_code") in (None, 0)
            summary = (
                item.get("aggregated_output") if isinstance(item.get("aggregated_output"), str) else item.get("status")
            )
            found.append(
                Activity(
                    "tool_finished",
                    {"call_id": call_id, "tool": tool, "ok": ok, "summary": self.event_text.value(summary)},
                )
            )
        return found

    def _input(self, item: dict[str, Any]) -> str:
        if isinstance(item.get("command"), str):
            return self.event_text(item["command"])
        rest = {k: v for k, v in item.items() if k not in ("id", "type", "status", "aggregated_output", "exit_code")}
        return self.event_text.value(rest)


def _codex_todos(items: Any) -> list[tuple[Any, str, str]]:
    """A todo_list item's `items`: [{text, completed}]; codex marks no step in progress."""
    if not isinstance(items, list):
        return []
    return [
        (None, item["text"], "done" if item.get("completed") is True else "open")
        for item in items
        if isinstance(item, dict) and isinstance(item.get("text"), str)
    ]


def progress(line: str, event_text: EventText) -> list[Activity]:
    """A line a script appended to $AGENTD_PROGRESS_PATH; a blank one says nothing."""
    return [Activity("attempt_progress", {"text": event_text(line, PROGRESS_MAX_CHARS)})] if line.strip() else []


def stream_parser(kind: str, attempt_id: str, event_text: EventText) -> StreamParser | None:
    """The parser for an adapter kind whose stdout is a JSON stream; None for the others."""
    if kind == "claude-code":
        return ClaudeStream(attempt_id, event_text)
    if kind == "codex":
        return CodexStream(attempt_id, event_text)
    return None
