"""The one place agentd starts processes: argv lists only, never a shell.

`run_process` gives each child its own process group, streams stdout/stderr into files up to a
cap (the rest is counted and dropped, never held in memory), and enforces a hard timeout by
killing the whole group: SIGTERM, then SIGKILL after a grace. When the child exits, whatever it
left running is killed too — in its group, and in its run's cgroup or by its marker (see
agentd/process/containment.py) — and if the caller is cancelled that happens before the cancellation goes
on. Nothing an attempt or a sensor starts outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import anyio
import anyio.abc

from agentd import frozen_value
from agentd.process import procs
from agentd.process.child import Child, PipeReader, PipeWriter, pidfds_work, start_child
from agentd.process.containment import RunGroup, cgroups, end_run, limit_hit, spawn
from agentd.process.netns import Netns, start_in_netns
from agentd.process.output import CappedFile, ProcessResult
from agentd.process.privilege import RunUser, popen_identity
from agentd.process.timer import RunTimer

logger = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024
LIMIT_POLL_S = 0.25  # how often a limited run's cgroup is asked whether it hit its limit
PIPE_DRAIN_S = 2.0  # after the run's processes are stopped, how long its output may still arrive
LEAN_SPAWN: bool | None = None  # agentd/process/child.py where pidfds work (None: find out at the first spawn)


@frozen_value
class ProcessSpec:
    argv: Sequence[str]
    cwd: Path
    env: Mapping[str, str]
    stdout_path: Path
    stderr_path: Path
    timeout_s: float
    kill_grace_s: float = 5.0
    output_cap_bytes: int = 16 * 1024 * 1024
    # Of that cap, how much is kept from the end of each stream (CappedFile): the harnesses' verdict is
    # their last record. 0: the head only (sensors, handlers: their first lines are what they say).
    output_tail_bytes: int = 0
    stdin: bytes = b""
    # The run this process starts (an attempt, a sensor run): whatever it started is killed when
    # the run ends, even processes that left its process group (setsid). None: the group only.
    group: RunGroup | None = None
    # Who it runs as ([dispatch] run_as): that user, its own group only, and a umask that lets the
    # service (a member of that group) read what it writes. None: the service's own user.
    user: RunUser | None = None
    # The run's timeout as its attempt sees it: paused while a tool call waits for a person, ended early
    # when a budget is passed (docs/policy.md). None: `timeout_s`, as it is.
    timer: RunTimer | None = None
    # Told every chunk of stdout as it is read, before any cap (the tool-call ledger: agentd/attempt/ledger.py).
    tap: Callable[[bytes], None] | None = None
    # A network of its own, whose only ways out are the listeners it asks for (agentd/process/netns.py): made
    # before the program starts, or the start fails. None: the host's network.
    netns: Netns | None = None


async def run_process(
    spec: ProcessSpec,
    *,
    on_started: Callable[[int], Awaitable[None]] | None = None,
) -> ProcessResult:
    """Run `spec` to completion or timeout; see the module docstring for the guarantees."""
    started = anyio.current_time()
    since = procs.uptime_ticks()
    stdout = CappedFile(spec.stdout_path, spec.output_cap_bytes, spec.output_tail_bytes)
    stderr = CappedFile(spec.stderr_path, spec.output_cap_bytes, spec.output_tail_bytes)
    try:
        # Shielded: a stop that lands while the process is being forked must not lose the process
        # (or leak its output files); once it exists, the finally below stops it.
        with anyio.CancelScope(shield=True):
            process = await _spawn(spec)
    except OSError as exc:
        if spec.group is not None:
            await end_run(spec.group, since)  # removes the run's empty cgroup
        return ProcessResult(
            None, None, None, False, _start_error(spec.argv[0], exc), stdout.close(), stderr.close(), 0.0
        )
    timed_out, stragglers, hit, contained = False, None, None, spec.group is not None and cgroups() is not None
    try:
        if on_started is not None:
            await on_started(process.pid)
        async with anyio.create_task_group() as pumps:
            pumps.start_soon(_pump, process.stdout, stdout, spec.tap)
            pumps.start_soon(_pump, process.stderr, stderr)
            pumps.start_soon(_feed, process.stdin, spec.stdin)
            with anyio.move_on_after(spec.timeout_s) as deadline:
                if spec.timer is not None:
                    spec.timer.bind(deadline)
                hit = await _wait_within_limits(process, spec.group)
            ended = spec.timer.ended if spec.timer is not None else None
            timed_out, hit = deadline.cancelled_caught and ended is None, hit or ended
            grace_s = 0.0 if spec.timer is not None and spec.timer.at_once else spec.kill_grace_s
            await _stop_group(process, grace_s, spec.user, contained)
            stragglers = await _end(spec.group, since, spec.user)
            # Whatever still holds our pipes now escaped the run (no cgroup, no marker): stop reading.
            pumps.cancel_scope.deadline = anyio.current_time() + PIPE_DRAIN_S
    finally:
        with anyio.CancelScope(shield=True):
            if stragglers is None:  # the run did not reach its own end above (cancelled): stop it here
                await _stop_group(process, spec.kill_grace_s, spec.user, contained)
                stragglers = await _end(spec.group, since, spec.user)
            await process.aclose()
            out, err = stdout.close(), stderr.close()
    code = process.returncode
    return ProcessResult(
        pid=process.pid,
        exit_code=code if code is not None and code >= 0 else None,
        signal=-code if code is not None and code < 0 else None,
        timed_out=timed_out,
        start_error=None,
        stdout=out,
        stderr=err,
        elapsed_s=anyio.current_time() - started,
        stragglers=len(stragglers or []),
        limit_hit=hit,
    )


async def _wait_within_limits(process: anyio.abc.Process | Child, group: RunGroup | None) -> str | None:
    """Wait for the process; with limits on its run, end the wait as soon as the run hits one (a fork bomb
    at its pids.max would otherwise go on until the timeout). The limit hit, or None."""
    if group is None or group.limits is None:
        await process.wait()
        return None
    found: list[str] = []
    async with anyio.create_task_group() as watching:

        async def watch() -> None:
            while True:  # the kernel's counter has no event to wait on: a quarter second is soon enough
                if (hit := limit_hit(group)) is not None:
                    found.append(hit)
                    watching.cancel_scope.cancel()
                    return
                await anyio.sleep(LIMIT_POLL_S)

        watching.start_soon(watch)
        await process.wait()
        watching.cancel_scope.cancel()
    return found[0] if found else limit_hit(group)  # a process the kernel killed for memory ended it


async def _spawn(spec: ProcessSpec) -> anyio.abc.Process | Child:
    if spec.netns is None:
        return await _start(spec, list(spec.argv), ())
    return await start_in_netns(spec.netns, spec.argv, functools.partial(_start, spec), lambda p: _kill(p, spec.user))


async def _start(spec: ProcessSpec, argv: list[str], pass_fds: tuple[int, ...]) -> anyio.abc.Process | Child:
    if _lean():
        return await spawn(spec.group, lambda: _start_lean(spec, argv, pass_fds))
    _pidfd_child_watcher()
    return await spawn(
        spec.group,
        lambda: anyio.open_process(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=spec.cwd,
            env=dict(spec.env),
            start_new_session=True,  # its own process group: one killpg reaches everything it starts
            pass_fds=pass_fds,
            **popen_identity(spec.user),
        ),
    )


async def _kill(process: anyio.abc.Process | Child, user: RunUser | None) -> None:
    await signal_group(process.pid, signal.SIGKILL, user)
    await process.aclose()


def _lean() -> bool:
    global LEAN_SPAWN
    if LEAN_SPAWN is None:
        LEAN_SPAWN = pidfds_work()
    return LEAN_SPAWN


async def _start_lean(spec: ProcessSpec, argv: list[str], pass_fds: tuple[int, ...]) -> Child:
    return start_child(argv, cwd=spec.cwd, env=spec.env, identity=popen_identity(spec.user), pass_fds=pass_fds)


_PIDFD: list[asyncio.PidfdChildWatcher] = []  # this process's, once it is known to work


def _pidfd_child_watcher() -> None:
    """Python 3.11 waits for each child in a thread of its own (a thread started per spawn); a
    pidfd in the event loop costs nothing (3.12 chooses it by itself). Attached to the running loop
    (a test run has one loop after another); where pidfds are refused, the default stays."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    if not _PIDFD:
        try:
            os.close(os.pidfd_open(os.getpid()))  # a kernel before 5.3, or a seccomp filter, says no here
        except OSError:
            return
        _PIDFD.append(asyncio.PidfdChildWatcher())
        asyncio.set_child_watcher(_PIDFD[0])
    loop = asyncio.get_running_loop()
    if not _PIDFD[0].is_active():
        _PIDFD[0].attach_loop(loop)


