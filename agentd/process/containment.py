"""Keeping every process an attempt or a sensor run starts inside that run, so none outlives it.

Where this process may create cgroup v2 children (a systemd unit with `Delegate=yes`, or root),
each run gets a cgroup of its own, `<this service's cgroup>/agentd.<agent>/<run>`, and its first
process is forked inside it: whatever that process starts, in any session and with any
environment, stays in the run's cgroup, and ending the run is one write to `cgroup.kill`. The
service moves itself into the run's cgroup for the fork and straight back, under a lock, because
a child inherits its parent's cgroup at fork time and anyio gives no hook between fork and exec.

Elsewhere a run's processes are found by the marker in their environment (AGENTD_ATTEMPT_ID=…),
looking only at processes started since the run began. That is the documented limit without
cgroups: a process that both leaves the session (setsid) and clears its environment escapes until
the service stops (under systemd, the unit's stop ends it then: KillMode=mixed kills what is left once the
service has exited).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.lowlevel

from agentd import frozen_value
from agentd.hashing import sha256_hex
from agentd.process import limits, procs
from agentd.process.limits import Limits, Placed
from agentd.process.privilege import RunUser, popen_identity

logger = logging.getLogger(__name__)

T = TypeVar("T")
EMPTY_WAIT_S = 2.0  # after cgroup.kill, how long the kernel may take to empty the cgroup
EMPTY_POLL_S = 0.005
_SPAWN_LOCK: anyio.lowlevel.RunVar[anyio.Lock] = anyio.lowlevel.RunVar("agentd_spawn_lock")


@frozen_value
class RunGroup:
    """One run's identity for containment: where its cgroup lives and the marker its processes carry."""

    namespace: str  # one per agent (state dir): two agents on a machine never touch each other's runs
    name: str  # attempt-<id> or sensor-<id>
    marker: str  # NAME=value in every process's environment (the fallback, and the boot sweeps)
    limits: Limits | None = None  # what the run may hold at once (attempts: [dispatch] max_pids, max_memory_mb)


def namespace_for(state_dir: Path) -> str:
    return _namespace(str(state_dir.absolute()))


@functools.lru_cache(maxsize=64)
def _namespace(state_dir: str) -> str:
    """One per agent (an absolute state dir); asked for at every spawn, hashed once."""
    return "agentd." + sha256_hex(state_dir.encode())[:12]


def attempt_group(state_dir: Path, attempt_id: str, held: Limits | None = None) -> RunGroup:
    return RunGroup(namespace_for(state_dir), f"attempt-{attempt_id}", procs.attempt_marker(attempt_id), held)


def sensor_group(state_dir: Path, run_id: str) -> RunGroup:
    return RunGroup(namespace_for(state_dir), f"sensor-{run_id}", f"AGENTD_SENSOR_RUN={run_id}")


class Cgroups:
    """This process's cgroup v2 directory, if it may create children there (else None)."""

    def __init__(self, own: Path) -> None:
        self.own = own
        self.home = own  # where the service itself is: its own cgroup, or its leaf once runs get controllers
        self.controllers: dict[Path, set[str]] = {}  # per agent namespace: what its runs' cgroups may limit

    @staticmethod
    def discover() -> Cgroups | None:
        own = _own_cgroup()
        if own is None or not os.access(own / "cgroup.procs", os.W_OK):
            return None
        try:  # moving ourselves into our own cgroup is a no-op that proves we may move at all
            limits.write_control(own / "cgroup.procs", str(os.getpid()))
        except OSError:
            return None
        return Cgroups(own)

    def run_dir(self, group: RunGroup) -> Path:
        return self.own / group.namespace / group.name

    def make(self, group: RunGroup) -> Path | None:
        path = self.run_dir(group)
        problem: OSError | None = None
        for _ in range(3):  # the agent's other service may release the namespace in between: again
            try:
                path.mkdir(parents=True, exist_ok=True)
            except FileNotFoundError as exc:
                problem = exc
                continue
            except OSError as exc:
                problem = exc
                break
            _NAMESPACES.add(path.parent)
            return path
        logger.warning("cannot create cgroup %s (%s); this run is contained by marker only", path, problem)
        return None

    def enter(self, path: Path) -> None:
        limits.write_control(path / "cgroup.procs", str(os.getpid()))

    def leave(self) -> None:
        limits.write_control(self.home / "cgroup.procs", str(os.getpid()))

    def limited(self, namespace: Path, wanted: tuple[str, ...]) -> set[str]:
        """The controllers runs in `namespace` get (pids, memory), enabled down to it the first time."""
        if namespace not in self.controllers:
            self.home, self.controllers[namespace] = limits.enable_v2(self.own, self.home, namespace, wanted)
        return self.controllers[namespace]


