"""A kept harness session is sealed out of the run user's reach (issue 50, finding 9; docs/reliability.md, "Resume,
not restart"): at the interrupted attempt's end it is archived as the run user into the task's evidence folder (the
services' alone), its sha256 in the note; the next attempt unpacks it only if it is still that archive, else starts a
new session and says why. Real processes change it between the attempts; real users where the machine allows. The real
harnesses resuming a sealed session are in test_resume_harness.py."""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

import privsep
import pytest
from rig import Rig
from test_session_resume import attempt, transcript
from test_web_live import running

from agentd.adapters.base import SessionDiscarded
from agentd.attempt import session as sessions
from agentd.attempt.session import (
    HarnessSession,
    archive_path,
    begin,
    fresh_session_id,
    keep_or_drop,
    note_path,
    unsealed_dir,
)
from agentd.evidence import AttemptPaths, make_attempt_dir
from agentd.outlook.agent_runtime import EVENT_MAP
from agentd.process.files import remove_tree
from agentd.process.privilege import RunUser, output_as, run_as


def interrupted_claude(paths: AttemptPaths, text: str = "the conversation so far") -> str:
    """The first attempt of task 7: claude's session written, the attempt interrupted, its session kept, its run dir
    gone (as agentd/attempt/conclude.py ends one). The session's id."""
    session = begin(paths, 7, "claude-code", "01FIRST", None)
    assert session is not None and session.session_id is not None
    transcript(paths, session.session_id, text)
    kept = keep_or_drop(paths, 7, "claude-code", "01FIRST", interrupted=True, user=None)
    assert kept is not None and kept["kept"] is True, kept
    remove_tree(paths.run)
    return session.session_id


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_a_sealed_session_another_process_changed_is_not_resumed_and_says_why(tmp_path: Path) -> None:
    first = attempt(tmp_path, "01FIRST")
    session_id = interrupted_claude(first)
    changed = subprocess.run(  # a real second process, between the attempts, as the only user that may write there
        [sys.executable, "-c", "import sys; open(sys.argv[1], 'r+b').write(b'rewritten')", str(archive_path(first))],
        check=False,
    )
    assert changed.returncode == 0
    second = attempt(tmp_path, "02SECOND")
    started = begin(second, 7, "claude-code", "02SECOND", None)
    assert started is not None and started.session_id == fresh_session_id("02SECOND") and not started.resumed
    assert started.discarded is not None and started.discarded.session_id == session_id
    assert started.discarded.kept_by == "01FIRST" and "changed after it was sealed" in started.discarded.why
    assert not (second.scratch / ".claude" / "projects").exists()  # nothing of it reaches the new attempt
    assert not archive_path(second).exists() and json.loads(note_path(second).read_text())["kept"] is False


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_an_unchanged_sealed_session_resumes_with_what_was_sealed(tmp_path: Path) -> None:
    first = attempt(tmp_path, "01FIRST")
    session_id = interrupted_claude(first, "every turn so far")
    second = attempt(tmp_path, "02SECOND")
    assert begin(second, 7, "claude-code", "02SECOND", None) == HarnessSession(session_id, resumed_from="01FIRST")
    assert (second.scratch / ".claude" / "projects" / "-work-space" / f"{session_id}.jsonl").read_text() == (
        "every turn so far"
    )


def test_a_session_an_earlier_agentd_kept_beside_the_run_dirs_is_not_resumed_and_goes(tmp_path: Path) -> None:
    """Before issue 50 the session waited in runs/task-N.session, where the run user could write: one kept so (a
    service stopped for the upgrade) is not resumed, and is removed."""
    first = attempt(tmp_path, "01FIRST")
    session = begin(first, 7, "claude-code", "01FIRST", None)
    assert session is not None and session.session_id is not None
    legacy = unsealed_dir(first, 7) / ".claude" / "projects" / "-work-space"
    legacy.mkdir(parents=True)
    (legacy / f"{session.session_id}.jsonl").write_text("anyone's")
    note = {"kind": "claude-code", "attempt_id": "01FIRST", "kept": True, "session_id": session.session_id}
    note_path(first).write_text(json.dumps(note))
    started = begin(attempt(tmp_path, "02SECOND"), 7, "claude-code", "02SECOND", None)
    assert started is not None and not started.resumed and started.discarded is not None
    assert "was not sealed" in started.discarded.why
    assert not unsealed_dir(first, 7).exists()


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_a_session_holding_a_link_is_not_kept(tmp_path: Path) -> None:
    """A session is folders and regular files: a link in it (to the services' database, say) is not sealed."""
    first = attempt(tmp_path, "01FIRST")
    session = begin(first, 7, "claude-code", "01FIRST", None)
    assert session is not None and session.session_id is not None
    path = transcript(first, session.session_id)
    os.symlink("/etc/passwd", path.parent / "linked.jsonl")
    kept = keep_or_drop(first, 7, "claude-code", "01FIRST", interrupted=True, user=None)
    assert kept is not None and kept["kept"] is False and "linked.jsonl" in kept["why"], kept
    assert not archive_path(first).exists() and not note_path(first).exists()


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_a_session_of_more_files_than_the_bound_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions, "KEPT_MAX_ENTRIES", 3)  # projects/, its folder, the transcript: the 4th is one more
    first = attempt(tmp_path, "01FIRST")
    session = begin(first, 7, "claude-code", "01FIRST", None)
    assert session is not None and session.session_id is not None
    (transcript(first, session.session_id).parent / "more.jsonl").write_text("more")
    kept = keep_or_drop(first, 7, "claude-code", "01FIRST", interrupted=True, user=None)
    assert kept is not None and kept["kept"] is False and "more than 3 files" in kept["why"], kept
    assert not archive_path(first).exists()


