"""Resume, not restart (issue 42, finding 5; docs/reliability.md, "Resume, not restart"): a free retry after an
interruption resumes the harness's own session. Here: claude's argv for a new and a resumed session, the
bookkeeping that keeps a session past the attempt's run dir and hands it to the next attempt, and a compaction
claude reports becoming `context.compaction.completed`. The real claude resuming is in test_resume_harness.py."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_adapter_builders import ctx

from agentd.adapters.activity import ClaudeStream, EventText
from agentd.adapters.base import RESUME_NOTE
from agentd.adapters.claude import ClaudeCodeAdapter
from agentd.adapters.codex import CodexAdapter
from agentd.attempt import session as sessions
from agentd.attempt.session import HarnessSession, archive_path, begin, fresh_session_id, keep_or_drop, note_path
from agentd.evidence import AttemptPaths, make_attempt_dir
from agentd.outlook.agent_runtime import EVENT_MAP
from agentd.usage import Usage

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


def sealed_as(archive: Path) -> dict[str, object]:
    """What the note says of a sealed session: its archive's sha256 and size."""
    return {"sha256": hashlib.sha256(archive.read_bytes()).hexdigest(), "bytes": archive.stat().st_size}


def transcript(paths: AttemptPaths, session_id: str, text: str = "the conversation so far") -> Path:
    """What claude leaves under its HOME for a persisted session (measured on 2.1.197)."""
    path = paths.scratch / ".claude" / "projects" / "-work-space" / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_an_interrupted_session_is_kept_and_the_next_attempt_resumes_it(tmp_path: Path) -> None:
    first = attempt(tmp_path, "01FIRST")
    session = begin(first, 7, "claude-code", "01FIRST", None)
    assert session == HarnessSession(fresh_session_id("01FIRST"))
    transcript(first, session.session_id)
    kept = keep_or_drop(first, 7, "claude-code", "01FIRST", interrupted=True, user=None)
    assert kept is not None and kept.pop("sealed") == sealed_as(archive_path(first))
    assert kept == {"session_id": session.session_id, "kept": True}
    assert oct(archive_path(first).stat().st_mode & 0o777) == "0o600"  # the services' alone, beside the note
    second = attempt(tmp_path, "02SECOND")
    resumed = begin(second, 7, "claude-code", "02SECOND", None)
    assert resumed == HarnessSession(session.session_id, resumed_from="01FIRST")
    unpacked = second.scratch / ".claude" / "projects" / "-work-space" / f"{session.session_id}.jsonl"
    assert unpacked.read_text() == "the conversation so far"
    assert not archive_path(second).exists()  # the session is the running attempt's again


def test_a_session_is_dropped_when_the_attempt_was_not_interrupted(tmp_path: Path) -> None:
    first = attempt(tmp_path, "01FIRST")
    session = begin(first, 7, "claude-code", "01FIRST", None)
    transcript(first, session.session_id)
    assert keep_or_drop(first, 7, "claude-code", "01FIRST", interrupted=False, user=None) is None
    assert not archive_path(first).exists() and not note_path(first).exists()
    second = attempt(tmp_path, "02SECOND")
    assert begin(second, 7, "claude-code", "02SECOND", None) == HarnessSession(fresh_session_id("02SECOND"))


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_a_session_of_another_harness_is_not_resumed(tmp_path: Path) -> None:
    first = attempt(tmp_path, "01FIRST")
    session = begin(first, 7, "claude-code", "01FIRST", None)
    transcript(first, session.session_id)
    keep_or_drop(first, 7, "claude-code", "01FIRST", interrupted=True, user=None)
    second = attempt(tmp_path, "02SECOND")
    assert begin(second, 7, "hermes-agent", "02SECOND", None) is None  # hermes restarts (docs/decisions.md)
    assert not archive_path(first).exists() and not note_path(first).exists()


