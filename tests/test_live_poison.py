"""Live activity's parsers are total (issue 26): whatever a harness streams — any JSON where an object
was expected, deep nesting, huge strings, lone surrogates, NaN — the stream parsers yield only events the
chain can hold, with short printable summaries and no secret; the line reader gives the same lines however
the file grows (docs/live.md)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import HARNESS_FIXTURES, examples

from agentd.adapters.activity import PROGRESS_MAX_CHARS, SUMMARY_MAX_CHARS, Activity, EventText, progress, stream_parser
from agentd.attempt.live import Lines, Source, redacting
from agentd.edge import SHOWN_WINDOW_CHARS, check_value, printable
from agentd.evidence.action_trace import trace_of
from agentd.records.events import LIVE_EVENT_TYPES
from agentd.redaction import Redactor
from agentd.store import Store

PROPERTY = settings(max_examples=examples(200), deadline=None, suppress_health_check=list(HealthCheck))
SECRET = "hunter2-live-secret"
texts = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["\ud800", "a\udfffb", "\x1b[2J", "\u202e", "line\nbreak", "NaN", SECRET, f"x{SECRET}y"]),
    st.builds(
        lambda n, tail: "z" * n + SECRET + tail,
        st.integers(185, 199) | st.integers(485, 499) | st.integers(0, 600),
        st.text(max_size=5),
    ),
    st.just("w" * 200_000),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4), max_leaves=20
)


def deep(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"k": [value]}
    return value


anything = st.one_of(values, st.integers(1, 900).map(deep))
statuses = st.sampled_from(["pending", "in_progress", "completed", "cancelled", None, 7])
todo = st.fixed_dictionaries({"content": anything, "status": statuses}, optional={"id": anything})
claude_blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": anything, "name": anything, "input": anything}),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_use"),
            "id": texts,
            "name": st.just("TodoWrite"),
            "input": st.fixed_dictionaries({"todos": st.lists(todo, max_size=5) | anything}),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("tool_result"), "tool_use_id": anything, "content": anything, "is_error": anything}
    ),
    anything,
)
claude_records = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["assistant", "user", "result", "system"]) | anything,
        "message": st.fixed_dictionaries(
            {"id": anything, "content": st.lists(claude_blocks, max_size=4) | anything, "usage": anything}
        )
        | anything,
    }
)
codex_items = st.fixed_dictionaries(
    {
        "id": anything,
        "type": st.sampled_from(["command_execution", "file_change", "mcp_tool_call", "todo_list", "agent_message"])
        | anything,
    },
    optional={
        "command": anything,
        "status": st.sampled_from(["completed", "failed", "in_progress"]) | anything,
        "exit_code": anything,
        "aggregated_output": anything,
        "items": st.lists(st.fixed_dictionaries({"text": anything, "completed": anything}), max_size=4) | anything,
    },
)
codex_records = st.fixed_dictionaries(
    {"type": st.sampled_from(["item.started", "item.updated", "item.completed", "turn.completed"]) | anything},
    optional={"item": codex_items | anything, "usage": anything},
)


def event_text() -> EventText:
    return redacting(Redactor([SECRET]))


def assert_holdable(found: list[Activity]) -> None:
    for activity in found:
        assert activity.type in LIVE_EVENT_TYPES
        check_value(activity.payload, activity.type)  # NaN, surrogates, huge ints: none reach the chain
        text = json.dumps(activity.payload, ensure_ascii=False)
        assert SECRET[:6] not in text  # not even the part of one a cut would leave
        for key in ("summary", "tool", "call_id"):
            if key in activity.payload:
                value = activity.payload[key]
                assert isinstance(value, str) and len(value) <= SUMMARY_MAX_CHARS and printable(value) == value
        for item in activity.payload.get("todos", []):
            assert set(item) == {"todoId", "runId", "text", "status", "createdAt", "updatedAt"}
            assert item["status"] in ("open", "in-progress", "done", "dropped")


@PROPERTY
@given(st.lists(claude_records, max_size=8))
def test_the_claude_stream_parser_is_total(records: list[dict[str, Any]]) -> None:
    assert_parses_holdable("claude-code", records)


@PROPERTY
@given(st.lists(codex_records, max_size=8))
def test_the_codex_stream_parser_is_total(records: list[dict[str, Any]]) -> None:
    assert_parses_holdable("codex", records)


def assert_parses_holdable(kind: str, records: list[dict[str, Any]]) -> None:
    """`kind`'s stream parser fed every record, then closed: all it found is holdable."""
    parser = stream_parser(kind, "attempt-1", event_text())
    assert parser is not None
    found = [a for record in records for a in parser.feed(record, "2026-01-01T00:00:00Z")]
    assert_holdable(found + parser.close("2026-01-01T00:00:00Z"))


@PROPERTY
@given(texts)
def test_a_progress_line_is_short_printable_and_redacted(line: str) -> None:
    found = progress(line, event_text())
    assert_holdable(found)
    assert all(len(a.payload["text"]) <= PROGRESS_MAX_CHARS for a in found)


