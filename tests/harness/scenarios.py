"""The scenarios `make record-fixtures` records (tests/harness/record.py): per scenario, the fake model's script,
the CLI's extra arguments and environment, and which of its outputs become which fixture files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakemodel import Fail, Hang, Reply, ToolCall, Turn

PROMPT = "Answer with a fenced json outcome block."
OK = 'Hi from fake. ```json\n{"outcome": "ok"}\n```'
DONE = 'Done.\n```json\n{"outcome": "success", "marker": "tool-ran-ok"}\n```'


def marker_command(work: Path) -> str:
    """The shell command every tool scenario asks for: it leaves tool_marker.txt in the work dir."""
    return f"echo tool-ran-ok > {work}/tool_marker.txt; echo tool-ran-ok"


@dataclass(frozen=True)
class Scenario:
    """One run of one CLI: the fake's script, the CLI's extra arguments, and which outputs become which files."""

    cli: str  # claude | codex | hermes | ollama
    what: str  # one line for fixtures.json
    files: dict[str, str]  # fixture file name -> output: stdout, usage, last_message, or an ollama request
    turns: Callable[[Path], list[Turn]] = lambda work: []
    default: Turn | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # per-CLI knobs (codex config, hermes config)
    marker: bool | None = None  # whether the tool must have left tool_marker.txt (None: no tool)


def fail(status: int) -> Fail:
    """The fake's answer to every model call of an error scenario."""
    return Fail(status, f"fake server injected error {status}")


def tool_then_done(name: str, argument: str, text_before: str = "", **more: str) -> Callable[[Path], list[Turn]]:
    """A call of the CLI's shell tool `name` (its command in `argument`), then the final reply."""
    return lambda work: [ToolCall(name, {argument: marker_command(work), **more}, text_before), Reply(DONE)]


def reply_ok(work: Path) -> list[Turn]:
    """One text reply with a fenced json block."""
    return [Reply(OK)]


JSON = ("--output-format", "json")
STREAM = ("--output-format", "stream-json", "--verbose")
CLAUDE_TOOL = tool_then_done("Bash", "command", "Running a command.", description="write marker")


def hermes_files(name: str, stdout_suffix: str = "") -> dict[str, str]:
    """A hermes -z run gives two fixtures: its stdout and its usage file."""
    return {f"hermes_oneshot_{name}{stdout_suffix}.txt": "stdout", f"hermes_usage_{name}.json": "usage"}