async def _stop_group(process: anyio.abc.Process | Child, grace_s: float, user: RunUser | None, caged: bool) -> None:
    """TERM the group and wait up to grace for the leader; then KILL whatever is left in it, unless the run's own
    cgroup ends it (`end_run`): a signal, as deployed, costs a `kill` process (docs/decisions.md)."""
    if process.returncode is None:
        await signal_group(process.pid, signal.SIGTERM, user)
        with anyio.move_on_after(grace_s):
            await process.wait()
    if caged and process.returncode is not None:
        return
    await signal_group(process.pid, signal.SIGKILL, user)  # stragglers the leader left behind, or the leader
    await process.wait()


async def _end(group: RunGroup | None, since: int, user: RunUser | None = None) -> list[int]:
    """The run's end: everything it started that is still alive, out of the group too."""
    return await end_run(group, since, user) if group is not None else []


async def signal_group(pgid: int, sig: signal.Signals, user: RunUser | None) -> None:
    """Signal a whole process group. The run user's processes are signalled by a process of the run
    user (`kill`), so the service needs no CAP_KILL: it can signal no one else's (docs/install-and-deploy.md, "The
    boundary")."""
    if user is None or os.geteuid() == 0:
        kill_group(pgid, sig)
        return
    with contextlib.suppress(OSError):
        argv = ["kill", "-s", sig.name.removeprefix("SIG"), "--", f"-{pgid}"]
        await anyio.run_process(argv, check=False, **popen_identity(user))