def test_an_interrupted_attempt_that_left_no_session_restarts_and_says_why(tmp_path: Path) -> None:
    first = attempt(tmp_path, "01FIRST")
    begin(first, 7, "claude-code", "01FIRST", None)
    kept = keep_or_drop(first, 7, "claude-code", "01FIRST", interrupted=True, user=None)
    assert kept is not None and kept["kept"] is False and "no session" in kept["why"]
    second = attempt(tmp_path, "02SECOND")
    assert begin(second, 7, "claude-code", "02SECOND", None) == HarnessSession(fresh_session_id("02SECOND"))


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_a_session_past_the_bound_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions, "KEPT_MAX_BYTES", 10)
    first = attempt(tmp_path, "01FIRST")
    session = begin(first, 7, "claude-code", "01FIRST", None)
    transcript(first, session.session_id, "x" * 11)
    kept = keep_or_drop(first, 7, "claude-code", "01FIRST", interrupted=True, user=None)
    assert kept is not None and kept["kept"] is False and "larger than" in kept["why"]
    assert not archive_path(first).exists() and not note_path(first).exists()


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
    stream = ClaudeStream("attempt", EventText())
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


# --- codex: the session id is the one codex names in its stream; its counts are the thread's --------------------

CODEX = {"kind": "codex", "sandbox": "workspace-write", "model": "gpt-5.5"}
THREAD = "01a222a9-00ed-7b20-a315-785786ed9e1d"  # as codex 0.169.0 names one (a UUIDv7)


