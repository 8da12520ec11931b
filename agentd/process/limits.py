"""Per-attempt limits on processes and memory (docs/reliability.md, "What one attempt may hold").

An attempt's cgroup is a child of the dispatcher's, so without a limit of its own a fork bomb uses up the
unit's TasksMax and the dispatcher can start neither a thread nor a process until the attempt's timeout.
`[dispatch] max_pids` and `max_memory_mb` are set on each attempt's own cgroups:

- on cgroup v2 (systemd hosts: the unit delegates its subtree) in the attempt's v2 cgroup, once the pids
  and memory controllers are enabled down to it: the service moves itself into a leaf of its own first
  (`agentd-service`), since a cgroup that hands controllers to its children may hold no process;
- on a host whose pids and memory controllers are cgroup v1 hierarchies (a hybrid layout), in a cgroup of
  the attempt's own in each, beside the service's, which the service enters for the fork as it enters the
  attempt's v2 cgroup.

A limit hit ends the attempt (`pids.events` or `memory.events` count it): `pids_limit` or `memory_limit`.
Where neither can be set, `agentd status` and the dispatcher's start line say so.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from agentd import frozen_value

logger = logging.getLogger(__name__)

CONTROLLERS = ("pids", "memory")
SERVICE_LEAF = "agentd-service"  # where the service lives once it hands controllers to its runs' cgroups
Hit = str  # "pids" or "memory": which limit ended the run


@frozen_value
class Limits:
    """What one attempt may hold at once: processes and threads, and bytes of memory (None: no limit)."""

    pids: int | None
    memory_bytes: int | None

    @staticmethod
    def of(max_pids: int, max_memory_mb: int) -> Limits | None:
        pids, memory = max_pids or None, max_memory_mb * 1024 * 1024 or None
        return Limits(pids, memory) if pids or memory else None

    def wanted(self) -> tuple[str, ...]:
        return tuple(c for c, v in zip(CONTROLLERS, (self.pids, self.memory_bytes), strict=True) if v is not None)


@frozen_value
class Placed:
    """Where one run's limits live: its v2 cgroup (when the controllers reach it) or its v1 cgroups."""

    v2: Path | None
    v1: tuple[tuple[str, Path], ...]  # (controller, the run's cgroup in that hierarchy)
    enforced: tuple[str, ...]  # the controllers whose limit holds for this run


# --- cgroup v1: a hierarchy per controller ------------------------------------------------------------------


def v1_own(controller: str) -> Path | None:
    """This process's cgroup in the v1 hierarchy of `controller`, when there is one it may make children in."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    path = _v1_path(lines, mounts, controller)
    return path if path is not None and path.is_dir() and os.access(path, os.W_OK) else None


def _v1_path(lines: list[str], mounts: list[str], controller: str) -> Path | None:
    """A process's cgroup in the v1 hierarchy of `controller`, from its /proc/PID/cgroup `lines` and the
    mount table; None when that controller has no v1 hierarchy here."""
    relative = next((line.split(":", 2)[2] for line in lines if controller in line.split(":", 2)[1].split(",")), None)
    mount = next((m.split()[4] for m in mounts if " - cgroup " in m and controller in _options(m)), None)
    return Path(mount) / relative.lstrip("/") if relative is not None and mount is not None else None


def _options(mount: str) -> list[str]:
    """A v1 cgroup mount's super options (`rw,pids`): the controllers it holds."""
    return mount.rsplit(" ", 1)[-1].split(",")


_V1: dict[int, dict[str, Path]] = {}


def v1_hierarchies() -> dict[str, Path]:
    """controller → this process's own v1 cgroup, for the controllers agentd limits (once per process)."""
    pid = os.getpid()
    if pid not in _V1:
        _V1[pid] = {c: own for c in CONTROLLERS if (own := v1_own(c)) is not None}
    return _V1[pid]


# --- cgroup v2: the controllers enabled down to the runs ----------------------------------------------------