_CGROUPS: dict[int, Cgroups | None] = {}
_NAMESPACES: set[Path] = set()  # the namespaces this process made runs in
_PLACED: dict[tuple[str, str], Placed] = {}  # (namespace, run) → where its limits are, while it runs


def release_namespace(state_dir: Path) -> None:
    """A stopping service leaves no cgroup behind: its agent's namespace goes unless a run is still
    in it (the agent's other service may have one: its own stop removes the namespace then)."""
    found = cgroups()
    if found is not None:
        _release(found.own / namespace_for(state_dir))


def release_namespaces() -> None:
    """Every namespace this process made runs in (tests, and tools that run attempts in-process)."""
    for namespace in list(_NAMESPACES):
        _release(namespace)


def _release(namespace: Path) -> None:
    _NAMESPACES.discard(namespace)
    with contextlib.suppress(OSError):  # gone already, or still holding a run
        os.rmdir(namespace)


def cgroups() -> Cgroups | None:
    """Discovered once per process (it cannot change while we run)."""
    pid = os.getpid()
    if pid not in _CGROUPS:
        _CGROUPS[pid] = Cgroups.discover()
    return _CGROUPS[pid]


def _spawn_lock() -> anyio.Lock:
    try:
        return _SPAWN_LOCK.get()
    except LookupError:
        lock = anyio.Lock()
        _SPAWN_LOCK.set(lock)
        return lock


# The kernel's cgroup write lock (one for every hierarchy) is cheap to take while moves come one after
# another, and makes the first taker after a quiet spell wait a grace period: 6-16 ms on the bench's VM
# (docs/decisions.md, "Performance, round four"). `prime` takes it early, for nothing, in a thread of its
# own, while the claim and the bundle are made; the run's own move, a few ms later, then finds it warm.
PRIME_AFTER_S = 0.02  # a move this recent leaves the lock warm: no priming
_moved_at = [0.0]  # time.monotonic() of this process's last move, or of its last priming
_priming: list[threading.Thread] = []


def prime() -> None:
    """Start warming the kernel's cgroup write lock for a spawn to come (an attempt about to be claimed):
    this process moved into the cgroup it is in (a no-op move), in a thread, unless a move was recent."""
    found = cgroups()
    if found is None or time.monotonic() - _moved_at[0] < PRIME_AFTER_S or _priming_now() is not None:
        return
    if _spawn_lock().locked():  # a spawn may sit in its run's cgroup now: a move home would take us out of it
        return
    _moved_at[0] = time.monotonic()
    thread = threading.Thread(target=_move_home, args=(found,), name="agentd-cgroup-prime", daemon=True)
    _priming[:] = [thread]
    thread.start()


def _move_home(found: Cgroups) -> None:
    with contextlib.suppress(OSError):  # a move that fails here fails again in the spawn, which says why
        found.leave()


async def _primed() -> None:
    """A priming still under way is waited for: its move into this process's own cgroup must not land after
    the spawn's move into the run's."""
    if (thread := _priming_now()) is not None:
        await anyio.to_thread.run_sync(thread.join)


def _priming_now() -> threading.Thread | None:
    return _priming[0] if _priming and _priming[0].is_alive() else None


async def spawn(group: RunGroup | None, start: Callable[[], Awaitable[T]]) -> T:
    """Start a run's first process (`start` forks it) inside the run's cgroup when there is one.

    Every spawn of this process takes the same lock: while the service sits in one run's cgroup,
    nothing else may fork. Outside the lock a spawn would land in whatever cgroup we were in."""
    async with _spawn_lock():
        found = cgroups() if group is not None else None
        if found is not None:
            await _primed()
            _moved_at[0] = time.monotonic()
        path = found.make(group) if found is not None and group is not None else None
        placed = _place(group, found, path) if group is not None else None
        if placed is not None:
            limits.enter_v1(placed)
        try:
            return await _start_in(found, path, start)
        finally:
            if placed is not None:
                limits.leave_v1(placed)


async def _start_in(found: Cgroups | None, path: Path | None, start: Callable[[], Awaitable[T]]) -> T:
    if found is None or path is None:
        return await start()
    try:
        found.enter(path)
    except OSError as exc:  # e.g. controllers enabled below our cgroup: no internal processes
        logger.warning("cannot enter cgroup %s (%s); runs are contained by marker from now on", path, exc)
        _CGROUPS[os.getpid()] = None
        return await start()
    try:
        return await start()
    finally:
        found.leave()


