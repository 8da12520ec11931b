"""An attempt's action trace: the ordered steps its harness took, read from what the harness printed.

`trace_of` reads the attempt's evidence folder (already redacted) and never raises on its content:
what cannot be understood is skipped. The caller writes `trace_lines(...)` to action_trace.jsonl;
exporters read it back with `read_trace`. What each adapter kind gives:

- claude-code (stream-json): each text block of an `assistant` line is a message step and each
  tool_use block a tool step, completed by the `tool_result` with the same id wherever it comes.
  The `result` record repeats the last text, so it is a message step only when the output has no
  assistant text (the single-object `--output-format json` form; permission denials listed there
  were not run and are not steps). Only `user` lines carry a time: a tool step ends at its result's.
- codex (`exec --json`): `item.*` events paired by item id. command_execution is a tool step whose
  arguments are the command string; agent_message a message step; reasoning and error items (the
  latter are warnings such as unknown model metadata) are not steps; any other item type is a tool
  step named by its type, with no digests since its fields are not documented. No times.
- hermes-agent: `hermes -z` prints only the final text, but its session snapshots, kept as
  hermes-session.json (agentd/adapters/hermes_session.py), hold the conversation as OpenAI chat messages:
  each assistant message's text is a message step and each of its `tool_calls` a tool step (arguments
  parsed from their JSON text), completed by the `role: tool` message with its `tool_call_id`; a result
  that is a JSON object with `error` or `exit_code` says whether it failed. No times. Without a snapshot
  (a hermes killed before its first step) the trace is one message step for the final text whose summary
  says how many api calls hermes reported.
- ollama-generate: one generate step, prompt.md to stdout.log, with the attempt's own times.
- script: one command step, stdin.json to stdout.log, with the attempt's times and exit code.

After them, one `decision` step for each tool call the dispatcher judged while the attempt ran (its tool
policy, docs/policy.md): a call codex's hook blocked leaves no item in codex's own stream.

A trace keeps at most MAX_TRACE_STEPS steps (`capped`): the first and the last half of them, their step
numbers showing where the gap is; how many were dropped is recorded in the manifest's `action_trace`
(`steps_dropped`) and the attempt's diagnostics.

Digests are sha256 hex: of text as UTF-8, of JSON as canonical JSON (values canonical JSON cannot
hold, NaN or lone surrogates, first made holdable by `scrub_value`), of files as their bytes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from agentd import frozen_value
from agentd.clock import format_ts, parse_ts
from agentd.edge import SHOWN_WINDOW_CHARS, scrub, scrub_value, visible_cut
from agentd.hashing import canonical_json, sha256_file, sha256_hex

TRACE_FILE = "action_trace.jsonl"
MAX_READ_BYTES = 16 * 1024 * 1024  # stdout.log and the usage file are parsed this far; file digests cover it all
SUMMARY_MAX_CHARS = 200
MAX_TRACE_STEPS = 10_000  # kept in action_trace.jsonl (~5 MiB at most): a long session's head and tail
# The evidence files read, by the names agentd/evidence/__init__.py and the adapters give them. Named here, not
# imported: evidence.py imports this module, so it may import nothing above the bottom layer.
PROMPT, STDIN, STDOUT = "prompt.md", "stdin.json", "stdout.log"
HERMES_USAGE_FILE = "hermes-usage.json"  # agentd/adapters/hermes.py USAGE_FILE
HERMES_SESSION_FILE = "hermes-session.json"  # agentd/adapters/hermes_session.py SESSION_FILE
CODEX_SKIPPED_ITEMS = ("reasoning", "error")  # model thinking and warnings: not steps


@frozen_value
class Step:
    step: int
    kind: str  # "tool", "message", "command" or "generate"
    tool: str | None
    arguments_sha256: str | None
    result_sha256: str | None  # None when no result was seen (e.g. killed mid-call)
    is_error: bool | None  # None when the result did not say
    started_at: str | None  # only when the stream gives a time
    ended_at: str | None
    summary: str | None  # for people: at most SUMMARY_MAX_CHARS, blanks escaped, a cut marked (edge.visible_cut)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Draft:
    """A step while its stream is read: a tool call waits here for its result."""

    kind: str
    tool: str | None = None
    arguments_sha256: str | None = None
    result_sha256: str | None = None
    is_error: bool | None = None
    started_at: str | None = None
    ended_at: str | None = None
    summary: str | None = None


def trace_of(
    kind: str,
    root: Path,
    *,
    exit_code: int | None = None,
    started_at: str | None = None,
    ended_at: str | None = None,
) -> list[Step]:
    """The steps of one attempt whose adapter kind is `kind` and whose evidence folder is `root`."""
    if kind == "claude-code":
        drafts = _claude_steps(root)
    elif kind == "codex":
        drafts = _codex_steps(root)
    elif kind == "hermes-agent":
        drafts = _hermes_steps(root)
    elif kind in ("script", "ollama-generate"):
        whole = _script_step(root, exit_code) if kind == "script" else _generate_step(root)
        drafts = [] if whole is None else [replace(whole, started_at=_time(started_at), ended_at=_time(ended_at))]
    else:
        drafts = []
    return [Step(number, **asdict(draft)) for number, draft in enumerate(drafts, 1)]


def decision_steps(decided: list[Any], *, first: int) -> list[Step]:
    """The tool-call decisions the dispatcher made while the attempt ran (docs/policy.md), as steps after the
    harness's own, numbered from `first`: kind "decision", the tool, the decision and who made it, the
    call's summary (redacted when made) and the times it was asked and answered."""
    steps: list[Step] = []
    for entry in decided:
        if not isinstance(entry, dict):
            continue
        said = f"{entry.get('decision')} by {entry.get('decided_by')}: {entry.get('summary')} ({entry.get('rule')})"
        steps.append(
            Step(
                first + len(steps),
                "decision",
                str(entry.get("tool") or "") or None,
                sha256_hex(str(entry.get("summary") or "").encode()),
                None,
                entry.get("decision") != "allow",
                _time(entry.get("requested_at")),
                _time(entry.get("decided_at")),
                visible_cut(said, SUMMARY_MAX_CHARS),
            )
        )
    return steps


