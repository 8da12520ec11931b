"""What an attempt in a network of its own tries (tests/test_netns.py): run inside it, by tests/netns_attempt.py,
with the standard library alone. Prints one JSON object: each try and what came of it.

Its one argument is JSON: `host_port` (a port open on the host's 127.0.0.1), `served_port` (a listener the
dispatcher serves inside), `proxy_port` (the egress proxy inside), `https_port` and `cacert` (a host the allow
list names, over HTTPS), `kill_all` (then kill every process this user may, and try again)."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

CLONE_NEWNET = 0x40000000
PUBLIC = [("1.1.1.1", 443), ("8.8.8.8", 53), ("2606:4700:4700::1111", 443)]


def outcome(action: Any) -> str:
    """`ok: …` or the error's name and errno name."""
    try:
        return f"ok: {action()}"
    except OSError as exc:
        return f"{type(exc).__name__}: {errno.errorcode.get(exc.errno or 0, exc.errno)}"


def connect(host: str, port: int) -> str:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect((host, port))
        return "connected"


def served(port: int, line: bytes) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(line + b"\n")
        return sock.makefile("rb").readline().decode().strip()


def through_proxy(port: int, host: str, target: int) -> str:
    """A CONNECT by hand: the proxy's answer line."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"CONNECT {host}:{target} HTTP/1.1\r\nHost: {host}:{target}\r\n\r\n".encode())
        return sock.makefile("rb").readline().decode().strip()


def curl(url: str, cacert: str, proxy: str | None) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if proxy:
        env["HTTPS_PROXY"] = proxy
    done = subprocess.run(
        ["curl", "-sS", "--max-time", "10", "--cacert", cacert, url], capture_output=True, text=True, env=env
    )
    return f"exit {done.returncode}: {done.stdout.strip() or done.stderr.strip()}"


def setns_host() -> str:
    """Join the host's network namespace (pid 1's): what an attempt would do to leave."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/proc/1/ns/net", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        return "joined"
    finally:
        os.close(fd)


def remap() -> str:
    with open("/proc/self/uid_map", "w") as written:
        written.write("0 0 1")
    return "written"


def reach(args: dict[str, Any]) -> dict[str, Any]:
    """The ways out an attempt may try, and the ones it is given."""
    https = f"https://localhost:{args['https_port']}/"
    return {
        "host_port": outcome(lambda: connect("127.0.0.1", args["host_port"])),
        "public": [outcome(lambda h=h, p=p: connect(h, p)) for h, p in PUBLIC],  # type: ignore[misc]
        "dns": outcome(lambda: socket.getaddrinfo("github.com", 443)),
        "served": outcome(lambda: served(args["served_port"], b"ping")),
        "proxy_allowed": outcome(lambda: through_proxy(args["proxy_port"], "localhost", args["https_port"])),
        "proxy_refused": outcome(lambda: through_proxy(args["proxy_port"], "example.com", 443)),
        "curl_via_proxy": curl(https, args["cacert"], f"http://127.0.0.1:{args['proxy_port']}"),
        "curl_direct": curl(https, args["cacert"], None),
    }


def main() -> None:
    args = json.loads(sys.argv[1])
    status = Path("/proc/self/status").read_text()
    found: dict[str, Any] = {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "cap_eff": int(status.split("CapEff:")[1].split()[0], 16),
        "interfaces": [name for _, name in socket.if_nameindex()],
        "setns_host": outcome(setns_host),
        "remap": outcome(remap),
        "first": reach(args),
    }
    if args.get("kill_all"):
        helper = subprocess.Popen(["sleep", "60"])
        os.kill(-1, signal.SIGKILL)  # every process this user may signal, but this one
        found["helper_killed"] = helper.wait() == -signal.SIGKILL
        found["after_kill"] = reach(args)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