def _place(group: RunGroup, found: Cgroups | None, path: Path | None) -> Placed | None:
    """Set the run's limits where they can be set (agentd/process/limits.py); None when it has none."""
    if group.limits is None:
        return None
    controllers = found.limited(path.parent, group.limits.wanted()) if found is not None and path is not None else set()
    placed = limits.place(group.limits, path, controllers, group.namespace, group.name)
    _PLACED[(group.namespace, group.name)] = placed
    return placed


def limit_hit(group: RunGroup) -> limits.Hit | None:
    """Which of its limits the running run has run into (pids or memory), if any."""
    placed = _PLACED.get((group.namespace, group.name))
    return limits.hit(placed) if placed is not None else None


async def end_run(group: RunGroup, since_ticks: int | None, user: RunUser | None = None) -> list[int]:
    """Kill everything the run left behind; return the pids found. Without cgroups, processes
    carrying the run's marker that started after `since_ticks` (clock ticks since boot), found and
    killed by a process of the run's user when it has one."""
    found = cgroups()
    try:
        if found is not None:
            return await _kill_cgroup(found.run_dir(group))
        return await _kill_marked(group.marker, since_ticks, user)
    finally:
        if (placed := _PLACED.pop((group.namespace, group.name), None)) is not None:
            limits.release(placed)


async def sweep_run(group: RunGroup, user: RunUser | None = None) -> list[int]:
    """After the runtime died: kill what the run left, in its cgroup and by its marker (the process
    that started it may have had no cgroups)."""
    found = cgroups()
    killed = await _kill_cgroup(found.run_dir(group)) if found is not None else []
    killed += [pid for pid in await _kill_marked(group.marker, None, user) if pid not in killed]
    limits.sweep(group.namespace, group.name)  # its v1 limit cgroups, empty now
    return killed


async def _kill_marked(marker: str, since_ticks: int | None, user: RunUser | None) -> list[int]:
    """procs.kill_marked, here or, for another user's processes (whose environment only that user may
    read, and whom only that user may signal), in `python -m agentd.process.procs` run as that user."""
    if user is None or os.geteuid() == 0:
        return procs.kill_marked(marker, started_after_ticks=since_ticks)
    argv = [sys.executable, "-I", "-m", "agentd.process.procs", "kill-marked", marker]
    if since_ticks is not None:
        argv.append(str(since_ticks))
    try:
        done = await anyio.run_process(argv, check=False, **popen_identity(user))
    except OSError:
        logger.warning("cannot run the marker sweep as %s; processes marked %s may remain", user.name, marker)
        return []
    return [int(pid) for pid in done.stdout.split()]


async def _kill_cgroup(path: Path) -> list[int]:
    pids = _kill_now(path)
    for _ in range(int(EMPTY_WAIT_S / EMPTY_POLL_S)):  # the kernel empties it within microseconds
        if not _populated(path):
            break
        await anyio.sleep(EMPTY_POLL_S)
    with contextlib.suppress(OSError):
        os.rmdir(path)  # still populated (a process stuck in the kernel): the next sweep retries
    return pids


def _kill_now(path: Path) -> list[int]:
    pids = _pids(path)
    if os.getpid() in pids:  # we failed to move back out: never kill the service with its run
        logger.error("agentd is still in cgroup %s; not killing it", path)
        return []
    if pids:
        try:
            limits.write_control(path / "cgroup.kill", "1")
        except OSError:  # kernels before 5.14 have no cgroup.kill: signal each process instead
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
    return pids


def _pids(path: Path) -> list[int]:
    try:
        with open(path / "cgroup.procs") as procs_file:
            return [int(line) for line in procs_file.read().split()]
    except OSError:  # no such cgroup (nothing to kill), or it went away meanwhile
        return []


def _populated(path: Path) -> bool:
    try:
        for line in (path / "cgroup.events").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "populated":
                return value.strip() == "1"
    except OSError as exc:
        return exc.errno != errno.ENOENT
    return False


def _own_cgroup() -> Path | None:
    """The cgroup v2 directory this process is in (cgroup2 mounted anywhere, hybrid setups too)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    relative = next((line[3:] for line in lines if line.startswith("0::")), None)
    mount = next((m.split()[4] for m in mounts if " - cgroup2 " in m), None)
    if relative is None or mount is None:
        return None
    path = Path(mount) / relative.lstrip("/")
    return path if path.is_dir() else None
