"""The agent's ports are held by systemd's socket units (docs/install-and-deploy.md, "Ports held by systemd").

An attempt runs on the same VM as the console: while the console was down (a restart, a config error, the
boot before it started) any local user, the run user among them, could bind its port and answer in its
place, collecting the bearer token of every client that asked (an operator's script, a browser through an
SSH tunnel). Now `agentd install` writes a .socket unit per port; systemd binds it at boot and hands it to
the service, which takes it over (agentd/process/activation.py).

Here the test plays systemd: it binds the socket, keeps it, and starts the real `agentd web` and `agentd
dispatch` processes with it as descriptor 3 and LISTEN_FDS/LISTEN_PID set, as sd_listen_fds(3) says."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import agent_config, missing, wait_until

from agentd.cli import main
from agentd.install.sockets import socket_units
from agentd.process import activation
from agentd.store import init_state_dir, migrate
from agentd.work.validation import load_config

pytestmark = pytest.mark.process

# What systemd does between fork and exec: the sockets to descriptors 3.., then LISTEN_PID (the pid that
# will exec agentd) and LISTEN_FDS.
AS_SYSTEMD = """
import os, sys
fds = [int(fd) for fd in sys.argv[1].split(",")]
for index, fd in enumerate(fds):
    os.dup2(fd, 3 + index)
os.environ["LISTEN_FDS"], os.environ["LISTEN_PID"] = str(len(fds)), str(os.getpid())
os.execv(sys.executable, [sys.executable, "-m", "agentd", *sys.argv[2:]])
"""


def held(port: int = 0) -> socket.socket:
    """A listening socket on 127.0.0.1, as a .socket unit's ListenStream= makes it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


@pytest.fixture
def agent(tmp_path: Path) -> Callable[..., Path]:
    """An agent on disk whose [web] listen and metrics ports are the ones the test gives."""

    def make(web: int, dispatch: int = 0) -> Path:
        def ports(raw: dict[str, Any]) -> None:
            raw["web"] = {**raw.get("web", {}), "listen": f"127.0.0.1:{web}"}
            raw["metrics"] = {
                "enabled": True,
                "dispatch_listen": f"127.0.0.1:{dispatch}",
                "sensors_listen": "127.0.0.1:0",
            }

        path = agent_config(tmp_path, ports)
        config = load_config(path)
        init_state_dir(config.paths.state_dir, config.paths.workspace)
        from agentd.clock import SystemClock

        migrate(config.db_path, SystemClock())
        return path

    return make


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """`agentd ARGS…` started as systemd starts a service, given these sockets, its output in a file
    (`output(process)`); killed at the end."""
    made: list[subprocess.Popen[str]] = []

    def start(sockets: list[socket.socket], config: Path, *args: str) -> subprocess.Popen[str]:
        fds = [sock.fileno() for sock in sockets]
        env = {k: v for k, v in os.environ.items() if not (k.startswith("AGENTD_") and "__" in k)}  # the file's ports
        with open(tmp_path / f"out-{len(made)}.log", "w") as log:
            process = subprocess.Popen(
                [sys.executable, "-c", AS_SYSTEMD, ",".join(map(str, fds)), "--config", str(config), *args],
                pass_fds=fds,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        made.append(process)
        return process

    yield start
    for process in made:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def output(tmp_path: Path, index: int) -> str:
    return (tmp_path / f"out-{index}.log").read_text()


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, ""


def answers(port: int, path: str) -> bool:
    try:
        return get(port, path)[0] == 200
    except OSError:
        return False


def test_the_console_serves_on_the_socket_systemd_holds_and_no_one_takes_it_between_runs(
    agent: Callable[..., Path], started: Callable[..., subprocess.Popen[str]]
) -> None:
    with held() as console:
        port = console.getsockname()[1]
        config = agent(web=port)
        first = started([console], config, "web")
        wait_until(lambda: answers(port, "/login"), 20, "the console on the socket it was given")
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=20) == 0
        # Down, as between two runs of the unit: the port is still held, so no one else can take it.
        with socket.socket() as squatter, pytest.raises(OSError) as taken:
            squatter.bind(("127.0.0.1", port))
        assert taken.value.errno == 98  # EADDRINUSE
        second = started([console], config, "web")  # the restart gets the same socket
        wait_until(lambda: answers(port, "/login"), 20, "the console again, on the same socket")
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=20) == 0