def test_a_discarded_session_is_an_event_before_the_attempt_starts(rig: Rig) -> None:
    task_id, attempt_id = running(rig)
    new = HarnessSession("new-id", discarded=SessionDiscarded("old-id", "01FIRST", "it changed after it was sealed"))
    rig.store.mark_attempt_started(task_id, attempt_id, 4242, rig.clock.now(), session=new.payload())
    events = [e for e in rig.store.read_events(task_id=task_id) if e.attempt_id == attempt_id]
    assert [e.type for e in events] == ["task_claimed", "harness_session_discarded", "task_started"]
    events = events[1:]
    assert events[0].payload == {"session_id": "old-id", "kept_by": "01FIRST", "why": "it changed after it was sealed"}
    assert events[1].payload["harness_session_id"] == "new-id"
    assert EVENT_MAP["harness_session_discarded"] == "runtime.warning"


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_a_helper_s_output_is_never_taken_past_its_limit() -> None:
    taken: list[bytes] = []
    assert output_as(["head", "-c", "100", "/dev/zero"], None, taken.append, 100) is True
    assert sum(map(len, taken)) == 100
    assert output_as(["head", "-c", "101", "/dev/zero"], None, taken.append, 100) is False
    assert output_as(["yes"], None, lambda _: None, 1 << 20) is False  # an endless one is killed at the limit
    assert output_as(["false"], None, lambda _: None, 100) is False
    assert output_as(["/no/such/command"], None, lambda _: None, 100) is False


@pytest.mark.deep
@pytest.mark.process
def test_a_session_kept_as_the_run_user_is_out_of_its_reach_until_it_resumes_unchanged() -> None:
    """With real users, laid out as `agentd install` lays them out: the session is the run user's, private to it
    (0600: the services cannot read it as themselves); it is sealed as that user. Between the attempts a process of
    the run user (another task's attempt) can neither change the sealed copy nor leave a session where an earlier
    agentd kept one; the next attempt resumes exactly what was sealed."""
    privsep.require()
    with privsep.priv_agent() as agent:
        entry = pwd.getpwnam(agent.run)
        user = RunUser(agent.run, entry.pw_uid, entry.pw_gid)
        runs = agent.run_area / "runs"

        def paths_of(attempt_id: str) -> AttemptPaths:
            paths = AttemptPaths(agent.state_dir / "attempts" / "7" / attempt_id, runs / attempt_id)
            (agent.state_dir / "attempts").mkdir(exist_ok=True)
            make_attempt_dir(paths, user)
            return paths

        first = paths_of("01FIRST")
        session = begin(first, 7, "claude-code", "01FIRST", user)
        assert session is not None and session.session_id is not None
        folder = first.scratch / ".claude" / "projects" / "-work-space"
        private = f'mkdir -p "$1" && printf sealed > "$1/{session.session_id}.jsonl" && chmod -R go= "$1"'
        wrote = run_as(["sh", "-c", private, "sh", str(folder)], user)
        assert wrote is not None and wrote.returncode == 0, wrote
        kept = keep_or_drop(first, 7, "claude-code", "01FIRST", interrupted=True, user=user)
        assert kept is not None and kept["kept"] is True, kept
        remove_tree(first.run, user)
        sealed = os.stat(archive_path(first))
        assert stat.S_IMODE(sealed.st_mode) == 0o600 and sealed.st_uid == os.geteuid()

        changed = run_as(
            ["sh", "-c", 'printf x >> "$1"; mkdir "$2"', "sh", str(archive_path(first)), str(unsealed_dir(first, 7))],
            user,
        )
        assert changed is not None and changed.returncode != 0
        assert b"Permission denied" in changed.stderr and not unsealed_dir(first, 7).exists()
        assert os.stat(archive_path(first)).st_size == sealed.st_size

        second = paths_of("02SECOND")
        assert begin(second, 7, "claude-code", "02SECOND", user) == HarnessSession(session.session_id, "01FIRST")
        unpacked = second.scratch / ".claude" / "projects" / "-work-space" / f"{session.session_id}.jsonl"
        assert unpacked.read_text() == "sealed" and os.stat(unpacked).st_uid == user.uid  # the run user's again