def kill_group(pgid: int, sig: signal.Signals) -> bool:
    """Signal a whole process group; False if it no longer exists (or is not ours to signal)."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


async def _pump(
    stream: anyio.abc.ByteReceiveStream | PipeReader | None,
    sink: CappedFile,
    tap: Callable[[bytes], None] | None = None,
) -> None:
    if stream is None:
        return
    try:
        while True:
            chunk = await stream.receive(CHUNK_BYTES)
            if tap is not None:
                tap(chunk)
            sink.write(chunk)
    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        return


async def _feed(stream: anyio.abc.ByteSendStream | PipeWriter | None, data: bytes) -> None:
    if stream is None:
        return
    try:
        if data:
            await stream.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError):
        pass  # the child stopped reading; its exit status tells the rest
    finally:
        await stream.aclose()


def _start_error(command: str, exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"cannot start {command!r}: no such file (or its interpreter is missing)"
    if isinstance(exc, PermissionError):
        return f"cannot start {command!r}: not executable"
    return f"cannot start {command!r}: {exc}"


async def make_dir_as(path: Path, user: RunUser) -> None:
    """`mkdir -m 0700 path` as `user`, in a folder only that user may write (a sensor's home in the
    sensors' user's); one that is there already is kept. No capability passes on.

    :raises OSError: it could not be made (what mkdir said).
    """
    argv = ["mkdir", "-p", "-m", "0700", "--", str(path)]
    done = await anyio.run_process(argv, check=False, **popen_identity(user))
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
        raise OSError(f"cannot make {path} as {user.name}: {said}")


def run_setup_command(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """A short system command agentd install runs (systemctl, systemd-sysusers), output captured."""
    return subprocess.run(list(argv), check=check, capture_output=True, text=True, timeout=120)


def run_foreground(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None, user: RunUser | None = None
) -> int:
    """Run an operator's command attached to this terminal, as `user` if given; return its exit status."""
    try:
        identity = popen_identity(user)
        completed = subprocess.run(list(argv), cwd=cwd, env=None if env is None else dict(env), check=False, **identity)
    except FileNotFoundError:
        return 127
    except PermissionError:
        return 126
    return completed.returncode if completed.returncode >= 0 else 128 - completed.returncode
