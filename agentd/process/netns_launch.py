"""The launcher that puts an attempt in a network of its own (agentd/process/netns.py starts it; docs/gateway.md,
"The network an attempt can reach").

It runs as the attempt's own user, before the attempt's program: `python -I -S netns_launch.py FD PORTS --
ARGV…` (the dispatcher imports it from its folder instead, to read its .pyc: `netns.BOOT`). It makes a user namespace
and a network namespace (mapping its user to 0 there, the only user it may map), brings `lo` up, makes a
listening socket on 127.0.0.1 inside for each of PORTS (comma separated; 0: any free port; `-`: none), sends
them to the dispatcher over the inherited unix socket FD and closes its own copies, then makes a second user
namespace that maps its user back (so the attempt sees its own uid, and holds no capability over the network
namespace, which the first one owns), and execs ARGV.

It never runs ARGV unless every step worked: a step that fails is reported over FD as `fail STEP ERRNO` and
the launcher exits, so an attempt never runs on the host's network by mistake. A failed exec is reported as
`exec ERRNO`; a successful one closes FD (it is close-on-exec), which is how the dispatcher knows the attempt
has started. It loads nothing but built-in modules: not `os` (posix is what os wraps; os and what it imports
cost ~1.5 ms a start), not even `from __future__` (docs/decisions.md, "A network of the attempt's own";
tests/test_netns.py keeps it so).
"""

import _socket
import errno
import fcntl
import posix
import sys

CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ_BYTES = 40  # sizeof(struct ifreq): the name (16 bytes), then a union whose first short is the flags
BACKLOG = 128
FAILED = 125  # the launcher's own exit status when a step failed (as env(1) and chroot(1) use it)


class Step(Exception):
    """A step that failed: its name and the errno the kernel gave."""

    def __init__(self, step: str, error: int) -> None:
        super().__init__(step, error)
        self.step, self.error = step, error


class Doing:
    """`with Doing("lo"): …`: an OSError inside becomes Step("lo", its errno)."""

    def __init__(self, step: str) -> None:
        self.step = step

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        if isinstance(error, OSError):
            raise Step(self.step, error.errno or 0) from None


def unshare(flags: int) -> None:
    """unshare(2): os.unshare from Python 3.12, libc's through _ctypes before (ctypes itself costs ~3 ms to load)."""
    call = getattr(posix, "unshare", None)
    if call is not None:
        call(flags)
        return
    import _ctypes

    class Int(_ctypes._SimpleCData):  # type: ignore[type-arg]  # what ctypes calls c_int
        _type_ = "i"

    class LibcCall(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = Int

    class Libc:
        _handle = _ctypes.dlopen(None, posix.RTLD_NOW)  # type: ignore[arg-type]  # this program and libc, as CDLL(None)

    if LibcCall(("unshare", Libc))(flags) != 0:  # type: ignore[arg-type]  # what ctypes.CDLL passes: a _handle
        raise OSError(_ctypes.get_errno(), posix.strerror(_ctypes.get_errno()))


def map_to(uid: int, gid: int, inside_uid: int, inside_gid: int, step: str = "") -> None:
    """Map this process's user and group (`uid`, `gid` as the parent namespace sees them) to `inside_uid` and
    `inside_gid` in the user namespace it has just made: the one mapping an unprivileged process may write.
    A failure is the Step `setgroups`, `uid_map` or `gid_map`, with `step` after it."""
    for name, text in (
        ("setgroups", "deny"),  # required before an unprivileged gid_map; no process here may change its groups
        ("uid_map", f"{inside_uid} {uid} 1"),
        ("gid_map", f"{inside_gid} {gid} 1"),
    ):
        with Doing(name + step):
            fd = posix.open(f"/proc/self/{name}", posix.O_WRONLY | posix.O_CLOEXEC)
            try:
                posix.write(fd, text.encode())
            finally:
                posix.close(fd)


def bring_lo_up() -> None:
    """`ip link set lo up` without netlink (the units allow AF_UNIX, AF_INET and AF_INET6 only): SIOCSIFFLAGS."""
    probe = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM | _socket.SOCK_CLOEXEC)
    try:
        request = b"lo".ljust(IFREQ_BYTES, b"\0")
        flags = int.from_bytes(fcntl.ioctl(probe.fileno(), SIOCGIFFLAGS, request)[16:18], sys.byteorder)
        request = request[:16] + (flags | IFF_UP).to_bytes(2, sys.byteorder) + request[18:]
        fcntl.ioctl(probe.fileno(), SIOCSIFFLAGS, request)
    finally:
        probe.close()


def listen_on(ports: list[int]) -> list[_socket.socket]:
    """A listening socket on 127.0.0.1:PORT for each port, in this (new) network namespace."""
    made: list[_socket.socket] = []
    try:
        for port in ports:
            listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
            made.append(listener)
            listener.bind(("127.0.0.1", port))
            listener.listen(BACKLOG)
    except BaseException:
        for listener in made:
            listener.close()
        raise
    return made


def hand_over(channel: _socket.socket, listeners: list[_socket.socket]) -> None:
    """Send the listeners to the dispatcher in one message, and close this process's copies."""
    fds = b"".join(listener.fileno().to_bytes(4, sys.byteorder, signed=True) for listener in listeners)
    rights = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)] if listeners else []
    channel.sendmsg([b"ok"], rights)
    for listener in listeners:
        listener.close()


def make_namespaces(channel: _socket.socket, ports: list[int]) -> None:
    """Every step before the exec, in order; raises Step naming the one that failed."""
    uid, gid = posix.getuid(), posix.getgid()
    with Doing("unshare"):
        unshare(CLONE_NEWUSER | CLONE_NEWNET)
    map_to(uid, gid, 0, 0)
    with Doing("lo"):
        bring_lo_up()
    with Doing("listen"):
        hand_over(channel, listen_on(ports))
    with Doing("unshare-back"):
        unshare(CLONE_NEWUSER)  # a namespace nested in the first: no capability over the network leaves with us
    map_to(0, 0, uid, gid, "-back")


def parse(argv: list[str]) -> tuple[int, list[int], list[str]]:
    """FD, the ports and the attempt's own argv from this script's arguments."""
    if len(argv) < 4 or argv[2] != "--":
        raise SystemExit("usage: netns_launch.py FD PORTS -- ARGV...")
    ports = [] if argv[1] == "-" else [int(port) for port in argv[1].split(",")]
    return int(argv[0]), ports, argv[3:]


def execvp(argv: list[str]) -> None:
    """os.execvp: the program found on PATH (the first that runs; else the first error that is not "no such
    file", as execvp(3) reports it). Returns only by raising."""
    if "/" in argv[0]:
        posix.execv(argv[0], argv)
    path = posix.environ.get(b"PATH", b"/bin:/usr/bin").decode()
    first: OSError | None = None
    for folder in path.split(":"):
        try:
            posix.execv(f"{folder or '.'}/{argv[0]}", argv)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as refused:
            first = first or refused
    raise first or FileNotFoundError(errno.ENOENT, posix.strerror(errno.ENOENT), argv[0])


def main(args: list[str]) -> int:
    fd, ports, argv = parse(args)
    posix.set_inheritable(fd, False)  # closed by the exec below: the attempt never holds it
    channel = _socket.socket(fileno=fd)
    try:
        make_namespaces(channel, ports)
    except Step as failed:
        channel.send(f"fail {failed.step} {failed.error}".encode())
        return FAILED
    try:
        execvp(argv)
    except OSError as exc:
        channel.send(f"exec {exc.errno or 0}".encode())
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return FAILED  # not reached: execvp returns only by raising


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
