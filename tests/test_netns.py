"""A network the attempt cannot leave (agentd/process/netns.py; docs/gateway.md, "The network an attempt can
reach"): tried from inside a real process started through the namespace launcher, as root, inside a user and
network namespace as the harness tests run, and as a real run user under the services' user with the units'
capabilities; what a machine that cannot make one says; the launcher kept lean."""

from __future__ import annotations

import errno
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import netns_attempt
import privsep
import pytest
from support import REPO, gone, missing, wait_until

from agentd.process import netns, runner
from agentd.process.child import pidfds_work
from agentd.process.netns import (
    LAUNCHER,
    Netns,
    NetnsUnavailable,
    checked_listeners,
    explain,
    launcher_argv,
    netns_available,
)
from agentd.process.runner import ProcessSpec, run_process

NO_ROUTE = "OSError: ENETUNREACH"


def can_make_one() -> None:
    if reason := netns_available():
        missing("NETNS", f"no network namespace can be made here: {reason}")


@pytest.fixture
def tls() -> Iterator[dict[str, str]]:
    """A certificate for localhost (and its key) that every user may read, the run user too: the allowed host's."""
    if shutil.which("openssl") is None or shutil.which("curl") is None:
        missing("NETNS", "openssl and curl are needed to stand in for an HTTPS host")
    folder = Path(tempfile.mkdtemp(prefix="agentd-netns-tls-", dir="/tmp"))
    key, cert = folder / "key.pem", folder / "cert.pem"
    options = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"]
    names = ["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"]
    try:
        made = ["openssl", "req", "-x509", *options, *names, "-keyout", str(key), "-out", str(cert)]
        subprocess.run(made, check=True, capture_output=True)
        for path in (folder, key, cert):
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield {"cert": str(cert), "key": str(key)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def assert_confined(found: dict[str, Any], https_port: int | None = None) -> None:
    """What an attempt reaches from inside: nothing of the host's but the two listeners agentd serves."""
    assert found["result"] == "exit 0", found
    probe = found["probe"]
    assert probe["interfaces"] == ["lo"]
    assert probe["setns_host"].startswith("PermissionError"), probe  # no way back to the host's network
    assert probe["remap"].startswith("PermissionError"), probe
    for tried in [probe["first"], *([probe["after_kill"]] if "after_kill" in probe else [])]:
        assert tried["host_port"] == "ConnectionRefusedError: ECONNREFUSED", tried
        assert tried["public"] == [NO_ROUTE] * 3, tried
        assert not tried["dns"].startswith("ok"), tried
        assert tried["served"] == "ok: pong:ping", tried
        assert tried["proxy_allowed"] == "ok: HTTP/1.1 200 Connection established", tried
        assert tried["proxy_refused"].startswith("ok: HTTP/1.1 403"), tried
        assert tried["curl_via_proxy"] == "exit 0: hello from host", tried
        assert tried["curl_direct"].startswith("exit 7:"), tried  # curl: could not connect
    rounds = 2 if "after_kill" in probe else 1
    assert found["told"] == ["ping"] * rounds
    records = found["records"]
    assert [r[:4] for r in records if r[0] == "example.com"] == [["example.com", 443, False, 403]] * rounds
    tunnels = [r for r in records if r[2]]
    assert len(tunnels) == 2 * rounds and all(r[0] == "localhost" for r in tunnels)  # by hand, and curl's
    assert any(r[4] and r[5] for r in tunnels)  # curl's tunnel carried TLS both ways


@pytest.fixture(params=["pidfd", "asyncio"])
def spawner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways runner.py starts a child (as tests/test_runner.py runs each test)."""
    if request.param == "pidfd" and not pidfds_work():
        pytest.skip("this kernel gives no pidfds")
    monkeypatch.setattr(runner, "LEAN_SPAWN", request.param == "pidfd")
    return str(request.param)


def config(tls: dict[str, str], workdir: Path, **more: Any) -> dict[str, Any]:
    return {"python": sys.executable, "workdir": str(workdir), **tls, **more}


@pytest.mark.process
@pytest.mark.asyncio
async def test_an_attempt_reaches_only_what_agentd_serves_it(tls: dict[str, str], tmp_path: Path, spawner: str) -> None:
    """As root (this test's own process is the dispatcher): even root inside cannot rejoin the host's network,
    as its capabilities are those of a user namespace nested in the one that owns its network."""
    can_make_one()
    found = await netns_attempt.attempt(config(tls, tmp_path))
    assert_confined(found)
    assert found["probe"]["uid"] == os.getuid()


@pytest.mark.process
def test_the_same_inside_a_namespace_as_the_harness_tests_run(tls: dict[str, str], tmp_path: Path) -> None:
    """tests/harness/isolated.sh runs the harness tests in a user and network namespace of their own: an attempt's
    namespaces nest inside it, and hold there too."""
    can_make_one()
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        missing("NETNS", "unshare and ip are needed to stand where the harness tests run")
    script = f'ip link set lo up && exec {sys.executable} {netns_attempt.__file__} "$1"'
    argv = ["unshare", "--user", "--map-root-user", "--net", "sh", "-c", script, "sh"]
    ran = subprocess.run([*argv, json.dumps(config(tls, tmp_path))], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert_confined(json.loads(ran.stdout))


@pytest.mark.deep
@pytest.mark.process
def test_as_the_run_user_killing_everything_it_owns_opens_no_way_out(tls: dict[str, str], tmp_path: Path) -> None:
    """As deployed: the dispatcher is the services' user with CAP_SETUID and CAP_SETGID alone, in its delegated
    cgroup; the attempt is the run user, in a cgroup of its own. Inside, it sees its own uid and no capability,
    and once it has killed every process it may, what it reaches is the same: the listeners are the dispatcher's."""
    privsep.require()
    can_make_one()
    with privsep.priv_agent() as agent:
        python = privsep.reachable_python()
        driver = config(
            tls,
            agent.workspace,
            python=str(python),
            user=agent.run,
            state_dir=str(agent.state_dir),
            output_dir=str(agent.state_dir),
            kill_all=True,
        )
        argv = [str(agent.agentd.parent / "python"), netns_attempt.__file__, json.dumps(driver)]
        ran = subprocess.run(agent.service_command(argv), capture_output=True, text=True, timeout=180, env=agent.env())
        assert ran.returncode == 0, ran.stderr
        found = json.loads(ran.stdout)
        assert_confined(found)
        probe = found["probe"]
        run = pwd.getpwnam(agent.run)
        assert (probe["uid"], probe["gid"], probe["cap_eff"]) == (run.pw_uid, run.pw_gid, 0)
        assert probe["helper_killed"]
        assert agent.processes_of(agent.run) == []


@pytest.mark.process
def test_where_no_namespace_can_be_made_the_start_fails_naming_why_and_the_fix(tmp_path: Path) -> None:
    """A machine that allows no user namespace (here: user.max_user_namespaces = 0, set inside a user namespace
    of the test's own, where it holds for that namespace alone) never runs the attempt on the host's network."""
    if shutil.which("unshare") is None:
        missing("NETNS", "unshare is needed to turn user namespaces off for one test")
    marker = tmp_path / "ran"
    code = (
        "import anyio, sys; from pathlib import Path; from agentd.process.netns import Netns, netns_available;"
        "from agentd.process.runner import ProcessSpec, run_process;"
        f"tmp = Path({str(tmp_path)!r});"
        f"spec = ProcessSpec(['touch', {str(marker)!r}], tmp, {{'PATH': '/usr/bin:/bin'}}, tmp / 'out', tmp / 'err',"
        " 30, netns=Netns((0,)));"
        "print(anyio.run(run_process, spec).describe()); print(netns_available())"
    )
    script = f'echo 0 > /proc/sys/user/max_user_namespaces && exec {sys.executable} -c "$1"'
    ran = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", script, "sh", code], capture_output=True, text=True
    )
    if ran.returncode != 0 and "max_user_namespaces" in ran.stderr:
        missing("NETNS", f"user.max_user_namespaces cannot be set in a user namespace here: {ran.stderr}")
    assert ran.returncode == 0, ran.stderr
    started, available = ran.stdout.splitlines()
    why = "user.max_user_namespaces is 0; to fix: `sysctl -w user.max_user_namespaces=15000`"
    assert started.startswith("cannot start 'touch': no network of its own could be made: ") and why in started
    assert available.startswith("no network of its own could be made: ") and why in available
    assert not marker.exists()


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_program_that_cannot_be_executed_fails_as_it_would_without_a_namespace(
    tmp_path: Path, spawner: str
) -> None:
    can_make_one()
    handed: list[object] = []
    spec = ProcessSpec(
        ["no-such-program"], tmp_path, {"PATH": "/usr/bin:/bin"}, tmp_path / "o", tmp_path / "e", 30.0,
        netns=Netns((0,), handed.append),
    )  # fmt: skip
    result = await run_process(spec)
    assert result.start_error == "cannot start 'no-such-program': no such file (or its interpreter is missing)"
    assert handed == []  # no listener is served for a program that never ran


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_launcher_that_does_not_answer_in_time_fails_the_start_and_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launcher slower than START_S (here it waits 5 s before it starts): the start fails saying so, and the
    launcher is killed and reaped, its program never run."""
    can_make_one()
    started = netns.launcher_argv
    monkeypatch.setattr(netns, "START_S", 0.2)
    monkeypatch.setattr(netns, "launcher_argv", lambda *a: ["/bin/sh", "-c", 'sleep 5; exec "$0" "$@"', *started(*a)])
    marker = tmp_path / "ran"
    spec = ProcessSpec(
        ["touch", str(marker)], tmp_path, {"PATH": "/usr/bin:/bin"}, tmp_path / "o", tmp_path / "e", 30.0,
        netns=Netns((0,)),
    )  # fmt: skip
    result = await run_process(spec)
    said = "its launcher did not start the program within 0.2s"
    assert result.start_error == f"cannot start 'touch': no network of its own could be made: {said}"
    assert not marker.exists()


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_caller_that_cannot_take_its_listeners_fails_the_start_and_no_process_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    can_make_one()
    pid_file = tmp_path / "pid"

    def refuse(listeners: tuple[socket.socket, ...]) -> None:
        for listener in listeners:
            listener.close()
        wait_until(pid_file.exists, 10.0, "the program to start")
        raise RuntimeError("the gateway could not be served")

    spec = ProcessSpec(
        ["sh", "-c", f"echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file} && exec sleep 60"], tmp_path,
        {"PATH": "/usr/bin:/bin"}, tmp_path / "o", tmp_path / "e", 60.0, netns=Netns((0,), refuse),
    )  # fmt: skip
    result = await run_process(spec)
    said = "its listeners could not be served (the gateway could not be served)"
    assert result.start_error == f"cannot start 'sh': no network of its own could be made: {said}"
    assert gone(int(pid_file.read_text()))
    assert "netns_listeners_not_served" in caplog.text


@pytest.mark.process
@pytest.mark.asyncio
async def test_without_listeners_a_process_reaches_nothing_at_all(tmp_path: Path, spawner: str) -> None:
    can_make_one()
    with socket.create_server(("127.0.0.1", 0)) as host:
        code = f"import socket; socket.create_connection(('127.0.0.1', {host.getsockname()[1]}), timeout=5)"
        spec = ProcessSpec(
            [sys.executable, "-c", code], tmp_path, {}, tmp_path / "o", tmp_path / "e", 30.0, netns=Netns()
        )
        result = await run_process(spec)
    assert result.exit_code == 1 and "ConnectionRefusedError" in (tmp_path / "e").read_text()


@pytest.mark.process
def test_the_launcher_loads_nothing_but_built_in_modules(tmp_path: Path) -> None:
    """Its start is the interpreter's and no more (docs/decisions.md, "A network of the attempt's own"): a module
    it would load beyond these would cost every attempt's start."""
    can_make_one()

    def loaded(argv: list[str], **kwargs: Any) -> set[str]:
        ran = subprocess.run(argv, capture_output=True, text=True, timeout=60, **kwargs)
        return {line.split("|")[-1].strip() for line in ran.stderr.splitlines() if line.startswith("import time:")}

    bare = loaded([sys.executable, "-X", "importtime", "-I", "-S", "-c", "pass"])
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        argv = launcher_argv(["true"], theirs.fileno(), [0])
        launched = loaded([argv[0], "-X", "importtime", *argv[1:]], pass_fds=[theirs.fileno()])
    assert launched - bare - {"imported package"} <= {"_socket", "errno", "fcntl", "_ctypes", "netns_launch"}
    assert "netns_launch" in launched and LAUNCHER.parent == REPO / "agentd" / "process"


# --- what the dispatcher accepts from a launcher, and what it says when it cannot make one ---------------------


def test_listeners_from_this_services_own_network_are_refused() -> None:
    """A launcher that made no namespace (a bug, or a launcher stood in for) is caught by the sockets it sends."""
    with (
        socket.create_server(("127.0.0.1", 0)) as own,
        pytest.raises(NetnsUnavailable, match="belongs to this service's own network"),
    ):
        checked_listeners(b"ok", [os.dup(own.fileno())], [0])


@pytest.mark.parametrize(
    ("make", "ports", "problem"),
    [
        (lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM), [0], "is not a TCP socket"),
        (lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM), [0], "is not listening"),
        (lambda: socket.create_server(("127.0.0.1", 0)), [1], "not 127.0.0.1:1"),
        (lambda: socket.create_server(("127.0.0.1", 0)), [0, 0], "sent 1 sockets for 2 ports"),
    ],
)
def test_what_is_not_the_listener_asked_for_is_refused_and_closed(make: Any, ports: list[int], problem: str) -> None:
    made = make()
    fd = os.dup(made.fileno())
    made.close()
    with pytest.raises(NetnsUnavailable, match=problem):
        checked_listeners(b"ok", [fd], ports)
    with pytest.raises(OSError):
        os.fstat(fd)  # closed


