"""A harness's own session, kept past an interrupted attempt so the free retry resumes it instead of
starting over (docs/reliability.md, "Resume, not restart"; issue 42).

An attempt's run dir (its scratch HOME, where claude writes its session) is removed when it ends. When
the attempt was interrupted (a service stop, or the boot sweep after the runtime died) and the task is
to run again, only what the harness needs to resume is moved out of it, into the task's session folder
beside the run dirs: the run user's files, in a 0700 folder (or the run user's group's run-dir mode),
bounded by KEPT_MAX_BYTES. The next attempt of the task takes it back into its own HOME and resumes the
session by id. Any other ending drops it, so a session never outlives its task's last attempt. What
happened is written in a note in the task's evidence folder (the services' alone), which is also what
says which session the attempt ran.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from agentd.adapters import codex
from agentd.adapters.base import HarnessSession as HarnessSession
from agentd.evidence import AttemptPaths
from agentd.process.files import make_run_dir, write_private
from agentd.process.privilege import RunUser, run_as
from agentd.process.runner import remove_tree
from agentd.usage import TOKEN_KINDS, Usage

# harness kind → where under its HOME it keeps its sessions (claude 2.1.197 writes ~/.claude/projects/<cwd>/<id>.jsonl,
# codex 0.169.0 $CODEX_HOME/sessions/YYYY/MM/DD/rollout-…-<id>.jsonl, which is all `codex exec resume <id>` needs:
# docs/adapters.md, "Resume"). Kinds not here restart (docs/decisions.md).
SESSION_HOMES = {"claude-code": Path(".claude") / "projects", "codex": Path("codex") / "sessions"}
CHOSEN_HERE = frozenset({"claude-code"})  # a new session's id is agentd's; the others' the harness names
KEPT_MAX_BYTES = 64 * 1024 * 1024  # a longer session restarts: a bound on what a task leaves on disk
NOTE = "harness_session.json"  # in the task's evidence folder
NAMESPACE = uuid.UUID("5f0c8a43-9a36-4f57-9d3e-4d1b0e6a2c42")  # agentd's: a session id from an attempt id


def fresh_session_id(attempt_id: str) -> str:
    """A new session's id: a UUID (claude's `--session-id` takes no other) that its attempt id decides,
    so the id is known before the harness prints it, and the boot sweep needs nothing from a dead run."""
    return str(uuid.uuid5(NAMESPACE, attempt_id))


def kept_dir(paths: AttemptPaths, task_id: int) -> Path:
    """Where a task's interrupted session waits for its next attempt: beside the run dirs (the same
    filesystem, so keeping it is a rename, and the run user may write there)."""
    return paths.run.parent / f"task-{task_id}.session"


def note_path(paths: AttemptPaths) -> Path:
    return paths.root.parent / NOTE


def begin(paths: AttemptPaths, task_id: int, kind: str, attempt_id: str, user: RunUser | None) -> HarnessSession | None:
    """The session this attempt runs (None: its harness cannot resume one). A session the task's last
    attempt kept for this harness is moved into this attempt's HOME and resumed; anything else kept is dropped."""
    home = SESSION_HOMES.get(kind)
    note = _read_note(paths)
    resumed = None
    if home is not None and note.get("kept") is True and note.get("kind") == kind:
        resumed = _take_back(paths, task_id, home, note, user)
    drop(paths, task_id, user)
    if home is None:
        return None
    session = resumed or HarnessSession(fresh_session_id(attempt_id) if kind in CHOSEN_HERE else None)
    _write_note(paths, {"kind": kind, "attempt_id": attempt_id, **session.payload(), "kept": False})
    return session


def keep_or_drop(
    paths: AttemptPaths,
    task_id: int,
    kind: str,
    attempt_id: str,
    *,
    interrupted: bool,
    user: RunUser | None,
    spent: Usage | None = None,
) -> dict[str, Any] | None:
    """At the attempt's end, before its run dir goes: keep its session when it was interrupted and will
    run again, else drop it. What was done, for the attempt's diagnostics; None: there was no session.
    `spent`: the session's running total (codex's), which its resumed attempt's counts go on from."""
    note, home = _read_note(paths), SESSION_HOMES.get(kind)
    if home is None or note.get("attempt_id") != attempt_id or not interrupted:
        drop(paths, task_id, user)
        return None
    session_id = note.get("session_id") or (codex.thread_id(paths.stdout) if kind == "codex" else None)
    if not isinstance(session_id, str):
        drop(paths, task_id, user)
        return {"kept": False, "why": "the harness named no session in its stream"}
    problem = _keep(paths, task_id, home, user)
    if problem is not None:
        drop(paths, task_id, user)
        return {"session_id": session_id, "kept": False, "why": problem}
    kept = {"session_id": session_id, "kept": True, **({"spent_before": _counts(spent)} if spent else {})}
    _write_note(paths, {**note, **kept})
    return kept


