"""A harness's own session, kept past an interrupted attempt so the free retry resumes it instead of
starting over (docs/reliability.md, "Resume, not restart"; issue 42).

An attempt's run dir (its scratch HOME, where claude writes its session) is removed when it ends. When
the attempt was interrupted (a service stop, or the boot sweep after the runtime died) and the task is
to run again, only what the harness needs to resume is sealed: read as the run user (whose files they are,
`tar`, links archived as links, never followed) into an archive in the task's evidence folder, which only
the services may open, bounded by KEPT_MAX_BYTES and holding only folders and regular files; its sha256 is
in the task's session note beside it (issue 50, finding 9: nothing of it is left where the run user, and so
another task's attempt, could change it). The next attempt of the task checks the archive against the note,
unpacks it as the run user into its own HOME and resumes the session by id; a session that is not the one
sealed is not resumed (`harness_session_discarded` says why). Any other ending drops it, so a session never
outlives its task's last attempt. The note is also what says which session the attempt ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from agentd.adapters import codex
from agentd.adapters.base import HarnessSession as HarnessSession
from agentd.adapters.base import SessionDiscarded
from agentd.evidence import AttemptPaths
from agentd.process.files import create_private, make_run_dir, open_beneath, remove_tree, write_private
from agentd.process.privilege import RunUser, output_as, run_as
from agentd.usage import TOKEN_KINDS, Usage

# harness kind → where under its HOME it keeps its sessions (claude 2.1.197 writes ~/.claude/projects/<cwd>/<id>.jsonl,
# codex 0.169.0 $CODEX_HOME/sessions/YYYY/MM/DD/rollout-…-<id>.jsonl, which is all `codex exec resume <id>` needs:
# docs/adapters.md, "Resume"). Kinds not here restart (docs/decisions.md).
SESSION_HOMES = {"claude-code": Path(".claude") / "projects", "codex": Path("codex") / "sessions"}
CHOSEN_HERE = frozenset({"claude-code"})  # a new session's id is agentd's; the others' the harness names
KEPT_MAX_BYTES = 64 * 1024 * 1024  # a longer session (its archive) restarts: a bound on what a task leaves on disk
NOTE = "harness_session.json"  # in the task's evidence folder
ARCHIVE = "harness_session.tar"  # the sealed session, beside the note
KEPT_MAX_ENTRIES = 10_000  # a session is a few files (measured: claude 2.1.197 one, codex 0.169.0 one and its folders)
NAMESPACE = uuid.UUID("5f0c8a43-9a36-4f57-9d3e-4d1b0e6a2c42")  # agentd's: a session id from an attempt id


def fresh_session_id(attempt_id: str) -> str:
    """A new session's id: a UUID (claude's `--session-id` takes no other) that its attempt id decides,
    so the id is known before the harness prints it, and the boot sweep needs nothing from a dead run."""
    return str(uuid.uuid5(NAMESPACE, attempt_id))


def unsealed_dir(paths: AttemptPaths, task_id: int) -> Path:
    """Where agentd before issue 50 kept a task's session, in the run user's reach (beside the run dirs): one
    found there is never resumed, and is removed with the rest of what the task kept."""
    return paths.run.parent / f"task-{task_id}.session"


def note_path(paths: AttemptPaths) -> Path:
    return paths.root.parent / NOTE


def archive_path(paths: AttemptPaths) -> Path:
    return paths.root.parent / ARCHIVE


def begin(paths: AttemptPaths, task_id: int, kind: str, attempt_id: str, user: RunUser | None) -> HarnessSession | None:
    """The session this attempt runs (None: its harness cannot resume one). A session the task's last
    attempt kept for this harness is unpacked into this attempt's HOME and resumed, if it is the one that was
    sealed (else a new session says which one was discarded, and why); anything else kept is dropped."""
    home = SESSION_HOMES.get(kind)
    note = _read_note(paths)
    taken = None
    if home is not None and note.get("kept") is True and note.get("kind") == kind:
        taken = _take_back(paths, home, note, user)
    drop(paths, task_id, user)
    if home is None:
        return None
    if isinstance(taken, HarnessSession):
        session = taken
    else:
        session = HarnessSession(fresh_session_id(attempt_id) if kind in CHOSEN_HERE else None, discarded=taken)
    named = {key: value for key, value in session.payload().items() if key != "discarded"}  # said by its event
    _write_note(paths, {"kind": kind, "attempt_id": attempt_id, **named, "kept": False})
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
    """At the attempt's end, before its run dir goes: seal its session when it was interrupted and will run
    again, else drop it. What was done, for the attempt's diagnostics; None: there was no session.
    `spent`: the session's running total (codex's), which its resumed attempt's counts go on from."""
    note, home = _read_note(paths), SESSION_HOMES.get(kind)
    if home is None or note.get("attempt_id") != attempt_id or not interrupted:
        drop(paths, task_id, user)
        return None
    session_id = note.get("session_id") or (codex.thread_id(paths.stdout) if kind == "codex" else None)
    if not isinstance(session_id, str):
        drop(paths, task_id, user)
        return {"kept": False, "why": "the harness named no session in its stream"}
    sealed = _keep(paths, home, user, session_id)
    if isinstance(sealed, str):
        drop(paths, task_id, user)
        return {"session_id": session_id, "kept": False, "why": sealed}
    kept = {
        "session_id": session_id,
        "kept": True,
        "sealed": sealed,
        **({"spent_before": _counts(spent)} if spent else {}),
    }
    _write_note(paths, {**note, **kept})
    return kept