def test_a_descriptor_that_is_no_socket_is_refused_and_closed(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)
    with pytest.raises(NetnsUnavailable, match="no socket"):
        checked_listeners(b"ok", [fd], [0])
    with pytest.raises(OSError):
        os.fstat(fd)


@pytest.mark.parametrize(
    ("step", "error", "sysctls", "says"),
    [
        (
            "unshare",
            errno.EPERM,
            {"kernel/unprivileged_userns_clone": "0"},
            "sysctl -w kernel.unprivileged_userns_clone=1",
        ),
        ("unshare", errno.ENOSPC, {"user/max_user_namespaces": "0"}, "sysctl -w user.max_user_namespaces=15000"),
        ("unshare", errno.ENOSPC, {"user/max_net_namespaces": "0"}, "sysctl -w user.max_net_namespaces=15000"),
        ("unshare", errno.ENOSPC, {}, "the limit of user or network namespaces is reached"),
        ("unshare", errno.EINVAL, {}, "CONFIG_USER_NS"),
        ("unshare", errno.EPERM, {}, "RestrictNamespaces="),
        ("uid_map", errno.EPERM, {"kernel/apparmor_restrict_unprivileged_userns": "1"}, "an AppArmor profile"),
        ("unshare", errno.EPERM, {"kernel/apparmor_restrict_unprivileged_userns": "1"}, "allows `userns,`"),
        ("listen", errno.EADDRINUSE, {}, "a port was asked for twice"),
    ],
)
def test_why_no_namespace_could_be_made_and_the_fix(step: str, error: int, sysctls: dict[str, str], says: str) -> None:
    said = explain(step, error, sysctls)
    assert said.startswith("no network of its own could be made: ") and says in said


@pytest.mark.parametrize("ports", [(70000,), (-1,), (8080, 8080), tuple(range(1, 18))])
def test_a_request_the_launcher_could_not_meet_is_refused_when_made(ports: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"Netns\.ports"):
        Netns(ports)


def test_two_free_ports_may_be_asked_for() -> None:
    assert Netns((0, 0, 8080)).ports == (0, 0, 8080)
