"""What an operator's machine sees: the wall and CPU time of `agentd --version`, `agentd status` and
`agentd task add` (a new interpreter each, as typed), what their imports cost, a dispatcher's start to
READY, and the services' CPU and memory while nothing is due."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd.clock import SystemClock
from bench.agent import agentd_argv, cli_env, open_agent, write_config

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
Process = subprocess.Popen[bytes]


def operator_agent(directory: Path) -> Path:
    """An initialised agent for the start-up commands, as `agentd init` leaves one: with the config's
    cached view, so each row measures the command an operator runs every day (docs/decisions.md, "Start-up")."""
    from agentd.cli.fast.cache import write_view

    config_path = write_config(directory)
    config, store = open_agent(config_path, SystemClock())
    store.close()
    write_view(config)
    return config_path


def startup_commands(config_path: Path) -> dict[str, list[str]]:
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "agentd --version": agentd_argv(config_path, "--version"),
        "agentd status": agentd_argv(config_path, "status"),
        "agentd task add": agentd_argv(config_path, "task", "add", "--type", "example", "--subject", "bench"),
        "agentd task show": agentd_argv(config_path, "task", "show", "1"),  # the task the first `task add` made
        "agentd task list": agentd_argv(config_path, "task", "list"),
        "agentd events": agentd_argv(config_path, "events"),
        "agentd approvals": agentd_argv(config_path, "approvals"),
    }


@dataclass(frozen=True)
class Timed:
    """One run of a command: its wall time, and the CPU time (user + system) the process spent."""

    wall_ms: float
    cpu_ms: float


def timed(command: list[str]) -> Timed:
    """`command` run to its end; its CPU time is what getrusage counts for the children waited for since."""
    before = children_cpu_s()
    started = time.perf_counter()
    result = subprocess.run(command, env=cli_env(), capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        output = result.stdout[-1000:] + result.stderr[-2000:]
        raise RuntimeError(f"{' '.join(command)}: exit {result.returncode}\n{output}")
    return Timed(elapsed * 1e3, (children_cpu_s() - before) * 1e3)


def children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def import_times(command: list[str], count: int = 12) -> list[tuple[str, int, int]]:
    """The `count` imports of `command` that took longest, cumulative µs first: (module, cumulative µs,
    self µs), as `python -X importtime` reports them (PYTHONPROFILEIMPORTTIME: the console script too)."""
    result = subprocess.run(command, env=cli_env(PYTHONPROFILEIMPORTTIME="1"), capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: exit {result.returncode}\n{result.stderr[-2000:]}")
    found = []
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and not line.endswith("| imported package"):
            own, cumulative, name = line.removeprefix("import time:").split("|")
            found.append((name.strip(), int(cumulative), int(own)))
    return sorted(found, key=lambda entry: -entry[1])[:count]


def dispatcher_start(directory: Path, timeout_s: float = 60.0) -> Timed:
    """`agentd dispatch` from its exec to the READY=1 it sends systemd (the socket here stands in for
    NOTIFY_SOCKET: agentd/services/shell.py): the wall time, and the process's CPU time by then (all its
    threads, /proc/PID/stat, 10 ms ticks). Then it is stopped; `directory` is its agent (idle_agent)."""
    config_path = directory / "config" / "agent.toml"
    if not config_path.exists():
        config_path = idle_agent(directory)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        address = directory / "notify.sock"
        address.unlink(missing_ok=True)
        notify.bind(str(address))
        notify.settimeout(timeout_s)
        with open(directory / "dispatch.log", "wb") as log:
            started = time.perf_counter()
            process = subprocess.Popen(
                agentd_argv(config_path, "dispatch"),
                env=cli_env(NOTIFY_SOCKET=str(address)),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            while b"READY=1" not in notify.recv(65536).split(b"\n"):
                pass
            ready = Timed((time.perf_counter() - started) * 1e3, cpu_ticks(process.pid) * 1e3 / TICKS_PER_S)
        except TimeoutError:
            log_text = (directory / "dispatch.log").read_text()[-2000:]
            raise RuntimeError(f"agentd dispatch sent no READY in {timeout_s:g} s:\n{log_text}") from None
        finally:
            process.terminate()
            process.wait(timeout=30)
    return ready


def drain_command(directory: Path) -> list[str]:
    """`agentd dispatch --until-idle` on the agent `dispatcher_start` made in `directory`."""
    return agentd_argv(directory / "config" / "agent.toml", "dispatch", "--until-idle")


# --- idle services --------------------------------------------------------------------------------


def idle_agent(directory: Path) -> Path:
    """An initialised agent with no sensors, and its metrics endpoints and console on free loopback ports."""
    (directory / "sensors").mkdir(parents=True)

    def mutate(raw: dict[str, Any]) -> None:
        raw["paths"]["sensors_dir"] = str(directory / "sensors")
        raw["metrics"] = {"dispatch_listen": "127.0.0.1:0", "sensors_listen": "127.0.0.1:0"}
        raw["web"] = {"listen": "127.0.0.1:0"}

    config_path = write_config(directory, mutate)
    _, store = open_agent(config_path, SystemClock())
    store.close()
    return config_path


@dataclass
class IdleWatch:
    """The services' CPU time and the clock when the window opened; `close` reads them again."""

    running: dict[str, Process]
    logs: Path
    opened: float = field(default_factory=time.monotonic)
    ticks: dict[str, int] = field(default_factory=dict)
    threads_ns: dict[str, dict[int, int]] = field(default_factory=dict)
    window_s: float = 0.0
    cpu_percent: dict[str, float] = field(default_factory=dict)
    rss_mb: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ticks = {name: cpu_ticks(process.pid) for name, process in self.running.items()}
        self.threads_ns = {name: thread_cpu_ns(process.pid) for name, process in self.running.items()}

    def close(self) -> None:
        self.window_s = time.monotonic() - self.opened
        for name, process in self.running.items():
            if process.poll() is not None:
                raise RuntimeError(f"agentd {name} exited:\n{(self.logs / f'{name}.log').read_text()[-2000:]}")
            self.cpu_percent[name] = self._spent_s(name, process.pid) / self.window_s * 100
            self.rss_mb[name] = rss_mb(process.pid)

    def _spent_s(self, name: str, pid: int) -> float:
        """The CPU time spent in the window: each thread's own in ns (schedstat), or, when a thread
        ended in the window (its time is gone from /proc/PID/task), utime + stime in clock ticks."""
        before, after = self.threads_ns[name], thread_cpu_ns(pid)
        if before.keys() <= after.keys():
            return sum(spent - before.get(tid, 0) for tid, spent in after.items()) / 1e9
        print(f"bench: a thread of agentd {name} ended in the window: its CPU time in 10 ms ticks", file=sys.stderr)
        return (cpu_ticks(pid) - self.ticks[name]) / TICKS_PER_S