def enable_v2(own: Path, home: Path, namespace: Path, wanted: tuple[str, ...]) -> tuple[Path, set[str]]:
    """(where the service lives now, the controllers the runs' cgroups get) for a service whose v2 cgroup is
    `own`: each wanted controller own offers is enabled in own and in the agent's `namespace`; the service
    moves into its leaf first, as a cgroup that hands controllers down may hold no process."""
    offered = set(_words(own / "cgroup.controllers")) & set(wanted)
    if not offered:
        return home, set()
    if not offered <= set(_words(own / "cgroup.subtree_control")):
        leaf = own / SERVICE_LEAF
        try:
            leaf.mkdir(exist_ok=True)
            write_control(leaf / "cgroup.procs", str(os.getpid()))
            home = leaf
            write_control(own / "cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(offered)))
        except OSError as exc:  # another process in own (EBUSY), or not ours to change
            logger.warning("cannot hand the %s controllers to the runs' cgroups (%s)", "/".join(sorted(offered)), exc)
            return home, set()
    try:
        write_control(namespace / "cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(offered)))
    except OSError as exc:
        logger.warning("cannot enable %s in %s (%s)", "/".join(sorted(offered)), namespace, exc)
        return home, set()
    return home, offered


# --- one run ------------------------------------------------------------------------------------------------


def place(limits: Limits, v2_run: Path | None, v2_controllers: set[str], namespace: str, name: str) -> Placed:
    """Set `limits` on the run's v2 cgroup (when every limited controller is enabled there) or else on cgroups
    of its own in the v1 hierarchies; what cannot be set is logged and left unlimited."""
    wanted = limits.wanted()
    if v2_run is not None and set(wanted) <= v2_controllers:
        try:
            _set(v2_run, limits, v1=False)
            return Placed(v2_run, (), wanted)
        except OSError as exc:
            logger.warning("cannot set limits on %s (%s)", v2_run, exc)
    v1 = []
    for controller, own in v1_hierarchies().items():
        if controller not in wanted:
            continue
        run = own / namespace / name
        try:
            run.mkdir(parents=True, exist_ok=True)
            _set(run, limits, v1=True, only=controller)
        except OSError as exc:
            logger.warning("cannot limit %s in %s (%s)", controller, run, exc)
            continue
        v1.append((controller, run))
    return Placed(None, tuple(v1), tuple(c for c, _ in v1))


def _set(path: Path, limits: Limits, *, v1: bool, only: str | None = None) -> None:
    if limits.pids is not None and only in (None, "pids"):
        write_control(path / "pids.max", str(limits.pids))
    if limits.memory_bytes is not None and only in (None, "memory"):
        write_control(path / ("memory.limit_in_bytes" if v1 else "memory.max"), str(limits.memory_bytes))
        if not v1 and (path / "memory.swap.max").exists():
            write_control(path / "memory.swap.max", "0")  # what it may not keep in memory it may not keep in swap


def enter_v1(placed: Placed) -> None:
    for _, run in placed.v1:
        write_control(run / "cgroup.procs", str(os.getpid()))


def leave_v1(placed: Placed) -> None:
    own = v1_hierarchies()
    for controller, _ in placed.v1:
        with contextlib.suppress(OSError):
            write_control(own[controller] / "cgroup.procs", str(os.getpid()))


def hit(placed: Placed) -> Hit | None:
    """Which limit the run has run into, if any: a fork refused at pids.max, or a process the kernel killed
    for memory."""
    where = [(c, placed.v2, False) for c in placed.enforced] if placed.v2 is not None else []
    for controller, path, v1 in [*where, *((c, p, True) for c, p in placed.v1)]:
        if path is not None and _counted(path, controller, v1):
            return controller
    return None


def _counted(path: Path, controller: str, v1: bool = False) -> bool:
    if controller == "pids":
        return _field(path / "pids.events", "max") > 0
    return _field(path / ("memory.oom_control" if v1 else "memory.events"), "oom_kill") > 0


def release(placed: Placed) -> None:
    """The run's v1 cgroups, once its processes are gone (its v2 cgroup goes with containment's)."""
    for _, run in placed.v1:
        with contextlib.suppress(OSError):
            os.rmdir(run)
        with contextlib.suppress(OSError):  # the agent's namespace, when no other run is in it
            os.rmdir(run.parent)


def sweep(namespace: str, name: str) -> None:
    """What a run the service did not see end (it died meanwhile) left in the v1 hierarchies: its cgroups,
    whatever still runs in them killed first."""
    for own in v1_hierarchies().values():
        run = own / namespace / name
        for pid in _words(run / "cgroup.procs"):
            with contextlib.suppress(OSError):
                os.kill(int(pid), 9)
        release(Placed(None, (("", run),), ()))


def _field(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def write_control(path: Path, text: str) -> None:
    """One write to a cgroup control file (no truncation, no buffering: the kernel takes each write whole)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# --- what holds, as the dispatcher or `agentd status` tells it ----------------------------------------------


def held(pid: int, wanted: tuple[str, ...]) -> dict[str, str] | None:
    """controller → where the process `pid` (a dispatcher) can hold that limit for its attempts: "cgroup v2"
    (its delegated cgroup offers the controller) or "cgroup v1" (it may make cgroups in that hierarchy).
    Read from /proc, so `agentd status` tells it from outside; None when /proc does not show that process."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        uid = int(Path(f"/proc/{pid}/status").read_text().split("Uid:", 1)[1].split()[1])
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except (OSError, IndexError, ValueError):
        return None
    found: dict[str, str] = {}
    v2 = _v2_of(lines, mounts)
    if v2 is not None and _may_write(v2 / "cgroup.subtree_control", uid):
        found.update(dict.fromkeys(set(wanted) & set(_words(v2 / "cgroup.controllers")), "cgroup v2"))
    for controller in wanted:
        path = _v1_path(lines, mounts, controller)
        if controller not in found and path is not None and _may_write(path, uid):
            found[controller] = "cgroup v1"
    return found


def _v2_of(lines: list[str], mounts: list[str]) -> Path | None:
    relative = next((line[3:] for line in lines if line.startswith("0::")), None)
    mount = next((m.split()[4] for m in mounts if " - cgroup2 " in m), None)
    if relative is None or mount is None:
        return None
    path = Path(mount) / relative.lstrip("/")
    return path.parent if path.name == SERVICE_LEAF else path


def _may_write(path: Path, uid: int) -> bool:
    try:
        return uid == 0 or os.stat(path).st_uid == uid
    except OSError:
        return False


def describe(limits: Limits | None, where: dict[str, str] | None) -> str:
    """The line `agentd status` and the dispatcher's start line give: each attempt's limits and whether
    they hold (`where`: what `held` found; None: not known, no dispatcher runs)."""
    if limits is None:
        return "attempts are not limited ([dispatch] max_pids and max_memory_mb are 0)"
    asked = [f"{limits.pids} processes and threads"] if limits.pids else []
    asked += [f"{limits.memory_bytes // (1024 * 1024):,} MiB"] if limits.memory_bytes else []
    line = "each attempt at most " + " and ".join(asked)
    if where is None:
        return f"{line}; whether they hold is known while the dispatcher runs"
    missing = [c for c in limits.wanted() if c not in where]
    kinds = sorted(set(where.values()))
    holding = f"held in a cgroup of its own ({', '.join(kinds)}: {', '.join(c for c in limits.wanted() if c in where)})"
    if not missing:
        return f"{line}, {holding}"
    unheld = (
        f"NOT held for {', '.join(missing)}: no cgroup the dispatcher may make offers it (its unit's Delegate=yes "
        "gives it one); a fork bomb or a memory hog in an attempt can stall the dispatcher"
    )
    return f"{line}; {holding + '; ' if where else ''}{unheld}"


def own_line(max_pids: int, max_memory_mb: int) -> str:
    """`describe` for this process: the dispatcher's start line."""
    asked = Limits.of(max_pids, max_memory_mb)
    return describe(asked, held(os.getpid(), asked.wanted()) if asked else None)
