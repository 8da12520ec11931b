"""The boundary between an agent and its operator (docs/install-and-deploy.md, "The boundary").

Under the units, an agent's services run as one user that owns the state dir; every attempt runs as
a second user, `[dispatch] run_as`, that owns only the workspace and the run dirs; every sensor runs as
a third, `[sensors] run_as`, whose home (one folder per sensor) no attempt can reach. The services
keep the capabilities that switch users (CAP_SETUID, CAP_SETGID) to themselves:
`keep_capabilities_to_self` clears the ambient and inheritable sets at start, so no process they
start (an attempt, a sensor, a message handler) holds any.

Whoever runs a control verb is recorded (`operator_identity`); an attempt never may
(`refuse_inside_attempt`): not with `AGENTD_ATTEMPT_ID` in its environment, not as the run user; nor
may a sensor (`AGENTD_SENSOR_RUN`, the sensors' user).
"""

from __future__ import annotations

import getpass
import grp
import os
import pwd
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from agentd import frozen_value
from agentd.edge import quoted
from agentd.errors import AgentdError, InputError

if TYPE_CHECKING:
    import subprocess

    from agentd.config import Config

# ctypes (with ctypes.util's tempfile and random) and subprocess are imported by the functions that use them,
# not here: `agentd status` and `task add` read this module's boundary line and identities, and a command
# imports only what it uses (docs/decisions.md, "Start-up").

CAP_KILL, CAP_SETGID, CAP_SETUID = 5, 6, 7
SWITCH_CAPS = (CAP_SETUID, CAP_SETGID)
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
RUN_UMASK = 0o007  # what the run user writes, the service user (in its group) may read and remove


class Identity(TypedDict, total=False):
    """What Popen (and anyio's open_process/run_process) take to start a child as another user."""

    user: int
    group: int
    extra_groups: list[int]
    umask: int


class BoundaryError(AgentdError):
    """The service cannot keep the boundary it was configured to keep; it does not start."""

    exit_code = 2


@frozen_value
class RunUser:
    """A user the services start others' processes as: attempts' (`[dispatch] run_as`) or sensors'."""

    name: str
    uid: int
    gid: int
    key: str = "dispatch.run_as"  # the setting that names it, for what is said about it


def popen_identity(user: RunUser | None) -> Identity:
    """The switch to the run user, done in the child between fork and exec: its uid and its own group,
    no supplementary groups, and a umask that keeps what it writes readable by that group (which is
    the services' own: docs/install-and-deploy.md, "The boundary"). Nothing for None: the service's own user."""
    if user is None:
        return {}
    return {"user": user.uid, "group": user.gid, "extra_groups": [], "umask": RUN_UMASK}


HELPER_TIMEOUT_S = 60


def run_as(
    argv: list[str], user: RunUser | None, stdin: int | None = None
) -> subprocess.CompletedProcess[bytes] | None:
    """A short helper command (`rm`, `chmod`) as `user` (as this process for None), its output captured;
    None if it could not run. No capability passes on (`keep_capabilities_to_self`). `stdin`: a descriptor
    it reads from, which this process opened (the command needs no right to the file's path)."""
    import subprocess

    try:
        return subprocess.run(
            argv, check=False, stdin=stdin, capture_output=True, timeout=HELPER_TIMEOUT_S, **popen_identity(user)
        )
    except (OSError, subprocess.SubprocessError):
        return None


def output_as(argv: list[str], user: RunUser | None, write: Callable[[bytes], object], limit: int) -> bool:
    """A helper command as `user` (as `run_as` runs one) whose output is handed to `write` as it comes, never
    held whole: True when it ended well having printed at most `limit` bytes. One that prints more is killed
    there, as is one still running after HELPER_TIMEOUT_S (False: what `write` was given is not to be used)."""
    import subprocess

    try:
        child = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, **popen_identity(user)
        )
    except (OSError, subprocess.SubprocessError):
        return False
    deadline = threading.Timer(HELPER_TIMEOUT_S, child.kill)
    deadline.start()
    printed = 0
    with child:  # the pipe closed and the child reaped, however this ends
        try:
            assert child.stdout is not None
            while chunk := child.stdout.read(1 << 20):
                printed += len(chunk)
                if printed > limit:
                    child.kill()
                    return False
                write(chunk)
        finally:
            deadline.cancel()
    return child.returncode == 0


