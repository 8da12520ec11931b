"""The demo model's one play, for `agentd demo-model` (docs/connect-a-model.md): it reads the request, not a
queue. Asked for work with a file tool or a shell at hand, it writes a short report with one tool call (the file
the task's payload names in `"write"`, else reports/demo-model.md); once the harness returns that call's result
(or when no tool is offered, as for ollama), it answers with a TaskOutcome claiming what it wrote."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from typing import Any

from agentd.services.demomodel.common import RecordedRequest, Reply, ToolCall, Turn

DEFAULT_REPORT = "reports/demo-model.md"
SUMMARY = "hello from agentd demo-model"
# The payload is in the prompt as indented JSON (docs/adapters.md); its schema keeps `write` to these characters.
_WRITE = re.compile(r'"write"\s*:\s*"([A-Za-z0-9._/-]+)"')
_WORKING_DIRECTORY = re.compile(r"Working directory: (/[^\s`'\"]+)")  # claude says where it runs in its system prompt
# The harnesses' shell tools and their command argument (claude's Write is preferred: its sandbox allows edits).
_SHELLS = {"exec_command": "cmd", "shell": "command", "terminal": "command", "Bash": "command"}


def demo_turn(request: RecordedRequest) -> Turn:
    """The next turn for `request`: a tool call that writes the report, or the outcome once a tool has answered."""
    body = request.body if isinstance(request.body, dict) else {}
    texts = list(_strings(body.get("messages", body.get("input", body.get("prompt", "")))))
    texts += list(_strings(body.get("system", body.get("instructions", ""))))
    wanted = next((m.group(1) for text in texts for m in [_WRITE.search(text)] if m), DEFAULT_REPORT)
    if _answered_a_tool(body) or not _wanted_safe(wanted):
        return Reply(_outcome(wanted if _answered_a_tool(body) else None))
    tools = _tool_names(body)
    content = f"# Report\n\n{SUMMARY}: this file was written by a tool call the demo model asked for.\n"
    if "Write" in tools:
        directory = next((m.group(1) for text in texts for m in [_WORKING_DIRECTORY.search(text)] if m), None)
        path = f"{directory.rstrip('/')}/{wanted}" if directory else wanted
        return ToolCall("Write", {"file_path": path, "content": content})
    shell = next((name for name in _SHELLS if name in tools), None)
    if shell is None:
        return Reply(_outcome(None))
    folder = wanted.rsplit("/", 1)[0] if "/" in wanted else "."
    command = f"mkdir -p {shlex.quote(folder)} && printf '%s' {shlex.quote(content)} > {shlex.quote(wanted)}"
    return ToolCall(shell, {_SHELLS[shell]: command})


def _outcome(written: str | None) -> str:
    outcome: dict[str, Any] = {"status": "completed", "machine_status": "ok", "operator_summary": SUMMARY}
    if written is not None:
        outcome["artifact_paths"] = [written]
    return "Done.\n```json\n" + json.dumps(outcome) + "\n```\n"


def _wanted_safe(path: str) -> bool:
    """A relative path that stays inside the workspace (the schema allows `..` in its characters)."""
    return not path.startswith("/") and ".." not in path.split("/")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def _tool_names(body: dict[str, Any]) -> set[str]:
    """The tools a request offers: Anthropic's and Responses' `name`, Chat Completions' `function.name`."""
    names = set()
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else tool.get("name")
            if isinstance(name, str):
                names.add(name)
    return names


def _answered_a_tool(body: dict[str, Any]) -> bool:
    """Whether the conversation's last entry is a tool's result, in any of the four protocols."""
    entries = body.get("messages", body.get("input"))
    if not isinstance(entries, list) or not entries or not isinstance(entries[-1], dict):
        return False
    last = entries[-1]
    if last.get("role") == "tool" or str(last.get("type", "")).endswith("call_output"):
        return True
    content = last.get("content")
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
