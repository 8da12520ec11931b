"""A network of the process's own (docs/gateway.md, "The network an attempt can reach"): a process started with
`ProcessSpec.netns` runs in a new network namespace where only `lo` is up, and its only ways out are the
listening sockets on 127.0.0.1 that the caller asked for, made inside that namespace and served by the caller
(the dispatcher's model gateway and egress proxy) from its own event loop.

The namespace is made by the process itself, as its own user, before its program starts:
agentd/process/netns_launch.py runs first (as `python -I -S`), makes it, hands the listeners over on a unix socket it
inherits, and execs the program. The dispatcher needs no privilege for it (its units allow user and network
namespaces, and nothing more). A namespace that cannot be made is a start failure that says why and the fix
(`explain`), never a run on the host's network; `netns_available` says whether one can be made here.
"""

from __future__ import annotations

import array
import errno
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import anyio

from agentd import frozen_value
from agentd.process.privilege import RunUser, can_switch_users, popen_identity

logger = logging.getLogger(__name__)

LAUNCHER = Path(__file__).with_name("netns_launch.py")
# The launcher is imported (its .pyc read, not its source compiled: ~1 ms a start) from its folder, put last on
# the path so that nothing there can stand in for a module of the standard library.
BOOT = "import sys; sys.path.append(sys.argv.pop(1)); from netns_launch import main; sys.exit(main(sys.argv[1:]))"
PREFIX = "no network of its own could be made"
START_S = 10.0  # how long the launcher may take to make the namespace and exec (~10 ms as measured)
MAX_LISTENERS = 16
SO_NETNS_COOKIE = 71  # Linux 5.14: which network namespace a socket belongs to
SYSCTLS = (
    "kernel/unprivileged_userns_clone",
    "kernel/apparmor_restrict_unprivileged_userns",
    "user/max_user_namespaces",
    "user/max_net_namespaces",
)


@frozen_value
class Netns:
    """A network namespace of the process's own, with a listener on 127.0.0.1 inside for each of `ports` (0: a
    free port the kernel picks; a port of the namespace is free for the asking, as nothing else is in it).

    `on_listening` is given the listeners (in the order of `ports`) once the process has started, before
    `run_process`'s on_started: it owns them from then on (serve them, close them). Without it, they are
    closed at once, and the process can reach nothing at all."""

    ports: tuple[int, ...] = ()
    on_listening: Callable[[tuple[socket.socket, ...]], None] | None = None

    def __post_init__(self) -> None:
        if len(self.ports) > MAX_LISTENERS or any(not 0 <= port <= 65535 for port in self.ports):
            raise ValueError(f"Netns.ports: at most {MAX_LISTENERS} ports, each 0..65535; got {self.ports}")
        fixed = [port for port in self.ports if port]
        if len(set(fixed)) != len(fixed):
            raise ValueError(f"Netns.ports: a port is asked for twice in {self.ports}")


class NetnsUnavailable(OSError):
    """No namespace could be made for a process: its start fails, and the message says why and the fix."""


P = TypeVar("P")


async def start_in_netns(
    request: Netns,
    argv: Sequence[str],
    start: Callable[[list[str], tuple[int, ...]], Awaitable[P]],
    kill: Callable[[P], Awaitable[None]],
) -> P:
    """`argv` started in a network of its own: `start` is given the launcher's argv and the descriptor to pass
    it, and returns the process; once the process runs in its namespace, the listeners are handed over
    (`Launch.hand_over`). A namespace that could not be made, or a program that could not be executed, is
    raised (NetnsUnavailable; as Popen raises it), the process `kill`ed (and reaped) first.

    The caller shields this from cancellation (runner.py's spawn does): the launcher takes ~10 ms.
    """
    launch = Launch(request)
    try:
        process = await start(launch.argv(argv), launch.pass_fds)
    except BaseException:
        launch.close()
        raise
    launch.forked()
    try:
        await launch.hand_over()
    except OSError:
        await kill(process)
        raise
    return process


def launcher_argv(argv: Sequence[str], channel: int, ports: Sequence[int]) -> list[str]:
    """`argv` as run by the launcher, which reports on the inherited descriptor `channel`."""
    listed = ",".join(str(port) for port in ports) or "-"
    return [sys.executable, "-I", "-S", "-c", BOOT, str(LAUNCHER.parent), str(channel), listed, "--", *argv]


