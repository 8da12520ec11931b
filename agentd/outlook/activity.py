"""What a running attempt is doing now (docs/live.md): its newest live event and its todo list, read
from the chain. `attempt_activity` is the one read for `agentd status` and any other view (the web
console); `activity_lines` says it in two lines for people.
"""

from __future__ import annotations

from typing import Any

from agentd.clock import format_ts
from agentd.edge import printable
from agentd.records import RuntimeEvent
from agentd.records.event_names import LIVE_EVENT_TYPES
from agentd.store import Store

LAST_TYPES = tuple(kind for kind in LIVE_EVENT_TYPES if kind != "todos_updated")
LINE_CHARS = 160


def attempt_activity(store: Store, task_id: int, attempt_id: str) -> dict[str, Any]:
    """`{"last": …, "todos": […]}`: `last` is the attempt's newest live event other than a todo list —
    `{"type", "sequence", "at"}` and its payload's fields (tool_started: call_id, tool, summary; …) — or
    None before it has one; `todos` is its newest todo list (seed 003 AgentTodo records), [] if none."""
    last = _newest(store, task_id, attempt_id, LAST_TYPES)
    todos = _newest(store, task_id, attempt_id, ("todos_updated",))
    return {
        "last": None
        if last is None
        else {"type": last.type, "sequence": last.sequence, "at": format_ts(last.timestamp), **last.payload},
        "todos": list(todos.payload.get("todos", [])) if todos is not None else [],
    }


def _newest(store: Store, task_id: int, attempt_id: str, types: tuple[str, ...]) -> RuntimeEvent | None:
    """The task's newest event of `types`, if it is this attempt's (an earlier attempt's is not: the
    chain is in order, so this attempt has none yet)."""
    found = store.read_events(task_id=task_id, types=types, last=True, limit=1)
    return found[0] if found and found[0].attempt_id == attempt_id else None


def activity_lines(activity: dict[str, Any]) -> list[str]:
    """At most two lines: what the attempt did last, and where its todo list stands."""
    lines = []
    if activity.get("last"):
        lines.append(_cut(_last_line(activity["last"])))
    if activity.get("todos"):
        lines.append(_cut(_todos_line(activity["todos"])))
    return lines


def _last_line(last: dict[str, Any]) -> str:
    kind, at = last["type"], str(last.get("at", ""))[11:19]
    if kind == "tool_started":
        return f"now      {last.get('tool')} since {at}: {last.get('summary') or ''}"
    if kind == "tool_finished":
        said = "ok" if last.get("ok") else "FAILED"
        return f"last     {last.get('tool')} {said} at {at}: {last.get('summary') or ''}"
    if kind == "model_turn_completed":
        tokens = ", ".join(f"{k.split('_')[0]} {last[k]}" for k in ("input_tokens", "output_tokens") if k in last)
        return f"last     model turn {last.get('turn')} ended at {at}" + (f" ({tokens} tokens)" if tokens else "")
    if kind == "attempt_progress":
        return f"progress {last.get('text')} ({at})"
    return f"activity capped: {last.get('dropped')} event(s) held back (the evidence keeps every step)"


def _todos_line(todos: list[dict[str, Any]]) -> str:
    done = sum(1 for todo in todos if todo.get("status") == "done")
    kept = [todo for todo in todos if todo.get("status") != "dropped"]
    doing = next((todo.get("text") for todo in todos if todo.get("status") == "in-progress"), None)
    return f"todos    {done}/{len(kept)} done" + (f"; in progress: {doing}" if doing else "")


def todo_counts(todos: list[Any]) -> str:
    """A todo list in a few words, for an event's line: `3: 1 done, 1 in-progress, 1 open`."""
    statuses = [todo.get("status") for todo in todos if isinstance(todo, dict)]
    counted = ", ".join(f"{statuses.count(s)} {s}" for s in ("done", "in-progress", "open", "dropped") if s in statuses)
    return f"{len(todos)}: {counted}" if counted else str(len(todos))


def _cut(line: str) -> str:
    line = printable(line)
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"