@contextmanager
def idle_services(directory: Path, settle_s: float) -> Iterator[IdleWatch]:
    """`agentd dispatch`, `agentd sensors` and `agentd web` started as services on an agent with nothing to do;
    after `settle_s` (their start-up) the window opens, and it closes when the block ends: each
    one's CPU time over the window (all its threads, as % of a core) and its VmRSS.

    The block may measure other things meanwhile: a process's CPU time is its own whatever else
    runs, and these two, idle, take nothing from the rest."""
    config_path = idle_agent(directory)
    with services(directory, config_path, ("dispatch", "sensors", "web")) as running:
        threading.Event().wait(settle_s)
        watch = IdleWatch(running, directory)
        yield watch
        watch.close()


@contextmanager
def services(directory: Path, config_path: Path, names: tuple[str, ...]) -> Iterator[dict[str, Process]]:
    running: dict[str, Process] = {}
    try:
        for name in names:
            with open(directory / f"{name}.log", "wb") as log:
                running[name] = subprocess.Popen(
                    agentd_argv(config_path, name), env=cli_env(), stdout=log, stderr=subprocess.STDOUT
                )
        yield running
    finally:
        for process in running.values():
            process.terminate()
        for process in running.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def cpu_ticks(pid: int) -> int:
    """utime + stime of the process (every thread of it), in clock ticks."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5), counted after the name


def thread_cpu_ns(pid: int) -> dict[int, int]:
    """Each live thread's CPU time in ns (the first field of /proc/PID/task/TID/schedstat): the
    same time utime + stime count, 10 ms ticks there, to the ns here."""
    spent = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as schedstat:
                spent[int(tid)] = int(schedstat.read().split()[0])
        except FileNotFoundError:  # the thread ended since the listing
            continue
    return spent


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")