class Launch:
    """One process's start in a namespace of its own: the channel its launcher reports on (a unix socket
    pair: one end the launcher inherits, one this process reads), and what it reports."""

    def __init__(self, request: Netns) -> None:
        self.request = request
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._ours.setblocking(False)

    def argv(self, argv: Sequence[str]) -> list[str]:
        return launcher_argv(argv, self._theirs.fileno(), self.request.ports)

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self._theirs.fileno(),)

    def forked(self) -> None:
        """The launcher holds its end now (or never will): ours alone tells us when it has gone."""
        self._theirs.close()

    async def hand_over(self) -> None:
        """Wait (up to START_S) for the launcher's listeners and for its exec, then give the listeners to the
        request's `on_listening`.

        :raises NetnsUnavailable: the namespace could not be made (why, and the fix).
        :raises OSError: the program could not be executed (as Popen raises it: FileNotFoundError, ...).
        """
        try:
            with anyio.fail_after(START_S):
                listeners = checked_listeners(*await self._receive(), self.request.ports)
                try:
                    _started(*await self._receive())
                except BaseException:
                    _close(listeners)
                    raise
        except TimeoutError:
            raise NetnsUnavailable(f"{PREFIX}: its launcher did not start the program within {START_S:g}s") from None
        finally:
            self._ours.close()
        self._give(listeners)

    async def _receive(self) -> tuple[bytes, list[int]]:
        while True:
            try:
                return _receive_now(self._ours, len(self.request.ports))
            except BlockingIOError:
                await anyio.wait_readable(self._ours)

    def _give(self, listeners: tuple[socket.socket, ...]) -> None:
        """The listeners to `on_listening` (theirs from then on, whatever it does), or closed without one. A caller
        that cannot take them fails the start: the process would have no way out it was meant to have."""
        if self.request.on_listening is None:
            _close(listeners)
            return
        try:
            self.request.on_listening(listeners)
        except Exception as exc:
            logger.exception("netns_listeners_not_served")
            raise NetnsUnavailable(f"{PREFIX}: its listeners could not be served ({exc})") from exc

    def close(self) -> None:
        self._theirs.close()
        self._ours.close()


def _receive_now(channel: socket.socket, count: int) -> tuple[bytes, list[int]]:
    """One message of the launcher's and the descriptors it carries (b"" when it has gone: an exec)."""
    message, ancillary, flags, _ = channel.recvmsg(64, socket.CMSG_SPACE(max(count, 1) * 4), socket.MSG_CMSG_CLOEXEC)
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += array.array("i", data[: len(data) - len(data) % 4])
    if flags & socket.MSG_CTRUNC:
        _close_fds(fds)
        raise NetnsUnavailable(f"{PREFIX}: its launcher sent more sockets than were asked for")
    return message, fds


def _started(message: bytes, fds: list[int]) -> None:
    """The launcher's last word: nothing (its exec closed the channel), or `exec ERRNO`, raised as Popen would."""
    _close_fds(fds)
    if message:
        said = message.decode("ascii", "replace").split()
        code = int(said[1]) if len(said) == 2 and said[0] == "exec" and said[1].isdigit() else errno.EIO
        raise OSError(code, os.strerror(code))  # FileNotFoundError for ENOENT, PermissionError for EACCES


def checked_listeners(message: bytes, fds: list[int], ports: Sequence[int]) -> tuple[socket.socket, ...]:
    """The launcher's first message, read: its listeners (each a TCP socket listening on 127.0.0.1 at the port
    asked for, and in a network namespace other than this process's), or NetnsUnavailable saying why not."""
    if message != b"ok":
        _close_fds(fds)
        raise NetnsUnavailable(_failure(message))
    listeners = _sockets(fds)
    try:
        if len(listeners) != len(ports):
            raise NetnsUnavailable(f"{PREFIX}: its launcher sent {len(listeners)} sockets for {len(ports)} ports")
        for listener, port in zip(listeners, ports, strict=True):
            if problem := _listener_problem(listener, port):
                raise NetnsUnavailable(f"{PREFIX}: its launcher sent a socket that {problem}")
    except BaseException:
        _close(listeners)
        raise
    return listeners


def _sockets(fds: list[int]) -> tuple[socket.socket, ...]:
    """A socket object for each descriptor; NetnsUnavailable (every one closed) if one is no socket."""
    made: list[socket.socket] = []
    for index, fd in enumerate(fds):
        try:
            made.append(socket.socket(fileno=fd))
        except OSError:
            _close(made)
            _close_fds(fds[index:])
            raise NetnsUnavailable(f"{PREFIX}: its launcher sent a descriptor that is no socket") from None
    return tuple(made)


def _listener_problem(listener: socket.socket, port: int) -> str | None:
    if listener.family != socket.AF_INET or listener.type != socket.SOCK_STREAM:
        return "is not a TCP socket"
    if not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        return "is not listening"
    host, bound = listener.getsockname()
    if host != "127.0.0.1" or (port and bound != port):
        return f"listens on {host}:{bound}, not 127.0.0.1:{port or 'any'}"
    own = namespace_cookie()
    if own is not None and namespace_cookie(listener) == own:
        return "belongs to this service's own network, not a new one"
    return None


def namespace_cookie(sock: socket.socket | None = None) -> bytes | None:
    """Which network namespace `sock` (None: this process) belongs to; None where the kernel cannot say."""
    probe = sock or socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        return probe.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8)
    except OSError:
        return None
    finally:
        if sock is None:
            probe.close()