def drop(paths: AttemptPaths, task_id: int, user: RunUser | None) -> None:
    """No session is kept for the task (its note, its archive, and a folder an earlier agentd kept it in).
    What is not there is not removed: most attempts (every script's) have none, and each would pay a failed
    unlink for it."""
    for path in (note_path(paths), archive_path(paths)):
        if os.path.lexists(path):
            path.unlink(missing_ok=True)
    if os.path.lexists(unsealed_dir(paths, task_id)):
        remove_tree(unsealed_dir(paths, task_id), user)


def _keep(paths: AttemptPaths, home: Path, user: RunUser | None, session_id: str) -> dict[str, Any] | str:
    """Seal the session in the attempt's HOME (its archive's sha256 and size); why not, if it was not."""
    source = paths.scratch / home
    if not os.path.lexists(source):
        return f"the harness left no session in {home}"
    if any(os.path.islink(p) for p in (source, *list(source.parents)[: len(home.parts)])):
        return f"{home} is a link; a session is kept only from the attempt's own HOME"
    return _seal(paths, home, user, session_id)  # one that fails leaves its archive to `drop`


def _seal(paths: AttemptPaths, home: Path, user: RunUser | None, session_id: str) -> dict[str, Any] | str:
    """The session folder archived by `tar` run as the run user (the files are theirs, and may be private to
    them), its output written as it comes into a 0600 file of the services' and hashed on the way."""
    digest, argv = hashlib.sha256(), ["tar", "-c", "-f", "-", "-C", str(paths.scratch / home.parent), "--", home.name]
    with os.fdopen(create_private(archive_path(paths)), "wb") as archive:

        def write(chunk: bytes) -> None:
            digest.update(chunk)
            archive.write(chunk)

        archived = output_as(argv, user, write, KEPT_MAX_BYTES)
        size = archive.tell()
    if not archived:
        return f"the session is larger than {KEPT_MAX_BYTES} bytes, or could not be read as the run user: it restarts"
    problem = _contents_problem(archive_path(paths), home.name, session_id)
    return problem or {"sha256": digest.hexdigest(), "bytes": size}