SCENARIOS: dict[str, Scenario] = {
    "claude-success": Scenario("claude", "a text reply", {"claude_json_success.json": "stdout"}, reply_ok, args=JSON),
    "claude-http500": Scenario(
        "claude", "HTTP 500 on every call", {"claude_json_http500.json": "stdout"}, default=fail(500), args=JSON
    ),
    "claude-http429": Scenario(
        "claude", "HTTP 429 on every call", {"claude_json_http429.json": "stdout"}, default=fail(429), args=JSON
    ),
    "claude-max-turns": Scenario(
        "claude",
        "a tool call with --max-turns 1",
        {"claude_json_error_max_turns.json": "stdout"},
        CLAUDE_TOOL,
        args=(*JSON, "--max-turns", "1", "--allowedTools", "Bash"),
        marker=True,
    ),
    "claude-no-api-key": Scenario(
        "claude",
        "no ANTHROPIC_API_KEY",
        {"claude_json_no_api_key.json": "stdout"},
        reply_ok,
        args=JSON,
        env={"ANTHROPIC_API_KEY": ""},
    ),
    "claude-permission-denied": Scenario(
        "claude",
        "a Bash call without --allowedTools Bash",
        {"claude_json_permission_denied.json": "stdout"},
        CLAUDE_TOOL,
        args=JSON,
        marker=False,
    ),
    "claude-stream-tool-use": Scenario(
        "claude",
        "a Bash call, allowed, then a reply",
        {"claude_stream_json_tool_use.jsonl": "stdout"},
        CLAUDE_TOOL,
        args=(*STREAM, "--model", "claude-sonnet-4-5", "--allowedTools", "Bash"),
        marker=True,
    ),
    "claude-stream-http500": Scenario(
        "claude",
        "HTTP 500 on every call",
        {"claude_stream_json_http500.jsonl": "stdout"},
        default=fail(500),
        args=STREAM,
    ),
    "claude-text-http500": Scenario(
        "claude",
        "HTTP 500 on every call, text output",
        {"claude_text_http500.txt": "stdout"},
        default=fail(500),
        args=("--output-format", "text"),
    ),
    "codex-success": Scenario(
        "codex",
        "a text reply",
        {"codex_exec_json_success.jsonl": "stdout", "codex_output_last_message.txt": "last_message"},
        reply_ok,
        args=("-m", "gpt-5.5"),
    ),
    "codex-unknown-model": Scenario(
        "codex",
        "a text reply from a model codex has no metadata for",
        {"codex_exec_json_unknown_model_warning.jsonl": "stdout"},
        reply_ok,
        args=("-m", "fake-model"),
    ),
    "codex-tool-use": Scenario(
        "codex",
        "an exec_command call, then a reply (an unknown model: its warning item too)",
        {"codex_exec_json_tool_use.jsonl": "stdout"},
        tool_then_done("exec_command", "cmd", "Running a command."),
        args=("-m", "fake-model"),
        marker=True,
    ),
    "codex-http500": Scenario(
        "codex",
        "HTTP 500 on every call",
        {"codex_exec_json_http500.jsonl": "stdout"},
        default=fail(500),
        args=("-m", "gpt-5.5"),
    ),
    "codex-http429": Scenario(
        "codex",
        "HTTP 429 on every call",
        {"codex_exec_json_http429.jsonl": "stdout"},
        default=fail(429),
        args=("-m", "gpt-5.5"),
    ),
    "codex-stream-idle-timeout": Scenario(
        "codex",
        "headers and the first event, then a stall (idle timeout 2 s)",
        {"codex_exec_json_stream_idle_timeout.jsonl": "stdout"},
        default=Hang(after_headers=True),
        args=("-m", "gpt-5.5"),
        settings={"stream_idle_timeout_ms": 2000},
    ),
    "hermes-success": Scenario("hermes", "a text reply", hermes_files("success"), reply_ok),
    "hermes-tool-use": Scenario(
        "hermes",
        "a terminal call, then a reply",
        hermes_files("tool_use"),
        tool_then_done("terminal", "command"),
        marker=True,
    ),
    "hermes-http500": Scenario(
        "hermes", "HTTP 500 on every call", hermes_files("http500", "_stdout"), default=fail(500)
    ),
    "hermes-http429": Scenario(
        "hermes", "HTTP 429 on every call", hermes_files("http429", "_stdout"), default=fail(429)
    ),
    "hermes-hang": Scenario(
        "hermes",
        "no answer at all (its timeouts at 2 s)",
        hermes_files("hang", "_stdout"),
        default=Hang(),
        settings={"timeout_s": 2},
    ),
    "hermes-chat-quiet": Scenario(
        "hermes",
        "`hermes chat -q -Q` (agentd runs -z): its stdout",
        {"hermes_chat_q_quiet.txt": "stdout"},
        reply_ok,
        settings={"chat": True},
    ),
    "ollama-generate-stream": Scenario(
        "ollama", "POST /api/generate, streamed", {"ollama_generate_stream.ndjson": "generate"}, reply_ok
    ),
    "ollama-generate-nostream": Scenario(
        "ollama", 'POST /api/generate, "stream": false', {"ollama_generate_nostream.json": "generate-whole"}, reply_ok
    ),
    "ollama-tags": Scenario("ollama", "GET /api/tags", {"ollama_tags.json": "tags"}),
}