@PROPERTY
@given(st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=10), st.data())
def test_lines_are_the_same_however_the_file_grows(lines: list[bytes], data: st.DataObject) -> None:
    whole = b"".join(line + b"\n" for line in lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=6)))
    reader = Lines(limit=20, keep_long=True)
    got: list[bytes] = []
    for start, end in zip([0, *cuts], [*cuts, len(whole)], strict=True):
        got += reader.feed(whole[start:end])
    assert got == [line[:20] for line in lines]
    assert reader.rest() == []


def test_a_line_too_long_to_parse_is_skipped_and_counted() -> None:
    reader = Lines(limit=10, keep_long=False)
    assert reader.feed(b'{"a": 1}\n' + b"x" * 25) == [b'{"a": 1}']
    assert reader.feed(b"yyy\n{}\n") == [b"{}"]
    assert reader.skipped == 1


@settings(max_examples=examples(30), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(claude_records, max_size=6))
def test_whatever_the_parsers_yield_the_chain_holds(store: Store, records: list[dict[str, Any]]) -> None:
    parser = stream_parser("claude-code", "attempt-1", event_text())
    assert parser is not None
    found = [a for record in records for a in parser.feed(record, "2026-01-01T00:00:00Z")]
    store.record_activity(1, "attempt-1", [(a.type, a.payload) for a in found], store.clock.now())
    assert store.verify_event_chain() == []


STREAMS = sorted(p.name for p in HARNESS_FIXTURES.glob("*.jsonl") if p.name.startswith(("claude_", "codex_")))
TOOLS = [
    {"type": "tool_use", "id": "r1", "name": "Read", "input": {"file_path": "/w/ünï.md", "limit": 5, "offset": 1e3}},
    {"type": "tool_use", "id": "e1", "name": "Edit", "input": {"z": [1, {"b": None, "a": "x" * 300}]}},
]
MADE = "\n".join(json.dumps({"type": "assistant", "message": {"id": "m", "content": [t]}}) for t in TOOLS)


@pytest.mark.parametrize("name", [*STREAMS, "claude_made_by_hand.jsonl"])
def test_live_tool_calls_are_the_action_traces_tool_steps(name: str, tmp_path: Path) -> None:
    """What the live view showed while the run went on and what the sealed trace says it did agree."""
    kind = "claude-code" if name.startswith("claude") else "codex"
    if name in STREAMS:
        shutil.copyfile(HARNESS_FIXTURES / name, tmp_path / "stdout.log")
    else:
        (tmp_path / "stdout.log").write_text(MADE + "\n")
    parser = stream_parser(kind, "attempt-1", EventText())
    assert parser is not None
    found: list[Activity] = []
    for line in Lines(1 << 20, keep_long=False).feed((tmp_path / "stdout.log").read_bytes()):
        record = json.loads(line) if line.startswith(b"{") else None
        found += parser.feed(record, "t") if isinstance(record, dict) else []
    traced = [step for step in trace_of(kind, tmp_path) if step.kind == "tool"]
    started = [a.payload for a in found if a.type == "tool_started"]
    finished = [a.payload for a in found if a.type == "tool_finished"]
    assert [s["tool"] for s in started] == [step.tool for step in traced]
    assert [s["summary"] for s in started] == [step.summary or "" for step in traced]
    assert [f["ok"] for f in finished] == [step.is_error is not True for step in traced if step.result_sha256]


def test_a_progress_path_that_is_a_link_or_a_fifo_is_refused_never_followed_nor_waited_on(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("what the link points at\n")
    os.symlink(tmp_path / "secret", tmp_path / "linked.log")
    os.mkfifo(tmp_path / "fifo.log")
    for name in ("linked.log", "fifo.log"):
        source = Source(tmp_path, name, Lines(4096, keep_long=True))
        assert source.read() == [] and source.refused is not None
        (tmp_path / name).unlink()
        (tmp_path / name).write_text("a plain file now\n")
        assert source.read() == [], "once refused, the attempt's file is not read again"


@pytest.mark.parametrize("offset", range(-45, 5, 7))
def test_a_secret_behind_a_run_of_blanks_at_the_windows_end_is_never_shown_in_part(offset: int) -> None:
    """A run of blanks shows as its count, so a summary reaches far into the text: a secret cut by the end of
    the window redacted is dropped with the window's last `reach` characters, never shown in part."""
    made = event_text()
    text = " " * (SHOWN_WINDOW_CHARS + made.reach + offset) + SECRET + " tail"
    said = made(text)
    assert SECRET[:4] not in said and said.startswith("⟨"), said
    assert said.endswith("[redacted] tail") or said.endswith(" chars)"), said  # whole, or cut and said so


def test_a_held_calls_whole_input_is_redacted_in_its_keys_values_and_numbers() -> None:
    made = redacting(Redactor([SECRET, "1234567890"]))
    text = made.canonical({"command": f"echo {SECRET}", SECRET: [1234567890, 12345.5, True, None]})
    assert json.loads(text) == {"command": "echo [redacted]", "[redacted]": ["[redacted]", 12345.5, True, None]}
