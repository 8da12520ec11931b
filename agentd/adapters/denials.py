"""Tool calls a harness's own permission policy or sandbox refused, read from what it printed.

claude lists them in its result record's `permission_denials` (tool name, tool_use_id, input);
codex marks a refused command as a `command_execution` item with `status: "declined"`. Whatever
shape they come in, they become PolicyDenial records and never an exception: this parses the
output of a process agentd does not trust. Texts are kept whole here; they are redacted and then
bounded when the attempt ends (PolicyDenial.cleaned), never cut before redaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from agentd.records import PolicyDenial

# The input field that says what a call would have done, by the names claude's and codex's tools use.
SUMMARY_FIELDS = ("command", "cmd", "file_path", "notebook_path", "path", "url", "pattern", "query", "prompt")
UNKNOWN_TOOL = "unknown"


def claude_denials(value: Any) -> tuple[PolicyDenial, ...]:
    """claude's `permission_denials`: [{tool_name, tool_use_id, tool_input}, …]."""
    if not isinstance(value, list):
        return ()
    return tuple(_claude_denial(entry) for entry in value)


def _claude_denial(entry: Any) -> PolicyDenial:
    if not isinstance(entry, dict):
        return PolicyDenial(UNKNOWN_TOOL, compact(entry))
    return PolicyDenial(
        tool=text_of(entry.get("tool_name")) or UNKNOWN_TOOL,
        summary=input_summary(entry.get("tool_input")),
        call_id=text_of(entry.get("tool_use_id")) or None,
    )


def codex_denials(items: Iterable[Any]) -> tuple[PolicyDenial, ...]:
    """codex's completed items whose status is `declined` (a command its approval policy or sandbox
    refused), once per item id. A `failed` command is the command's own failure, not a denial."""
    found: dict[str, PolicyDenial] = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict) or item.get("status") != "declined":
            continue
        output = text_of(item.get("aggregated_output")).strip()
        exit_code = item.get("exit_code")
        call_id = text_of(item.get("id")) or None
        found.setdefault(
            call_id or f"#{index}",
            PolicyDenial(
                tool=text_of(item.get("type")) or UNKNOWN_TOOL,
                summary=input_summary({k: v for k, v in item.items() if k not in CODEX_ITEM_META}),
                reason=f"declined: {output}" if output else "declined",
                exit_code=exit_code if _is_exit_code(exit_code) else None,
                call_id=call_id,
            ),
        )
    return tuple(found.values())


CODEX_ITEM_META = ("id", "type", "status", "aggregated_output", "exit_code")


def _is_exit_code(value: Any) -> bool:
    """An int codex could have meant (its exit_code is an i32), not a bool or a number JSON mangles."""
    return isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31


def input_summary(tool_input: Any) -> str:
    """What a call would have done, in short: the command for a shell, the path for a file tool,
    else the input as compact JSON."""
    if isinstance(tool_input, dict):
        for name in SUMMARY_FIELDS:
            value = tool_input.get(name)
            if isinstance(value, str) and value.strip():
                return value
            if name in ("command", "cmd") and isinstance(value, list) and value:
                return " ".join(text_of(part) for part in value)  # an argv
    if isinstance(tool_input, str):
        return tool_input
    return compact(tool_input)


def text_of(value: Any) -> str:
    """A string as it is, nothing as "", anything else as compact JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else compact(value)


def compact(value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        return f"<{type(value).__name__}>"
