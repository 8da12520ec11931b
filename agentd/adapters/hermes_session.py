"""hermes-agent's session snapshots, kept as evidence so its tool calls and turns are not invisible.

`hermes -z` prints only its final text. With `sessions.write_json_snapshots` in its config.yaml (hermes'
documented opt-in for external tools that read `$HERMES_HOME/sessions/session_<id>.json`), hermes rewrites
one snapshot per session after every step: the conversation as OpenAI chat messages (an assistant message's
`tool_calls`, each answered by a `role: tool` message with its `tool_call_id`). A compaction starts a new
session, so an attempt may leave several. This module copies their messages, and nothing else (the snapshot
also repeats the system prompt and every tool schema), into the evidence file SESSION_FILE, which the action
trace reads (agentd/evidence/action_trace.py; docs/evidence.md, "The action trace").

The snapshots are in the attempt's scratch dir, which the attempt can write: each is read beneath it
without following a link, only if the run user owns it, and at most MAX_SNAPSHOT_BYTES of it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentd.process.files import Refused, read_beneath

SESSION_FILE = "hermes-session.json"
MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024
MAX_SNAPSHOTS = 16
KEPT_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name")


def session_document(scratch: Path, owner: int | None) -> dict[str, Any] | None:
    """{"sessions": [{"session_id", "messages"}...], "problems": [...]} from the snapshots under
    `scratch`/hermes/sessions, oldest first (their names start with the session's start time); None if
    hermes left none."""
    names = _snapshot_names(scratch / "hermes" / "sessions")
    if not names:
        return None
    sessions, problems = [], []
    for name in names[:MAX_SNAPSHOTS]:
        session, problem = _snapshot(scratch, name, owner)
        if session is not None:
            sessions.append(session)
        if problem is not None:
            problems.append(f"{name}: {problem}")
    if len(names) > MAX_SNAPSHOTS:
        problems.append(f"{len(names) - MAX_SNAPSHOTS} more snapshots not read (at most {MAX_SNAPSHOTS})")
    return {"sessions": sessions, "problems": problems}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _snapshot_names(folder: Path) -> list[str]:
    try:
        found = os.listdir(folder)
    except OSError:
        return []
    return sorted(n for n in found if n.startswith("session_") and n.endswith(".json"))


def _snapshot(scratch: Path, name: str, owner: int | None) -> tuple[dict[str, Any] | None, str | None]:
    try:
        found = read_beneath(scratch, f"hermes/sessions/{name}", MAX_SNAPSHOT_BYTES, owner)
    except (Refused, OSError) as exc:
        return None, f"cannot read it ({exc.strerror})"
    if len(found.data) > MAX_SNAPSHOT_BYTES:
        return None, f"larger than {MAX_SNAPSHOT_BYTES} bytes"
    try:
        snapshot = json.loads(found.data, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None, "not JSON"
    messages = snapshot.get("messages") if isinstance(snapshot, dict) else None
    if not isinstance(messages, list):
        return None, "no messages list"
    kept = [{k: m[k] for k in KEPT_FIELDS if k in m} for m in messages if isinstance(m, dict)]
    return {"session_id": snapshot.get("session_id"), "messages": kept}, None