def test_systemds_own_socket_activation_starts_the_console_on_the_first_request(
    agent: Callable[..., Path], tmp_path: Path
) -> None:
    """systemd-socket-activate (systemd's tool for exactly this) binds the port, and execs agentd only when
    the first request comes, as a socket unit does: that request is answered by the console."""
    tool = shutil.which("systemd-socket-activate")
    if tool is None:
        missing(
            "SYSTEMD_ANALYZE", "systemd-socket-activate is not installed (the systemd package; .ci/run installs it)"
        )
    with held() as probe:  # a port the OS picked; the tool binds it again at once
        port = probe.getsockname()[1]
    config = agent(web=port)
    env = {k: v for k, v in os.environ.items() if not (k.startswith("AGENTD_") and "__" in k)}
    argv = [tool, "-l", f"127.0.0.1:{port}", sys.executable, "-m", "agentd", "--config", str(config), "web"]
    with open(tmp_path / "activate.log", "w") as log:
        activated = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "Listening on" in (tmp_path / "activate.log").read_text(), 20, "the tool to listen")
        status, body = get(port, "/login")  # waits in the socket's queue while agentd starts
        assert status == 200 and "csrf" in body, (tmp_path / "activate.log").read_text()
        assert "Execing" in (tmp_path / "activate.log").read_text()
    finally:
        activated.send_signal(signal.SIGTERM)
        activated.wait(timeout=20)


def test_the_dispatchers_metrics_serve_on_the_socket_systemd_holds(
    agent: Callable[..., Path], started: Callable[..., subprocess.Popen[str]], tmp_path: Path
) -> None:
    with held() as metrics:
        port = metrics.getsockname()[1]
        dispatcher = started([metrics], agent(web=0, dispatch=port), "dispatch")
        wait_until(lambda: answers(port, "/metrics") or dispatcher.poll() is not None, 20, "the metrics")
        assert dispatcher.poll() is None, output(tmp_path, 0)
        assert "agentd_build_info" in get(port, "/metrics")[1]
        dispatcher.send_signal(signal.SIGTERM)
        assert dispatcher.wait(timeout=30) == 0


def test_a_socket_passed_while_metrics_are_off_is_named_in_the_log(
    agent: Callable[..., Path], started: Callable[..., subprocess.Popen[str]], tmp_path: Path
) -> None:
    """Metrics switched off in the TOML, the old socket unit still enabled: the port is held and nothing
    answers it (a scrape waits until it times out). The dispatcher says so, and how to fix it."""
    with held() as metrics:
        config = agent(web=0, dispatch=metrics.getsockname()[1])
        config.write_text(config.read_text().replace("[metrics]\nenabled = true\n", "[metrics]\nenabled = false\n", 1))
        dispatcher = started([metrics], config, "dispatch")
        wait_until(lambda: "nothing answers on it" in output(tmp_path, 0), 20, "the warning")
        assert f"127.0.0.1:{metrics.getsockname()[1]}" in output(tmp_path, 0)
        dispatcher.send_signal(signal.SIGTERM)
        assert dispatcher.wait(timeout=30) == 0