def run_user(name: str | None, key: str = "dispatch.run_as") -> RunUser | None:
    """The user `key` names (`[dispatch] run_as` unless told), looked up now; None when what it runs
    runs as the service itself."""
    if name is None:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise BoundaryError(
            f"{key}: no user {name!r} on this system; create it (`agentd install` does, from "
            "/etc/sysusers.d) or remove run_as to run them as the service's own user"
        ) from None
    if entry.pw_uid == 0:
        raise BoundaryError(f"{key}: {name!r} is root; expected an unprivileged user")
    return RunUser(name, entry.pw_uid, entry.pw_gid, key)


def uid_of(name: str | None) -> int | None:
    """The uid of the user `name` (an attempt's run user: whose files its reports must be), or None for
    no user or one that does not exist (then its attempt could not have started)."""
    if name is None:
        return None
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def sensor_user(run_as: str | None, sensors_run_as: str | None) -> RunUser | None:
    """Who sensors run as: `[sensors] run_as`, or (unset) the attempts' user, as before it existed."""
    if sensors_run_as is None or sensors_run_as == run_as:
        return run_user(run_as)
    return run_user(sensors_run_as, "sensors.run_as")


def sensor_home_base(user: RunUser, services: int | None = None) -> Path:
    """The folder sensors' own folders are made in when they have a user of their own: that user's
    home (passwd; `agentd install` makes it /var/lib/agentd-run/NAME/sensors, 0700). Only the sensors'
    user may enter it, and no one but root and the services' user (this process's, or `services`) may
    replace it or a folder above it: an attempt's user above all.

    :raises BoundaryError: naming the folder and what is wrong with it.
    """
    home = Path(pwd.getpwuid(user.uid).pw_dir)
    problem = home_problem(home, user, {0, os.geteuid(), services if services is not None else 0})
    if problem is None:
        return home
    raise BoundaryError(
        f"{user.key}: {user.name}'s home {home} {problem}; sensors keep their own folders there, out of every "
        "attempt's reach (`agentd install` makes it: run it again, or `systemd-tmpfiles --create`)"
    )


def home_problem(home: Path, user: RunUser, trusted: set[int]) -> str | None:
    """What is wrong with `home` as the folder only `user` may enter and only `trusted` uids (and root)
    may replace, or a folder above it (a sticky one anyone may write to is fine: only its owner may
    rename what is in it); None when nothing is."""
    if not home.is_absolute() or ".." in home.parts:
        return "is not an absolute path"
    try:
        info = os.lstat(home)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder (a link is not followed)"
    if info.st_uid != user.uid or info.st_mode & 0o077:
        return f"must be {user.name}'s alone (owner {info.st_uid}, mode {info.st_mode & 0o7777:04o}; expected 0700)"
    for folder in home.parents:
        above = os.lstat(folder)
        if stat.S_ISLNK(above.st_mode):
            return f"is reached through a link ({folder})"
        open_to_others = above.st_mode & 0o022 and not above.st_mode & stat.S_ISVTX
        if above.st_uid not in trusted or open_to_others:
            return f"is inside {folder}, which a user other than root or this service's may change"
    return None


def shared_group(first: RunUser, second: RunUser) -> int | None:
    """A group both users are in (as their own group or as members), or None: the attempts' and the
    sensors' users share none under `agentd install`'s users (units/agentd.sysusers), or either could reach
    what the other writes in their folders (an older install made both in the services' group)."""
    common = _groups_of(first) & _groups_of(second)
    return min(common) if common else None


def not_in_own_group(name: str) -> str | None:
    """What to do when the user `name` exists but its group is not its own (an older `agentd install` made
    the run and sensor users in the services' group); None when it is, or when either is missing."""
    try:
        gid, own = pwd.getpwnam(name).pw_gid, grp.getgrnam(name).gr_gid
    except KeyError:
        return None
    if gid == own:
        return None
    return (
        f"{name}'s group is {_group_name(gid)}, not its own: run `usermod -g {name} {name}` and restart the agent's "
        "services, so that attempts and sensors share no group"
    )


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"