def rollout(paths: AttemptPaths, *totals: tuple[int, int]) -> Path:
    """What codex leaves under its CODEX_HOME for a session (measured on 0.169.0): a rollout whose token_count
    records carry the thread's running total."""
    path = paths.scratch / "codex" / "sessions" / "2026" / "11" / "28" / f"rollout-2026-11-28T14-57-10-{THREAD}.jsonl"
    path.parent.mkdir(parents=True)
    lines = [json.dumps({"type": "session_meta", "payload": {"id": THREAD}})]
    for given_in, given_out in totals:
        info = {"total_token_usage": {"input_tokens": given_in, "output_tokens": given_out}}
        lines.append(json.dumps({"type": "event_msg", "payload": {"type": "token_count", "info": info}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def named(paths: AttemptPaths, thread: str = THREAD) -> None:
    paths.stdout.write_text(json.dumps({"type": "thread.started", "thread_id": thread}) + '\n{"type":"turn.started"}\n')


def test_a_new_codex_session_has_no_id_until_codex_names_it(tmp_path: Path) -> None:
    first = attempt(tmp_path, "01FIRST")
    session = begin(first, 7, "codex", "01FIRST", None)
    assert session == HarnessSession(None) and session.payload() == {}
    built = CodexAdapter().build(replace(ctx(tmp_path, CODEX), session=session))
    assert built.argv[1:3] == ["exec", "--json"] and "resume" not in built.argv
    assert built.argv[built.argv.index("-s") + 1] == "workspace-write" and built.stdin == b"THE BUNDLE"


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_an_interrupted_codex_session_is_kept_by_the_id_codex_named_and_resumed(tmp_path: Path) -> None:
    from agentd.attempt.meter import thread_spent

    first = attempt(tmp_path, "01FIRST")
    begin(first, 7, "codex", "01FIRST", None)
    named(first)
    rollout(first, (11, 7), (22, 14))
    spent = thread_spent(first.scratch / "codex", THREAD, None)
    assert spent is not None and (spent.input_tokens, spent.output_tokens) == (22, 14)
    kept = keep_or_drop(first, 7, "codex", "01FIRST", interrupted=True, user=None, spent=spent)
    assert kept is not None and kept.pop("sealed") == sealed_as(archive_path(first))
    assert kept == {"session_id": THREAD, "kept": True, "spent_before": {"input_tokens": 22, "output_tokens": 14}}
    second = attempt(tmp_path, "02SECOND")
    resumed = begin(second, 7, "codex", "02SECOND", None)
    assert resumed == HarnessSession(THREAD, "01FIRST", spent_before=Usage(22, 14))
    assert list((second.scratch / "codex" / "sessions").glob("*/*/*/rollout-*.jsonl"))  # back in its CODEX_HOME
    built = CodexAdapter().build(replace(ctx(tmp_path, CODEX), session=resumed))
    assert built.argv[1:4] == ["exec", "resume", "--json"] and built.argv[-2:] == [THREAD, "-"]
    assert "-s" not in built.argv  # `exec resume` has no -s: the same sandbox as a config override
    assert built.argv[built.argv.index("-c") + 1] == 'sandbox_mode="workspace-write"'
    assert built.stdin == RESUME_NOTE.encode()


def test_a_resumed_codex_attempt_counts_only_what_it_spent(tmp_path: Path) -> None:
    """codex's turn.completed and token_count carry the thread's total: the interrupted attempt's share is
    taken off the resumed one's, in its recorded usage and in the running budget."""
    from agentd.adapters.codex import since
    from agentd.attempt.meter import Running

    assert since(Usage(33, 21, 5), Usage(22, 14)) == Usage(11, 7, 5)
    assert since(Usage(10, None), Usage(22, 14)) == Usage(0, None)  # never negative, unknown stays unknown
    running = Running("codex", before=Usage(22, 14))
    running.feed(
        {"payload": {"type": "token_count", "info": {"total_token_usage": {"input_tokens": 40, "output_tokens": 20}}}}
    )
    assert (running.usage().input_tokens, running.usage().output_tokens) == (18, 6)


def test_an_interrupted_codex_attempt_whose_stream_named_no_thread_restarts(tmp_path: Path) -> None:
    first = attempt(tmp_path, "01FIRST")
    begin(first, 7, "codex", "01FIRST", None)
    rollout(first, (11, 7))
    named(first, thread="--dangerously-bypass-approvals-and-sandbox")  # the stream is the attempt's to write
    kept = keep_or_drop(first, 7, "codex", "01FIRST", interrupted=True, user=None)
    assert kept == {"kept": False, "why": "the harness named no session in its stream"}
    second = attempt(tmp_path, "02SECOND")
    assert begin(second, 7, "codex", "02SECOND", None) == HarnessSession(None)


@given(
    st.one_of(
        st.none(),
        st.integers(),
        st.text(max_size=20),
        st.dictionaries(st.text(max_size=20), st.integers() | st.text(max_size=5) | st.floats(), max_size=5),
    )
)
@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_any_spent_before_in_the_note_is_read_totally(tmp_path_factory: pytest.TempPathFactory, value: object) -> None:
    """The note is the services' own file, but an edited one never raises: counts that are not agentd's are
    not taken off (the attempt then counts the thread's whole total, the larger figure)."""
    tmp_path = tmp_path_factory.mktemp("spent")
    first = attempt(tmp_path, "01FIRST")
    begin(first, 7, "codex", "01FIRST", None)
    named(first)
    rollout(first, (11, 7))
    keep_or_drop(first, 7, "codex", "01FIRST", interrupted=True, user=None)
    note = json.loads(note_path(first).read_text())
    note_path(first).write_text(json.dumps({**note, "spent_before": value}))
    resumed = begin(attempt(tmp_path, "02SECOND"), 7, "codex", "02SECOND", None)
    assert resumed is not None and resumed.session_id == THREAD
    whole = (
        isinstance(value, dict)
        and value
        and all(
            k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
            and type(v) is int
            and v >= 0
            for k, v in value.items()
        )
    )
    assert (resumed.spent_before is not None) == bool(whole)


def test_a_rollout_the_services_cannot_read_is_no_total(tmp_path: Path) -> None:
    """Read at the attempt's end, before its run dir goes: a file the services may not open (the run user's,
    made private) is no total (the resumed attempt then counts the thread's whole), never an error that stops
    the attempt's ending. As root (CI), the read is tried by `nobody` in a child."""
    from agentd.attempt.meter import thread_spent

    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        base.chmod(0o755)
        first = attempt(base, "01FIRST")
        made = rollout(first, (11, 7))
        assert thread_spent(first.scratch / "codex", THREAD, None) is not None
        assert thread_spent(first.scratch / "codex", THREAD, os.getuid() + 1) is None  # another user's file: refused
        for folder in [p for p in made.parents if base in p.parents or p == base]:
            folder.chmod(0o755)
        made.chmod(0o600)
        if os.geteuid() != 0:
            made.chmod(0)
            assert thread_spent(first.scratch / "codex", THREAD, None) is None
            return
        child = os.fork()
        if child == 0:  # pragma: no cover (the child's exit code is the assertion)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                found = thread_spent(first.scratch / "codex", THREAD, None)
                os._exit(0 if found is None else 1)
            except BaseException:
                os._exit(2)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "nobody's read of a private rollout was not None"
    finally:
        shutil.rmtree(base)
