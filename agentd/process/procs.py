"""What agentd asks the OS about processes: who holds the lock, what an attempt left running.

Linux /proc only. A pid alone is not an identity (pids are reused), so a holder is recognised
by pid + start time + boot id, and an attempt's processes by the AGENTD_ATTEMPT_ID in their
environment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

from agentd import frozen_value

PROC = Path("/proc")


@frozen_value
class ProcessIdentity:
    pid: int
    started: int  # clock ticks after boot (field 22 of /proc/PID/stat)
    host: str
    boot_id: str


def this_process() -> ProcessIdentity:
    """This process's identity. The host is uname's nodename, which is what gethostname(2) returns on Linux
    (glibc reads it there), without importing socket into `agentd status` (docs/decisions.md, "Start-up")."""
    pid = os.getpid()
    return ProcessIdentity(pid, start_ticks(pid) or 0, os.uname().nodename, boot_id())


def boot_id() -> str:
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def start_ticks(pid: int) -> int | None:
    """When `pid` started, or None if there is no such (living) process."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None  # a zombie has finished; it holds nothing
    return int(fields[19])


def is_running(identity: ProcessIdentity, here: ProcessIdentity) -> bool | None:
    """True/False for a process on this host and boot; None when this host cannot tell."""
    if identity.host != here.host:
        return None
    if identity.boot_id != here.boot_id:
        return False
    if identity.pid > 0 and not (PROC / str(identity.pid)).exists():
        return exists_unseen(identity.pid)
    return start_ticks(identity.pid) == identity.started


def exists_unseen(pid: int) -> bool:
    """Whether a process /proc does not show us still exists. /proc hides the processes we may not trace
    where it is mounted with hidepid, as the units' ProtectProc=invisible mounts it: the console's unit
    holds no capability, so the dispatcher and sensors, which hold two, are hidden from it. A null signal
    still answers, so such a process is taken to be the one named (its start time, which would tell it
    from a reused pid, cannot be read; a row's age still decides live or stale)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, as another user's
    return True


def uptime_ticks() -> int:
    """Now, in the clock ticks since boot that /proc/PID/stat's start times use."""
    try:
        seconds = float((PROC / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    return int(seconds * os.sysconf("SC_CLK_TCK"))


def marked_processes(marker: str, started_after_ticks: int | None = None) -> list[int]:
    """Living processes whose environment holds `marker` (e.g. AGENTD_ATTEMPT_ID=…), in any group
    or session: the harness CLIs start their tools with setsid, out of reach of killpg. With
    `started_after_ticks`, only processes that started since then have their environment read."""
    needle = marker.encode()
    floor = (started_after_ticks or 0) - os.sysconf("SC_CLK_TCK")  # a tick of slack either way
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if fields[0] == "Z" or int(fields[19]) < floor:
                continue
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
    return found


def kill_marked(marker: str, started_after_ticks: int | None = None) -> list[int]:
    """SIGKILL every living process carrying `marker`; return their pids."""
    pids = marked_processes(marker, started_after_ticks)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return pids


def main(argv: list[str]) -> int:
    """`python -m agentd.process.procs kill-marked MARKER [SINCE_TICKS]`: `kill_marked` run as the user whose
    processes carry the marker (the run user may read their environment; the service may not)."""
    if len(argv) not in (2, 3) or argv[0] != "kill-marked":
        print("usage: python -m agentd.process.procs kill-marked MARKER [SINCE_TICKS]", file=sys.stderr)
        return 2
    killed = kill_marked(argv[1], int(argv[2]) if len(argv) == 3 else None)
    print(" ".join(map(str, killed)))
    return 0


def attempt_marker(attempt_id: str) -> str:
    return f"AGENTD_ATTEMPT_ID={attempt_id}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
