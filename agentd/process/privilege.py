"""The boundary between an agent and its operator (docs/install-and-deploy.md, "The boundary").

Under the units, an agent's services run as one user that owns the state dir, and every attempt and
sensor runs as a second user, `[dispatch] run_as`, that owns only the workspace and the run dirs. The
services keep the capabilities that switch users and signal the run user's processes (CAP_SETUID,
CAP_SETGID, CAP_KILL) to themselves: `keep_capabilities_to_self` clears the ambient and inheritable
sets at start, so no process they start (an attempt, a sensor, a message handler) holds any.

Whoever runs a control verb is recorded (`operator_identity`); an attempt never may
(`refuse_inside_attempt`): not with `AGENTD_ATTEMPT_ID` in its environment, not as the run user.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import getpass
import os
import pwd
from pathlib import Path
from typing import Any, TypedDict

from agentd import frozen_value
from agentd.errors import AgentdError, InputError

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
    """The user attempts and sensors run as."""

    name: str
    uid: int
    gid: int


def popen_identity(user: RunUser | None) -> Identity:
    """The switch to the run user, done in the child between fork and exec: its uid and its own group,
    no supplementary groups, and a umask that keeps what it writes readable by that group (which is
    the services' own: docs/install-and-deploy.md, "The boundary"). Nothing for None: the service's own user."""
    if user is None:
        return {}
    return {"user": user.uid, "group": user.gid, "extra_groups": [], "umask": RUN_UMASK}


def run_user(name: str | None) -> RunUser | None:
    """The `[dispatch] run_as` user, looked up now; None when attempts run as the service itself."""
    if name is None:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise BoundaryError(
            f"dispatch.run_as: no user {name!r} on this system; create it (`agentd install` does, from "
            "/etc/sysusers.d) or remove run_as to run attempts as the service's own user"
        ) from None
    if entry.pw_uid == 0:
        raise BoundaryError(f"dispatch.run_as: {name!r} is root; attempts must run as an unprivileged user")
    return RunUser(name, entry.pw_uid, entry.pw_gid)


def require_switch(user: RunUser | None) -> None:
    """A service configured with a run user refuses to start unless it can become that user and it is
    not that user itself (then the boundary would be a fiction)."""
    if user is None:
        return
    if os.geteuid() == user.uid:
        raise BoundaryError(
            f"dispatch.run_as is {user.name!r}, the user this service runs as: attempts need a user of their own"
        )
    if not can_switch_users():
        raise BoundaryError(
            f"dispatch.run_as is {user.name!r} but this process cannot switch users (it needs CAP_SETUID and "
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


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def keep_capabilities_to_self() -> None:
    """Clear this process's ambient and inheritable capability sets, keeping its effective and
    permitted ones: whatever it executes starts with none (execve gives a child the ambient set, and
    the inheritable set meets a program's file capabilities). A no-op where there is nothing to clear."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if ambient_capabilities() and libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        raise BoundaryError(f"cannot clear the ambient capabilities: {os.strerror(ctypes.get_errno())}")
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return  # no capabilities to read: nothing to clear either
    if data[0].inheritable or data[1].inheritable:
        data[0].inheritable = data[1].inheritable = 0
        if libc.capset(ctypes.byref(header), data) != 0:
            raise BoundaryError(f"cannot clear the inheritable capabilities: {os.strerror(ctypes.get_errno())}")


def boundary_line(user: RunUser | None) -> str:
    """What `status` and the service start line say about who attempts run as."""
    if user is not None:
        return (
            f"attempts run as {user.name} (uid {user.uid}): they cannot act as the operator; sensors run as "
            "that user too, so what they report is trusted no more than an attempt"
        )
    return (
        f"attempts run as this service's own user ({_name(os.geteuid())}): approvals, budgets and pause are "
        "advisory (set [dispatch] run_as, as `agentd install` does, to enforce them)"
    )


def boundary(run_as: str | None) -> dict[str, Any]:
    """The boundary as `agentd status` reports it: who attempts run as, whether approvals hold."""
    try:
        user = run_user(run_as)
    except BoundaryError as exc:
        return {"run_as": run_as, "enforced": False, "line": f"no attempt can start: {exc}"}
    return {"run_as": run_as, "enforced": user is not None, "line": boundary_line(user)}


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


def refuse_inside_attempt(run_as: str | None, what: str) -> None:
    """An attempt never acts as its operator: a control verb run with AGENTD_ATTEMPT_ID in its
    environment, or as the run user, is refused before it reads or writes anything."""
    attempt = os.environ.get("AGENTD_ATTEMPT_ID")
    if attempt:
        raise InputError(
            f"{what}: refused inside an attempt (AGENTD_ATTEMPT_ID={attempt}); an attempt cannot act as its operator"
        )
    if run_as is not None:
        try:
            uid = pwd.getpwnam(run_as).pw_uid
        except KeyError:
            return
        if os.getuid() == uid or os.geteuid() == uid:
            raise InputError(f"{what}: refused for {run_as}, the user attempts run as; run it as the operator")