def _contents_problem(archive: Path, top: str, session_id: str) -> str | None:
    """What the archive holds that a session may not: anything but folders and regular files inside `top` (a
    link, a hard link, a device, a path that leaves it), or more than KEPT_MAX_ENTRIES of them; or no
    conversation of the session at all (claude keeps `<id>.jsonl`, codex `rollout-…-<id>.jsonl`, once the model
    first answered: an attempt turned away at its first call has none to resume). None when it is a session."""
    found = False
    try:
        with tarfile.open(archive, "r:") as members:
            for count, member in enumerate(members, 1):
                found = found or (member.isreg() and PurePosixPath(member.name).name.endswith(f"{session_id}.jsonl"))
                if count > KEPT_MAX_ENTRIES:
                    return f"the session holds more than {KEPT_MAX_ENTRIES} files and folders: it restarts"
                parts = PurePosixPath(member.name).parts
                if not parts or parts[0] != top or ".." in parts or not (member.isdir() or member.isreg()):
                    return (
                        f"the session holds {member.name!r}, not a folder or a regular file inside {top}: it restarts"
                    )
    except (OSError, tarfile.TarError) as exc:
        return f"the session's archive could not be read back ({exc}): it restarts"
    return None if found else f"the harness kept no conversation of session {session_id} (it never had an answer)"


def _take_back(
    paths: AttemptPaths, home: Path, note: dict[str, Any], user: RunUser | None
) -> HarnessSession | SessionDiscarded:
    """The kept session, unpacked into this attempt's HOME and named for its resume; or why it is not."""
    session_id, earlier = note.get("session_id"), note.get("attempt_id")
    named, kept_by = (value if isinstance(value, str) else None for value in (session_id, earlier))
    if named is None or kept_by is None:
        return SessionDiscarded(named, kept_by, "the task's session note names no session or no attempt")
    problem = _restore(paths, home, note.get("sealed"), user)
    if problem is not None:
        return SessionDiscarded(named, kept_by, problem)
    return HarnessSession(named, kept_by, spent_before=_usage(note.get("spent_before")))


def _restore(paths: AttemptPaths, home: Path, sealed: Any, user: RunUser | None) -> str | None:
    """Unpack the sealed archive (checked against the sha256 the note holds, read from the one descriptor that
    is then handed to `tar`) into this attempt's HOME, as the run user; why not, if it was not."""
    expected = sealed.get("sha256") if isinstance(sealed, dict) else None
    if not isinstance(expected, str):
        return "it was not sealed (an earlier agentd kept it where the run user could change it): it restarts"
    try:
        with open_beneath(paths.root.parent, ARCHIVE) as archive:
            found = _sha256(archive, KEPT_MAX_BYTES)
            if found != expected:
                return (
                    f"it changed after it was sealed (sha256 {found or 'of more than the bound'}, sealed as {expected})"
                )
            os.lseek(archive, 0, os.SEEK_SET)
            _make_dirs(paths.scratch, home.parent, user)
            target = str(paths.scratch / home.parent)
            unpacked = run_as(
                ["tar", "-x", "-f", "-", "-C", target, "--no-same-owner", "--no-same-permissions"], user, archive
            )
    except FileNotFoundError:
        return "its sealed copy is missing"
    except OSError as exc:
        return f"its sealed copy could not be read ({exc})"
    if unpacked is None or unpacked.returncode != 0:
        remove_tree(paths.scratch / home, user)  # what was unpacked before it failed: the new session starts clean
        return "its sealed copy could not be unpacked into the attempt's HOME"
    return None


def _sha256(fd: int, limit: int) -> str | None:
    """The sha256 of what the descriptor reads from where it stands; None past `limit` bytes."""
    digest, read = hashlib.sha256(), 0
    while chunk := os.read(fd, 1 << 20):
        read += len(chunk)
        if read > limit:
            return None
        digest.update(chunk)
    return digest.hexdigest()


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


def _read_note(paths: AttemptPaths) -> dict[str, Any]:
    """The task's session note; {} when there is none or it is not one agentd wrote."""
    try:
        value = json.loads(note_path(paths).read_bytes())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write_note(paths: AttemptPaths, note: dict[str, Any]) -> None:
    write_private(note_path(paths), json.dumps(note, sort_keys=True))
