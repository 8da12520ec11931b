"""Whether the run user can start the tool-call hook (docs/policy.md, "When the hook cannot start").

claude and codex run the hook's command line themselves, as the attempt's user, and both run the call
when the hook cannot start (they fail open). So before such an attempt starts, the dispatcher runs that
very command line with `--check` (agentd/process/hook.py) as the run user, as attempts are started
(agentd/process/privilege.py `popen_identity`); anything but the hook's own "ok" line is a problem
sentence, and the attempt does not start. `agentd config check` runs the same check.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from contextlib import suppress
from pathlib import Path

from agentd.edge import cut, printable
from agentd.process.hook import CHECK
from agentd.process.privilege import RunUser, popen_identity, run_as

CHECK_TIMEOUT_S = 30.0  # a Python start, even on a loaded machine; one that hangs is a problem too
CHECK_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # the hook is started by an absolute path, isolated
OK_LINE = b"agentd hook ok"
FIX = 'install agentd where {who} can read it (docs/install-and-deploy.md, "When the hook cannot start")'
HARNESS_OF = {"claude-code": "claude", "codex": "codex"}  # the adapter kinds whose harness runs the hook command


def hook_problem(command: str, user: RunUser | None, within_s: float = CHECK_TIMEOUT_S) -> str | None:
    """None when `user` (this process's own for None) can start `command` (PolicyHook.command) and the hook
    parses its arguments; otherwise what failed, where, and the fix, in one sentence."""
    argv = [*shlex.split(command), CHECK]
    who = f"the run user {user.name}" if user is not None else "this service's user"
    try:
        code, out, err = _run(argv, user, within_s)
    except subprocess.TimeoutExpired:
        return (
            f"{who} started {argv[0]} but the tool-call hook did not pass its check within {within_s:g}s (a machine "
            "too loaded to start Python, or a disk that does not answer)"
        )
    except OSError as exc:
        if exc.filename is None:  # the switch to the user failed, before anything was run
            return f"this service cannot start processes as {who}: {_said(exc)}"
        return f"{who} cannot run {argv[0]}: {_said(exc)}; {FIX.format(who=who)}"
    if code == 0 and out.startswith(OK_LINE):
        return None
    said = _last_line(err) or _last_line(out) or f"it exited with {code}"
    return f"{who} cannot run the tool-call hook ({argv[0]} {_script(argv)}): {said}; {FIX.format(who=who)}"


def _run(argv: list[str], user: RunUser | None, within_s: float) -> tuple[int, bytes, bytes]:
    """Run `argv` as `user`, as attempts are started; past `within_s`, its process group is killed by a
    process of that user (the services hold no CAP_KILL) and TimeoutExpired raised."""
    with subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd="/",
        env=CHECK_ENV,
        start_new_session=True,
        **popen_identity(user),
    ) as child:
        try:
            out, err = child.communicate(timeout=within_s)
        except subprocess.TimeoutExpired:
            run_as(["kill", "-KILL", "--", f"-{child.pid}"], user)
            with suppress(OSError):  # the leader, if that kill could not run (as root or as itself, this can)
                child.kill()
            child.communicate()
            raise
        return child.returncode, out, err


def _said(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def _last_line(output: bytes) -> str:
    lines = output.decode(errors="replace").strip().splitlines()
    return cut(printable(lines[-1]), 300) if lines else ""


def _script(argv: list[str]) -> str:
    """The hook script in the command line (the first word that names a .py file), for the problem's sake."""
    return next((word for word in argv[1:] if word.endswith(".py")), "")


class HookChecks:
    """The dispatcher's checks, for the life of its process. A success is kept for the run user and the files
    the command names (the interpreter and the hook script, by their stat and the owner and mode of every
    folder above them, links followed): the next attempt's check costs a few stats, not a Python start. A
    failure is kept for nothing: the next attempt checks again (docs/decisions.md, "The hook is checked
    before the attempt")."""

    def __init__(self) -> None:
        self._passed: set[tuple[object, ...]] = set()
        self.failed: str | None = None  # the last check's problem, for the dispatcher's status line
        self.runs = 0  # how many checks started a process (the rest were kept successes)

    def problem(self, command: str, user: RunUser | None) -> str | None:
        """`hook_problem`, unless an identical check passed before."""
        key = _key(command, user)
        if key is not None and key in self._passed:
            self.failed = None
            return None
        self.runs += 1
        self.failed = hook_problem(command, user)
        if self.failed is None and key is not None:
            self._passed.add(key)
        return self.failed


def _key(command: str, user: RunUser | None) -> tuple[object, ...] | None:
    """What a kept success depends on: the user, and each word of the command that names a file (not the
    attempt's socket, which does not exist yet) with its signature; None if one changed as it was read."""
    try:
        files = [(word, *_signature(word)) for word in shlex.split(command) if os.path.isfile(word)]
    except OSError:
        return None
    return (user.uid if user is not None else None, *files)


def _signature(path: str) -> tuple[object, ...]:
    """The file's identity, size and time, and the identity, owner and mode of each folder on its way,
    as written and with its links followed: a chmod or a replaced folder anywhere above it is a new file."""
    real = Path(os.path.realpath(path))
    info = os.stat(real)
    folders = dict.fromkeys([*Path(os.path.abspath(path)).parents, *real.parents])
    way = tuple(_folder(folder) for folder in folders)
    return (info.st_ino, info.st_mode, info.st_uid, info.st_gid, info.st_size, info.st_mtime_ns, way)


def _folder(folder: Path) -> tuple[int, int, int, int]:
    info = os.stat(folder)
    return (info.st_ino, info.st_mode, info.st_uid, info.st_gid)