def _failure(message: bytes) -> str:
    """What the launcher's report (`fail STEP ERRNO`, or nothing when it died first) means, and the fix."""
    said = message.decode("ascii", "replace").split()
    if len(said) == 3 and said[0] == "fail" and said[2].isdigit():
        return explain(said[1], int(said[2]), read_sysctls())
    return f"{PREFIX}: its launcher ended before making the namespace (what it printed is in the process's stderr)"


def _close(listeners: Sequence[socket.socket]) -> None:
    for listener in listeners:
        listener.close()


def _close_fds(fds: Sequence[int]) -> None:
    for fd in fds:
        os.close(fd)


# --- why not, and the fix ---------------------------------------------------------------------------------

APPARMOR = (
    "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1); to fix: "
    f"give {sys.executable} an AppArmor profile that allows `userns,`, or `sysctl -w "
    "kernel.apparmor_restrict_unprivileged_userns=0` (and keep it in /etc/sysctl.d/)"
)


STEPS = {  # agentd/process/netns_launch.py's steps, as said to a person
    "unshare": "making a user and a network namespace",
    "setgroups": "denying setgroups in it",
    "uid_map": "mapping its user into it",
    "gid_map": "mapping its group into it",
    "lo": "bringing lo up",
    "listen": "listening on 127.0.0.1",
    "unshare-back": "making the user namespace it runs in",
}


def explain(step: str, error: int, sysctls: Mapping[str, str]) -> str:
    """Why the launcher's `step` failed with `error`, and the fix, read with this machine's namespace settings
    (`sysctls`: SYSCTLS' values by name, as `read_sysctls` gives them)."""
    doing = STEPS.get(step.removesuffix("-back"), step) if step != "unshare-back" else STEPS[step]
    said = f"{PREFIX}: {doing} failed ({os.strerror(error)})"
    if step == "unshare":
        return f"{said}: {_unshare_cause(error, sysctls)}"
    if error in (errno.EPERM, errno.EACCES) and sysctls.get("kernel/apparmor_restrict_unprivileged_userns") == "1":
        return f"{said}: {APPARMOR}"
    if step == "listen" and error == errno.EADDRINUSE:
        return f"{said}: a port was asked for twice"
    return f"{said}: the kernel refused the new namespace's own setup (see docs/gateway.md)"


def _unshare_cause(error: int, sysctls: Mapping[str, str]) -> str:
    if error == errno.EINVAL:
        return "this kernel has no user or network namespaces (it needs CONFIG_USER_NS and CONFIG_NET_NS)"
    for name in ("user/max_user_namespaces", "user/max_net_namespaces"):
        if sysctls.get(name) == "0":
            return f"{_dotted(name)} is 0; to fix: `sysctl -w {_dotted(name)}=15000` (and keep it in /etc/sysctl.d/)"
    if error in (errno.ENOSPC, errno.EUSERS):
        return "the limit of user or network namespaces is reached (user.max_user_namespaces, user.max_net_namespaces)"
    if sysctls.get("kernel/unprivileged_userns_clone") == "0":
        return (
            "unprivileged user namespaces are off (kernel.unprivileged_userns_clone = 0); to fix: `sysctl -w "
            "kernel.unprivileged_userns_clone=1` (and keep it in /etc/sysctl.d/)"
        )
    if sysctls.get("kernel/apparmor_restrict_unprivileged_userns") == "1":
        return APPARMOR
    return (
        "a seccomp filter refused it; to fix: a systemd unit must allow user and net namespaces "
        "(RestrictNamespaces=, as units/agentd-dispatch@.service does), a container nested user namespaces"
    )


def _dotted(name: str) -> str:
    return name.replace("/", ".")


def read_sysctls() -> dict[str, str]:
    """SYSCTLS' values here (those this kernel has)."""
    found = {}
    for name in SYSCTLS:
        try:
            found[name] = Path("/proc/sys", name).read_text().strip()
        except OSError:
            continue
    return found


def netns_available(user: RunUser | None = None) -> str | None:
    """None when a process can be started in a network of its own here, else why not and the fix: a real start
    (of `true`, through the launcher, ~10 ms), as `user` where this process may switch to it, else as itself."""
    as_user = popen_identity(user) if user is not None and can_switch_users() else {}
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        try:
            child = subprocess.Popen(
                launcher_argv(["true"], theirs.fileno(), [0]),
                pass_fds=(theirs.fileno(),),
                env={"PATH": "/usr/bin:/bin"},
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                **as_user,
            )
        except OSError as exc:
            return f"{PREFIX}: its launcher could not start ({exc})"
        theirs.close()
        ours.settimeout(START_S)
        try:
            return _checked(ours)
        finally:
            child.kill()
            child.wait()


def _checked(channel: socket.socket) -> str | None:
    try:
        _close(checked_listeners(*_receive_now(channel, 1), [0]))
        _started(*_receive_now(channel, 1))
    except TimeoutError:
        return f"{PREFIX}: its launcher did not answer within {START_S:g}s"
    except OSError as exc:  # NetnsUnavailable says it all; a failed exec of `true` is the launcher's own failure
        return str(exc) if isinstance(exc, NetnsUnavailable) else f"{PREFIX}: its launcher could not exec: {exc}"
    return None