def drop(paths: AttemptPaths, task_id: int, user: RunUser | None) -> None:
    """No session is kept for the task (its note, and the folder). What is not there is not removed: most
    attempts (every script's) have neither, and each would pay a failed unlink for it."""
    if os.path.lexists(note_path(paths)):
        note_path(paths).unlink(missing_ok=True)
    if os.path.lexists(kept_dir(paths, task_id)):
        remove_tree(kept_dir(paths, task_id), user)


def _keep(paths: AttemptPaths, task_id: int, home: Path, user: RunUser | None) -> str | None:
    """Move the session out of the run dir; why not, if it was not."""
    source = paths.scratch / home
    if not os.path.lexists(source):
        return f"the harness left no session in {home}"
    if any(os.path.islink(p) for p in (source, *list(source.parents)[: len(home.parts)])):
        return f"{home} is a link; a session is kept only from the attempt's own HOME"
    size = _size(source, user)
    if size is None or size > KEPT_MAX_BYTES:
        return f"the session is larger than {KEPT_MAX_BYTES} bytes (or could not be measured): it restarts"
    target = kept_dir(paths, task_id) / home
    _make_dirs(kept_dir(paths, task_id), home.parent, user)
    return None if _move(source, target, user) else f"it could not be moved out of {paths.run}"


def _take_back(
    paths: AttemptPaths, task_id: int, home: Path, note: dict[str, Any], user: RunUser | None
) -> HarnessSession | None:
    source = kept_dir(paths, task_id) / home
    session_id, earlier = note.get("session_id"), note.get("attempt_id")
    if not isinstance(session_id, str) or not isinstance(earlier, str) or os.path.islink(source):
        return None
    _make_dirs(paths.scratch, home.parent, user)
    if not _move(source, paths.scratch / home, user):
        return None
    return HarnessSession(session_id, earlier, spent_before=_usage(note.get("spent_before")))


def _counts(usage: Usage) -> dict[str, int]:
    return {kind: count for kind in TOKEN_KINDS if isinstance(count := getattr(usage, kind), int)}


def _usage(counts: Any) -> Usage | None:
    """The note's `spent_before`, if it is one agentd wrote (counts that are whole numbers, nothing else)."""
    if not isinstance(counts, dict) or not counts:
        return None
    if any(k not in TOKEN_KINDS or type(v) is not int or v < 0 for k, v in counts.items()):
        return None
    return Usage(**counts)


def _make_dirs(base: Path, relative: Path, user: RunUser | None) -> None:
    make_run_dir(base, user)
    for depth in range(1, len(relative.parts) + 1):
        make_run_dir(base.joinpath(*relative.parts[:depth]), user)


def _move(source: Path, target: Path, user: RunUser | None) -> bool:
    """A rename, as the run user (whose files they are), never through a link at the end."""
    done = run_as(["mv", "-T", "--", str(source), str(target)], user)
    return done is not None and done.returncode == 0


def _size(path: Path, user: RunUser | None) -> int | None:
    """Bytes under `path`, links not followed (`du -sb`, as the run user: the folder is theirs)."""
    done = run_as(["du", "-s", "-b", "-P", "--", str(path)], user)
    if done is None or done.returncode != 0:
        return None
    first = done.stdout.split(b"\t", 1)[0]
    return int(first) if first.isdigit() else None


def _read_note(paths: AttemptPaths) -> dict[str, Any]:
    """The task's session note; {} when there is none or it is not one agentd wrote."""
    try:
        value = json.loads(note_path(paths).read_bytes())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write_note(paths: AttemptPaths, note: dict[str, Any]) -> None:
    write_private(note_path(paths), json.dumps(note, sort_keys=True))
