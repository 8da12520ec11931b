"""Resume, not restart (issue 42, finding 5; docs/reliability.md, "Resume, not restart"): a free retry after an
interruption resumes the harness's own session. Here: claude's argv for a new and a resumed session, the
bookkeeping that keeps a session past the attempt's run dir and hands it to the next attempt, and a compaction
claude reports becoming `context.compaction.completed`. The real claude resuming is in test_resume_harness.py."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_adapter_builders import ctx

from agentd.adapters.activity import ClaudeStream, Shown
from agentd.adapters.claude import RESUME_NOTE, ClaudeCodeAdapter
from agentd.attempt import session as sessions
from agentd.attempt.session import HarnessSession, begin, fresh_session_id, keep_or_drop, kept_dir, note_path
from agentd.evidence import AttemptPaths, make_attempt_dir
from agentd.outlook.agent_runtime import EVENT_MAP

CLAUDE = {"kind": "claude-code"}


def test_a_new_claude_session_has_an_id_agentd_chose_and_persists(tmp_path: Path) -> None:
    context = replace(ctx(tmp_path, CLAUDE), session=HarnessSession(fresh_session_id("01ATTEMPT")))
    built = ClaudeCodeAdapter().build(context)
    assert "--no-session-persistence" not in built.argv  # a session that is not written cannot be resumed
    assert built.argv[built.argv.index("--session-id") + 1] == fresh_session_id("01ATTEMPT")
    assert "--resume" not in built.argv and built.stdin == b"THE BUNDLE"


def test_a_resumed_claude_session_is_resumed_by_its_id_with_a_note_not_the_bundle(tmp_path: Path) -> None:
    context = replace(ctx(tmp_path, CLAUDE), session=HarnessSession("the-id", resumed_from="01EARLIER"))
    built = ClaudeCodeAdapter().build(context)
    assert built.argv[built.argv.index("--resume") + 1] == "the-id"
    assert "--session-id" not in built.argv and "--fork-session" not in built.argv
    assert built.stdin == RESUME_NOTE.encode() and b"THE BUNDLE" not in built.stdin


def test_without_a_session_claude_keeps_none(tmp_path: Path) -> None:
    built = ClaudeCodeAdapter().build(ctx(tmp_path, CLAUDE))
    assert "--no-session-persistence" in built.argv and "--session-id" not in built.argv


def test_a_session_id_is_a_uuid_of_its_attempt() -> None:
    assert fresh_session_id("A") == fresh_session_id("A") != fresh_session_id("B")
    assert len(fresh_session_id("A")) == 36


def attempt(tmp_path: Path, attempt_id: str) -> AttemptPaths:
    paths = AttemptPaths(tmp_path / "state" / "attempts" / "7" / attempt_id, tmp_path / "runs" / attempt_id)
    (tmp_path / "runs").mkdir(exist_ok=True)
    (tmp_path / "state" / "attempts").mkdir(parents=True, exist_ok=True)
    make_attempt_dir(paths)
    return paths


def transcript(paths: AttemptPaths, session_id: str, text: str = "the conversation so far") -> Path:
    """What claude leaves under its HOME for a persisted session (measured on 2.1.197)."""
    path = paths.scratch / ".claude" / "projects" / "-work-space" / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_an_interrupted_session_is_kept_and_the_next_attempt_resumes_it(tmp_path: Path) -> None:
    first = attempt(tmp_path, "01FIRST")
    session = begin(first, 7, "claude-code", "01FIRST", None)
    assert session == HarnessSession(fresh_session_id("01FIRST"))
    transcript(first, session.session_id)
    kept = keep_or_drop(first, 7, "claude-code", "01FIRST", interrupted=True, user=None)
    assert kept == {"session_id": session.session_id, "kept": True}
    assert not (first.scratch / ".claude" / "projects").exists()  # moved, not copied: the run dir goes next
    assert oct(kept_dir(first, 7).stat().st_mode & 0o777) == "0o700"
    second = attempt(tmp_path, "02SECOND")
    resumed = begin(second, 7, "claude-code", "02SECOND", None)
    assert resumed == HarnessSession(session.session_id, resumed_from="01FIRST")
    moved = second.scratch / ".claude" / "projects" / "-work-space" / f"{session.session_id}.jsonl"
    assert moved.read_text() == "the conversation so far"
    assert not kept_dir(second, 7).exists()  # the session is the running attempt's again


def test_a_session_is_dropped_when_the_attempt_was_not_interrupted(tmp_path: Path) -> None:
    first = attempt(tmp_path, "01FIRST")
    session = begin(first, 7, "claude-code", "01FIRST", None)
    transcript(first, session.session_id)
    assert keep_or_drop(first, 7, "claude-code", "01FIRST", interrupted=False, user=None) is None
    assert not kept_dir(first, 7).exists() and not note_path(first).exists()
    second = attempt(tmp_path, "02SECOND")
    assert begin(second, 7, "claude-code", "02SECOND", None) == HarnessSession(fresh_session_id("02SECOND"))


def test_a_session_of_another_harness_is_not_resumed(tmp_path: Path) -> None:
    first = attempt(tmp_path, "01FIRST")
    session = begin(first, 7, "claude-code", "01FIRST", None)
    transcript(first, session.session_id)
    keep_or_drop(first, 7, "claude-code", "01FIRST", interrupted=True, user=None)
    second = attempt(tmp_path, "02SECOND")
    assert begin(second, 7, "hermes-agent", "02SECOND", None) is None  # hermes restarts (docs/decisions.md)
    assert not kept_dir(first, 7).exists() and not note_path(first).exists()


def test_an_interrupted_attempt_that_left_no_session_restarts_and_says_why(tmp_path: Path) -> None:
    first = attempt(tmp_path, "01FIRST")
    begin(first, 7, "claude-code", "01FIRST", None)
    kept = keep_or_drop(first, 7, "claude-code", "01FIRST", interrupted=True, user=None)
    assert kept is not None and kept["kept"] is False and "no session" in kept["why"]
    second = attempt(tmp_path, "02SECOND")
    assert begin(second, 7, "claude-code", "02SECOND", None) == HarnessSession(fresh_session_id("02SECOND"))


def test_a_session_past_the_bound_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions, "KEPT_MAX_BYTES", 10)
    first = attempt(tmp_path, "01FIRST")
    session = begin(first, 7, "claude-code", "01FIRST", None)
    transcript(first, session.session_id, "x" * 11)
    kept = keep_or_drop(first, 7, "claude-code", "01FIRST", interrupted=True, user=None)
    assert kept is not None and kept["kept"] is False and "larger than" in kept["why"]
    assert not kept_dir(first, 7).exists()


def test_a_session_folder_that_is_a_link_is_not_kept(tmp_path: Path) -> None:
    first = attempt(tmp_path, "01FIRST")
    begin(first, 7, "claude-code", "01FIRST", None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (first.scratch / ".claude").mkdir()
    os.symlink(elsewhere, first.scratch / ".claude" / "projects")
    kept = keep_or_drop(first, 7, "claude-code", "01FIRST", interrupted=True, user=None)
    assert kept is not None and kept["kept"] is False and "link" in kept["why"]
    assert elsewhere.is_dir()


@given(st.one_of(st.binary(max_size=200), st.just(b'{"kind": "claude-code"}'), st.just(b"[]")))
def test_any_note_on_disk_is_read_totally(tmp_path_factory: pytest.TempPathFactory, raw: bytes) -> None:
    """A note that is not what agentd writes (cut off, edited) starts a new session; it never raises."""
    tmp_path = tmp_path_factory.mktemp("note")
    second = attempt(tmp_path, "02SECOND")
    note_path(second).write_bytes(raw)
    assert begin(second, 7, "claude-code", "02SECOND", None) == HarnessSession(fresh_session_id("02SECOND"))
    assert json.loads(note_path(second).read_text())["session_id"] == fresh_session_id("02SECOND")


def test_a_compaction_claude_reports_is_a_context_compaction() -> None:
    stream = ClaudeStream("attempt", Shown())
    record = {
        "type": "system",
        "subtype": "compact_boundary",
        "session_id": "s",
        "compact_metadata": {"trigger": "auto", "pre_tokens": 150_000, "post_tokens": "lots"},
    }
    [found] = stream.feed(record, "t")
    assert found.type == "context_compacted"
    assert found.payload == {"trigger": "auto", "pre_tokens": 150_000}  # what is not a count is left out
    assert EVENT_MAP["context_compacted"] == "context.compaction.completed"
    assert stream.feed({"type": "system", "subtype": "compact_boundary", "compact_metadata": "?"}, "t")[0].payload == {}