def test_a_socket_on_another_address_than_the_toml_names_is_refused(
    agent: Callable[..., Path], started: Callable[..., subprocess.Popen[str]], tmp_path: Path
) -> None:
    """The TOML's port was changed since `agentd install` wrote the socket unit: serving on the socket
    would answer on a port the config does not name; binding its own would leave the held one unanswered."""
    with held() as stale, held() as other:
        wanted = other.getsockname()[1]
        other.close()
        process = started([stale], agent(web=wanted), "web")
        assert process.wait(timeout=30) == 2
        out = output(tmp_path, 0)
        assert f"web.listen: systemd passed a socket on 127.0.0.1:{stale.getsockname()[1]}, but web.listen is" in out
        assert "run `agentd install` again" in out and "Traceback" not in out


def test_sockets_passed_to_another_process_are_not_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """LISTEN_PID names the process the sockets are for: a child that inherited the variables (and not
    the sockets) takes none; and the variables are removed, so no child of ours takes them either."""
    monkeypatch.setenv("LISTEN_PID", str(os.getppid()))
    monkeypatch.setenv("LISTEN_FDS", "1")
    assert activation.passed_sockets.__wrapped__() == ()
    assert "LISTEN_PID" not in os.environ and "LISTEN_FDS" not in os.environ
    for pid, count in (("1x", "1"), (str(os.getpid()), "-1"), (str(os.getpid()), "١")):
        monkeypatch.setenv("LISTEN_PID", pid)
        monkeypatch.setenv("LISTEN_FDS", count)
        assert activation.passed_sockets.__wrapped__() == ()
    # a count past what was passed (nothing open at those descriptors) takes nothing, and does not fail
    unused = os.open(os.devnull, os.O_RDONLY)
    os.close(unused)  # the lowest free descriptor: certainly nothing there
    monkeypatch.setattr(activation, "LISTEN_FDS_START", unused)
    monkeypatch.setenv("LISTEN_PID", str(os.getpid()))
    monkeypatch.setenv("LISTEN_FDS", "1")
    assert activation.passed_sockets.__wrapped__() == ()


def test_install_writes_a_socket_unit_per_port_the_toml_names_and_uninstall_removes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    assert main(["install", "--root", str(root), "--agent", "arc"]) == 0
    units, toml = root / "etc/systemd/system", root / "etc/agentd/arc.toml"
    names = sorted(path.name for path in units.glob("*.socket"))
    assert names == ["agentd-dispatch@arc.socket", "agentd-sensors@arc.socket", "agentd-web@arc.socket"]
    raw = tomllib.loads(toml.read_text())  # the file's ports (the suite's environment sets others)
    for name, listen in (("web", raw["web"]["listen"]), ("dispatch", raw["metrics"]["dispatch_listen"])):
        assert f"\nListenStream={listen}\n" in (units / f"agentd-{name}@arc.socket").read_text()
    assert "PartOf=agentd-dispatch@%i.service" in (units / "agentd-dispatch@arc.socket").read_text()
    assert "PartOf" not in (units / "agentd-web@arc.socket").read_text(), "the console's port is always held"
    out = capsys.readouterr().out
    assert "next: systemctl enable --now agentd-web@arc.socket agentd-dispatch@arc.socket" in out
    # metrics switched off in the TOML: install again removes their sockets (nothing would take them over)
    toml.write_text(toml.read_text().replace("[metrics]\n", "[metrics]\nenabled = false\n", 1))
    assert main(["install", "--root", str(root), "--agent", "arc"]) == 0
    assert sorted(path.name for path in units.glob("*.socket")) == ["agentd-web@arc.socket"]
    assert main(["uninstall", "--root", str(root), "--agent", "arc"]) == 0
    assert list(units.glob("*.socket")) == []


def test_a_listen_systemd_cannot_bind_before_the_service_gets_no_socket_unit(tmp_path: Path) -> None:
    toml = agent_config(tmp_path, lambda raw: raw.update(web={"listen": "localhost:9578"}))
    found = socket_units(toml, tmp_path)
    assert found[tmp_path / f"agentd-web@{toml.stem}.socket"] is None, "a host name: the service binds it itself"