def _groups_of(user: RunUser) -> set[int]:
    return {user.gid} | {entry.gr_gid for entry in grp.getgrall() if user.name in entry.gr_mem}


def require_switch(user: RunUser | None) -> None:
    """A service configured with a run user refuses to start unless it can become that user and it is
    not that user itself (then the boundary would be a fiction)."""
    if user is None:
        return
    if os.geteuid() == user.uid:
        raise BoundaryError(
            f"{user.key} is {user.name!r}, the user this service runs as: what it runs needs a user of its own"
        )
    if not can_switch_users():
        raise BoundaryError(
            f"{user.key} is {user.name!r} but this process cannot switch users (it needs CAP_SETUID and "
            "CAP_SETGID: the units grant them with AmbientCapabilities=); run it under its unit, as root, "
            "or without run_as"
        )


def can_switch_users() -> bool:
    return os.geteuid() == 0 or all(effective_capabilities() >> cap & 1 for cap in SWITCH_CAPS)


def effective_capabilities() -> int:
    return _status_field("CapEff")


def ambient_capabilities() -> int:
    return _status_field("CapAmb")


def _status_field(name: str) -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{name}:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def keep_capabilities_to_self() -> None:
    """Clear this process's ambient and inheritable capability sets, keeping its effective and
    permitted ones: whatever it executes starts with none (execve gives a child the ambient set, and
    the inheritable set meets a program's file capabilities). A no-op where there is nothing to clear."""
    import ctypes

    class _CapHeader(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class _CapData(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)  # this program's own libc: find_library would run ldconfig each start
    if ambient_capabilities() and libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        raise BoundaryError(f"cannot clear the ambient capabilities: {os.strerror(ctypes.get_errno())}")
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return  # no capabilities to read: nothing to clear either
    if data[0].inheritable or data[1].inheritable:
        data[0].inheritable = data[1].inheritable = 0
        if libc.capset(ctypes.byref(header), data) != 0:
            raise BoundaryError(f"cannot clear the inheritable capabilities: {os.strerror(ctypes.get_errno())}")


def boundary_line(user: RunUser | None, sensors: RunUser | None = None, sensors_problem: str | None = None) -> str:
    """What `status` and the service start line say about who attempts and sensors run as."""
    if user is None:
        line = (
            f"attempts run as this service's own user ({_name(os.geteuid())}): approvals, budgets and pause are "
            "advisory (set [dispatch] run_as, as `agentd install` does, to enforce them)"
        )
    else:
        line = f"attempts run as {user.name} (uid {user.uid}): they cannot act as the operator"
    if sensors_problem is not None:
        return f"{line}; no sensor can start: {sensors_problem}"
    if sensors is not None and user is not None and sensors.uid != user.uid and (gid := shared_group(user, sensors)):
        return (
            f"{line}; sensors run as {sensors.name} (uid {sensors.uid}) but share group {gid} with the attempts, so "
            f"either can change what the other reads: give each a group of its own (`usermod -g {sensors.name} "
            f"{sensors.name}` and `usermod -g {user.name} {user.name}`, as `agentd install` says)"
        )
    if sensors is not None and (user is None or sensors.uid != user.uid):
        return f"{line}; sensors run as {sensors.name} (uid {sensors.uid}), out of the attempts' reach"
    if user is None:
        return line
    return line + (
        "; sensors run as that user too, so an attempt can reach a running sensor and what it reports is "
        "trusted no more than an attempt (set [sensors] run_as, as `agentd install` does)"
    )


def boundary(run_as: str | None, sensors_run_as: str | None = None, state_dir: Path | None = None) -> dict[str, Any]:
    """The boundary as `agentd status` reports it: who attempts and sensors run as, whether approvals hold
    (and, with the state dir, whose owner is the services' user, whether sensors could start)."""
    found: dict[str, Any] = {"run_as": run_as, "sensors_run_as": sensors_run_as or run_as}
    try:
        user = run_user(run_as)
    except BoundaryError as exc:
        return {**found, "enforced": False, "line": f"no attempt can start: {exc}"}
    sensors, problem = None, None
    try:
        sensors = sensor_user(run_as, sensors_run_as)
        if sensors is not None and sensors.key == "sensors.run_as":
            sensor_home_base(sensors, services=owner_of(state_dir))
    except BoundaryError as exc:
        problem = str(exc)
    return {**found, "enforced": user is not None, "line": boundary_line(user, sensors, problem)}


def boundary_of(config: Config) -> dict[str, Any]:
    """`boundary` for an agent's config: its run and sensor users, its state dir."""
    return boundary(config.dispatch.run_as, config.sensors.run_as, config.paths.state_dir)


def owner_of(path: Path | None) -> int | None:
    """The uid that owns `path` (the state dir: the services' user), or None if it cannot be told."""
    try:
        return None if path is None else os.stat(path).st_uid
    except OSError:
        return None


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def operator_identity() -> dict[str, Any]:
    """Who runs this command: the real OS user, and under sudo the person who ran sudo."""
    uid = os.getuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = getpass.getuser() if uid == os.geteuid() else f"uid:{uid}"
    found: dict[str, Any] = {"user": name, "uid": uid}
    sudo_user = os.environ.get("SUDO_USER")
    if sudo_user and sudo_user != name and _is_account(sudo_user):
        found["sudo_user"] = sudo_user
    return found


def _is_account(name: str) -> bool:
    """$SUDO_USER names an account of this system: anything else (text that is no user, a megabyte, a
    newline) is not recorded as who ran sudo."""
    if len(name) > 256 or not name.isprintable():
        return False
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def operator_name() -> str:
    """`alice`, or `alice (sudo as agentd-arc)`: how events and `status` name the operator."""
    who = operator_identity()
    return f"{who['sudo_user']} (sudo as {who['user']})" if "sudo_user" in who else str(who["user"])


# Sources agentd sets itself: an operator's --source may not claim to be one of them.
RESERVED_SOURCES = ("operator", "sensor", "schedule", "workflow", "follow_up", "followup", "agentd", "fleet")


def operator_source(given: str | None) -> str:
    """`operator:<who>` by default; an operator's own source, unless it claims a namespace agentd sets
    (`sensor:…` from a person would make their task look like the sensor's; `operator:x`, like x's)."""
    if not given:
        return f"operator:{operator_identity()['user']}"
    namespace = given.split(":", 1)[0].strip().lower()
    if namespace in RESERVED_SOURCES:
        reserved = ", ".join(f"{name}:" for name in RESERVED_SOURCES)
        raise InputError(f"--source: {given!r} claims a namespace agentd sets itself ({reserved}); name another")
    return given


def refuse_inside_attempt(run_as: str | None, what: str, sensors_run_as: str | None = None) -> None:
    """An attempt (or a sensor) never acts as its operator: a control verb run with AGENTD_ATTEMPT_ID or
    AGENTD_SENSOR_RUN in its environment, or as the user attempts or sensors run as, is refused before
    it reads or writes anything."""
    for variable, whose in (("AGENTD_ATTEMPT_ID", "an attempt"), ("AGENTD_SENSOR_RUN", "a sensor run")):
        if marker := os.environ.get(variable):
            raise InputError(
                f"{what}: refused inside {whose} ({variable}={_quoted_marker(marker)}); it cannot act as its operator"
            )
    for name, runs in ((run_as, "attempts"), (sensors_run_as, "sensors")):
        if name is None:
            continue
        try:
            uid = pwd.getpwnam(name).pw_uid
        except KeyError:
            continue
        if os.getuid() == uid or os.geteuid() == uid:
            raise InputError(f"{what}: refused for {name}, the user {runs} run as; run it as the operator")


def _quoted_marker(value: str) -> str:
    """An environment marker as an error message shows it: one printable line, at most 64 characters."""
    return quoted(value[:64]) if not value.isprintable() or len(value) > 64 else value