def capped(steps: list[Step], limit: int = MAX_TRACE_STEPS) -> tuple[list[Step], int]:
    """At most `limit` steps — the first and the last half, numbered as they were, so the gap shows —
    and how many between them were dropped."""
    if len(steps) <= limit:
        return steps, 0
    head = limit - limit // 2
    return [*steps[:head], *steps[len(steps) - limit // 2 :]], len(steps) - limit


def trace_lines(steps: list[Step]) -> str:
    """The action_trace.jsonl text: one canonical JSON object per line, ending in a newline when non-empty."""
    return "".join(canonical_json(step.as_dict()).decode() + "\n" for step in steps)


def read_trace(path: Path) -> list[dict[str, Any]]:
    """Read action_trace.jsonl back (for exporters); [] when missing; ValueError naming the line (not the
    path, which callers prefix) on bad JSON."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return parse_trace(data)


def parse_trace(data: bytes) -> list[dict[str, Any]]:
    """action_trace.jsonl's bytes as read_trace reads them (for a caller that has read them already)."""
    rows = []
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"), parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"line {number}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise ValueError(f"line {number}: expected a JSON object, found {type(row).__name__}")
        rows.append(row)
    return rows


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# claude-code


def _claude_steps(root: Path) -> list[_Draft]:
    text = _head(root / STDOUT) or ""
    records = _records(text) or _whole_object(text)  # stream-json, else the single `--output-format json` object
    drafts: list[_Draft] = []
    calls: dict[str, _Draft] = {}  # tool_use id → its step, until its result comes
    for record in records:
        if record.get("type") == "assistant":
            drafts += _claude_assistant(record, calls)
        elif record.get("type") == "user":
            _claude_results(record, calls)
    if not any(draft.kind == "message" for draft in drafts):
        drafts += _claude_final_message(records)
    return drafts


def _claude_assistant(record: dict[str, Any], calls: dict[str, _Draft]) -> list[_Draft]:
    at = _time(record.get("timestamp"))
    drafts = []
    for block in _content_blocks(record):
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            drafts.append(_message(block["text"], at))
        elif block.get("type") == "tool_use":
            arguments = block.get("input")
            draft = _Draft(
                "tool",
                tool=_for_people(block.get("name")),
                arguments_sha256=None if arguments is None else _json_digest(arguments),
                started_at=at,
                summary=_summary_of(arguments),
            )
            drafts.append(draft)
            if isinstance(block.get("id"), str):
                calls.setdefault(block["id"], draft)
    return drafts


def _claude_results(record: dict[str, Any], calls: dict[str, _Draft]) -> None:
    at = _time(record.get("timestamp"))
    for block in _content_blocks(record):
        call_id = block.get("tool_use_id")
        if block.get("type") != "tool_result" or not isinstance(call_id, str) or call_id not in calls:
            continue
        draft = calls.pop(call_id)
        draft.result_sha256 = _text_digest(_result_text(block.get("content")))
        draft.is_error = _bool(block.get("is_error"))
        draft.ended_at = at


def _claude_final_message(records: list[dict[str, Any]]) -> list[_Draft]:
    finals = [r["result"] for r in records if r.get("type") == "result" and isinstance(r.get("result"), str)]
    return [_message(finals[-1], None)] if finals else []


def _content_blocks(record: dict[str, Any]) -> list[dict[str, Any]]:
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []


def _result_text(content: Any) -> str:
    """A tool_result's text: the string, or the text blocks of a list joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        blocks = [block for block in content if isinstance(block, dict)]
        return "\n".join(block["text"] for block in blocks if isinstance(block.get("text"), str))
    return "" if content is None else (_json_text(content) or "")


# codex


def _codex_steps(root: Path) -> list[_Draft]:
    drafts: list[_Draft] = []
    items: dict[str, _Draft] = {}  # item id → its step: started, updated and completed are one step
    for record in _records(_head(root / STDOUT) or ""):
        event, item = record.get("type"), record.get("item")
        if not isinstance(event, str) or not event.startswith("item.") or not isinstance(item, dict):
            continue
        draft = _codex_item(item, items, drafts)
        if draft is not None and event == "item.completed":
            _codex_complete(draft, item)
    return drafts


def _codex_item(item: dict[str, Any], items: dict[str, _Draft], drafts: list[_Draft]) -> _Draft | None:
    kind, item_id = item.get("type"), item.get("id")
    if not isinstance(kind, str) or kind in CODEX_SKIPPED_ITEMS:
        return None
    if isinstance(item_id, str) and item_id in items:
        return items[item_id]
    if kind == "agent_message":
        draft = _Draft("message")  # its text comes with item.completed
    elif kind == "command_execution":
        command = item.get("command")
        draft = _Draft("tool", tool=kind, arguments_sha256=_arguments_digest(command), summary=_summary_of(command))
    else:
        draft = _Draft("tool", tool=_for_people(kind))
    drafts.append(draft)
    if isinstance(item_id, str):
        items[item_id] = draft
    return draft


def _codex_complete(draft: _Draft, item: dict[str, Any]) -> None:
    if draft.kind == "message":
        text = item.get("text")
        if isinstance(text, str):
            draft.result_sha256, draft.summary = _text_digest(text), _for_people(text)
        return
    status = item.get("status")
    draft.is_error = True if status == "failed" else False if status == "completed" else None
    if item.get("type") == "command_execution":
        output, exit_code = item.get("aggregated_output"), item.get("exit_code")
        draft.result_sha256 = _text_digest(output) if isinstance(output, str) else None
        if isinstance(exit_code, int) and not isinstance(exit_code, bool):
            draft.is_error = exit_code != 0


# hermes-agent, ollama-generate, script


def _hermes_steps(root: Path) -> list[_Draft]:
    document = _json(_head(root / HERMES_SESSION_FILE) or "")
    sessions = document.get("sessions") if isinstance(document, dict) else None
    return _hermes_session_steps(sessions) or _hermes_final_text(root)


def _hermes_session_steps(sessions: Any) -> list[_Draft]:
    drafts: list[_Draft] = []
    calls: dict[str, _Draft] = {}  # tool_call id → its step, until its `role: tool` message comes
    for session in _list(sessions):
        for message in _list(session.get("messages") if isinstance(session, dict) else None):
            if isinstance(message, dict):
                drafts += _hermes_message(message, calls)
    return drafts


def _hermes_message(message: dict[str, Any], calls: dict[str, _Draft]) -> list[_Draft]:
    if message.get("role") == "tool":
        _hermes_result(message, calls)
        return []
    if message.get("role") != "assistant":
        return []
    text = message.get("content")
    drafts = [_message(text, None)] if isinstance(text, str) and text.strip() else []
    for call in _list(message.get("tool_calls")):
        if isinstance(call, dict):
            drafts.append(calls.setdefault(str(call.get("id")), _hermes_call(call)))
    return drafts


def _hermes_call(call: dict[str, Any]) -> _Draft:
    found = call.get("function")
    function: dict[str, Any] = found if isinstance(found, dict) else {}
    arguments = function.get("arguments")
    parsed = _json(arguments) if isinstance(arguments, str) else arguments
    arguments = parsed if isinstance(parsed, dict) else arguments
    name = function.get("name")
    tool = name if isinstance(name, str) and name else "unnamed"
    return _Draft("tool", tool=tool, arguments_sha256=_arguments_digest(arguments), summary=_summary_of(arguments))


def _hermes_result(message: dict[str, Any], calls: dict[str, _Draft]) -> None:
    draft = calls.pop(str(message.get("tool_call_id")), None)
    if draft is None:
        return
    content = message.get("content")
    draft.result_sha256 = _text_digest(content) if isinstance(content, str) else _json_digest(content)
    value = _json(content) if isinstance(content, str) else content
    if isinstance(value, dict) and ("error" in value or "exit_code" in value):
        code = value.get("exit_code")
        draft.is_error = bool(value.get("error")) or (isinstance(code, int) and code != 0)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _hermes_final_text(root: Path) -> list[_Draft]:
    text = (_head(root / STDOUT) or "").strip()  # the final text, as the hermes adapter records it
    if not text:
        return []
    usage = _json(_head(root / HERMES_USAGE_FILE) or "")
    calls = usage.get("api_calls") if isinstance(usage, dict) else None
    counted = calls if isinstance(calls, int) and not isinstance(calls, bool) else "unknown"
    summary = f"{HERMES_USAGE_FILE}: api_calls={counted}; final text: {text}"
    return [_Draft("message", result_sha256=_text_digest(text), summary=_for_people(summary))]


def _generate_step(root: Path) -> _Draft | None:
    prompt, output = _file_digest(root / PROMPT), _file_digest(root / STDOUT)
    if prompt is None and output is None:
        return None
    return _Draft(
        "generate",
        arguments_sha256=prompt,
        result_sha256=output,
        is_error=_generate_error(root),
        summary=_for_people(_head(root / PROMPT, SUMMARY_MAX_CHARS * 4)),
    )


def _generate_error(root: Path) -> bool | None:
    """True when ollama answered an error record, False when it reached its `done` record."""
    records = _records(_head(root / STDOUT) or "")
    if any("error" in record for record in records):
        return True
    return False if any(record.get("done") is True for record in records) else None


def _script_step(root: Path, exit_code: int | None) -> _Draft:
    return _Draft(
        "command",
        tool="script",
        arguments_sha256=_file_digest(root / STDIN),
        result_sha256=_file_digest(root / STDOUT),
        is_error=None if exit_code is None else exit_code != 0,
    )


# reading and digesting what the harness printed


def _head(path: Path, limit: int = MAX_READ_BYTES) -> str | None:
    """The first `limit` bytes of a file as text (bad UTF-8 replaced); None when it cannot be read."""
    try:
        with path.open("rb") as handle:
            return handle.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return None


def _records(text: str) -> list[dict[str, Any]]:
    """The JSON objects among the lines of `text`. Split on newlines only: JSON strings may hold U+2028."""
    return [value for value in map(_json, text.split("\n")) if isinstance(value, dict)]


def _whole_object(text: str) -> list[dict[str, Any]]:
    value = _json(text)
    return [value] if isinstance(value, dict) else []


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # ValueError covers malformed JSON and over-long integers
        return None


def _message(text: str, at: str | None) -> _Draft:
    return _Draft("message", result_sha256=_text_digest(text), started_at=at, ended_at=at, summary=_for_people(text))


def _file_digest(path: Path) -> str | None:
    try:
        return sha256_file(path)
    except OSError:
        return None


def _text_digest(text: str) -> str:
    return sha256_hex(scrub(text).encode())


def _arguments_digest(arguments: Any) -> str | None:
    """A command string's digest as text, anything else's as canonical JSON."""
    if arguments is None:
        return None
    return _text_digest(arguments) if isinstance(arguments, str) else _json_digest(arguments)


def _json_digest(value: Any) -> str | None:
    text = _json_text(value)
    return None if text is None else sha256_hex(text.encode())


def _json_text(value: Any) -> str | None:
    try:
        return canonical_json(scrub_value(value)).decode()
    except (ValueError, RecursionError):
        return None


def _summary_of(arguments: Any) -> str | None:
    """The arguments for people: a command when there is one, else the text or canonical JSON."""
    if isinstance(arguments, dict) and isinstance(arguments.get("command"), str):
        arguments = arguments["command"]
    if arguments is None or isinstance(arguments, str):
        return _for_people(arguments)
    return _for_people(_json_text(arguments))


def _for_people(text: Any) -> str | None:
    if not isinstance(text, str) or not text:
        return None
    # As the live view shows it (agentd/adapters/activity.py `EventText`): a window of it (it may be megabytes),
    # cut with a marker that counts what is not shown.
    window = text[:SHOWN_WINDOW_CHARS]
    return visible_cut(window, SUMMARY_MAX_CHARS, more=len(text) - len(window))


def _time(value: Any) -> str | None:
    """A time the stream gave, as agentd writes times; anything else is no time."""
    if not isinstance(value, str):
        return None
    try:
        return format_ts(parse_ts(value))
    except ValueError:
        return None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None
