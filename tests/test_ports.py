"""Ports (issue 52): a port in use is one line naming the setting to change, exit 2, nothing started; `make run`
moves the demo's ports in use to free ones and prints where each service listens."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from support import REPO
from test_entry_points import line_reader, make_run, rest_of, session_members
from test_web_footprint import quiet_agent

from agentd.services.ports import Port, PortInUse, hold_ports, in_use

pytestmark = [pytest.mark.timeout(120)]
SHOWN = re.compile(r"^  (the console|the dispatcher's /metrics|the sensor service's /metrics): (http://\S+)", re.M)


@contextmanager
def taken(port: int = 0) -> Iterator[int]:
    """A port something else listens on for the block: `port` (already in use counts: it is taken either way),
    or one the OS picks."""
    sock = socket.socket()
    try:
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or port == 0:
                raise
        yield sock.getsockname()[1] if port == 0 else port
    finally:
        sock.close()


def port(key: str, listen: str) -> Port:
    return Port(key, f"[metrics] {key}_listen", f"AGENTD_METRICS__{key.upper()}_LISTEN", f"{key}'s /metrics", listen)


def test_a_port_in_use_is_one_line_naming_the_setting_and_how_to_change_it() -> None:
    with taken() as busy, pytest.raises(PortInUse) as refused:
        hold_ports([port("dispatch", f"127.0.0.1:{busy}")], "/etc/agentd/a.toml")
    line = str(refused.value)
    assert "\n" not in line and refused.value.exit_code == 2
    assert (
        f"port {busy} is in use" in line
        and "set [metrics] dispatch_listen to a free port in /etc/agentd/a.toml" in line
    )
    assert 'AGENTD_METRICS__DISPATCH_LISTEN="127.0.0.1:0"' in line and "--free-ports" not in line
    assert "`agentd run --free-ports`" in in_use(port("dispatch", "[::1]:9478"), "a.toml", offer_free=True)
    assert 'AGENTD_METRICS__DISPATCH_LISTEN="[::1]:0"' in in_use(port("dispatch", "[::1]:9478"), "a.toml")


def test_ports_are_held_all_or_none() -> None:
    """The second port in use: the first, bound a moment before, is let go again (nothing half-started)."""
    with taken() as busy:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
        probe.close()
        with pytest.raises(PortInUse):
            hold_ports([port("dispatch", f"127.0.0.1:{free}"), port("sensors", f"127.0.0.1:{busy}")], "a.toml")
        with socket.socket() as again:
            again.bind(("127.0.0.1", free))  # would fail were the first still held


def test_free_moves_only_the_ports_in_use() -> None:
    with taken() as busy:
        held = hold_ports([port("dispatch", f"127.0.0.1:{busy}"), port("sensors", "127.0.0.1:0")], "a.toml", free=True)
        try:
            assert held["dispatch"].moved and not held["sensors"].moved
            assert held["dispatch"].address.startswith("127.0.0.1:") and held["dispatch"].address != f"127.0.0.1:{busy}"
        finally:
            for each in held.values():
                each.sock.close()


def agentd_env(config_path: Path, **settings: str) -> dict[str, str]:
    return {**os.environ, **{f"AGENTD_{name.upper()}": value for name, value in settings.items()}}


@pytest.mark.process
@pytest.mark.parametrize(
    ("command", "setting", "variable"),
    [
        ("dispatch", "[metrics] dispatch_listen", "metrics__dispatch_listen"),
        ("sensors", "[metrics] sensors_listen", "metrics__sensors_listen"),
        ("run", "[web] listen", "web__listen"),
        ("run", "[metrics] sensors_listen", "metrics__sensors_listen"),
    ],
)
def test_a_service_whose_port_is_in_use_exits_2_with_one_line_and_starts_nothing(
    tmp_path: Path, command: str, setting: str, variable: str
) -> None:
    config_path, _ = quiet_agent(tmp_path, web=True)
    agentd = [sys.executable, "-m", "agentd", "--config", str(config_path)]
    with taken() as busy:
        env = agentd_env(config_path, **{variable: f"127.0.0.1:{busy}"})
        refused = subprocess.run([*agentd, command], env=env, capture_output=True, text=True, timeout=60)
    lines = refused.stderr.splitlines()
    assert refused.returncode == 2, refused.stderr
    assert len(lines) == 1, refused.stderr
    assert f"port {busy} is in use" in lines[0] and f"set {setting} to a free port in {config_path}" in lines[0]
    assert ("--free-ports" in lines[0]) == (command == "run")
    events = subprocess.run([*agentd, "events", "--json"], capture_output=True, text=True, timeout=60, check=True)
    started = {json.loads(line)["type"] for line in events.stdout.splitlines()}
    assert not started & {"dispatch_started", "sensor_run_started"}, "nothing started before the port was refused"


def demo_copy(tmp_path: Path) -> Path:
    """The demo config as `make run` uses it, copied with what its relative paths name (its state under tmp_path)."""
    for part in ("config", "skills", "sensors"):
        shutil.copytree(REPO / part, tmp_path / part, symlinks=True)
    return tmp_path / "config" / "identity.example.toml"


@pytest.mark.process
@pytest.mark.skipif(not (REPO / ".venv" / ".installed").exists(), reason="make test bootstraps .venv first")
def test_make_run_with_9478_and_9479_taken_starts_and_prints_the_ports_it_chose(tmp_path: Path) -> None:
    demo = demo_copy(tmp_path)
    env = {name: value for name, value in os.environ.items() if not name.startswith("AGENTD_")}  # the demo's ports
    with ExitStack() as stack:
        stack.enter_context(taken(9478))
        stack.enter_context(taken(9479))
        # -o: the venv is used as it is (never reinstalled from a test); DEMO: the copy
        make = stack.enter_context(make_run("-o", ".venv/.installed", f"DEMO={demo}", env=env))
        lines, seen = line_reader(make.stdout), ""
        try:
            while len(SHOWN.findall(seen)) < 3 or ("dispatch_idle" not in seen and "task_claimed" not in seen):
                seen += lines.get(timeout=60)
            shown = dict(SHOWN.findall(seen))
            dispatch, sensors = shown["the dispatcher's /metrics"], shown["the sensor service's /metrics"]
            assert ":9478/" not in dispatch and ":9479/" not in sensors, seen
            assert "127.0.0.1:9478 was in use" in seen and "127.0.0.1:9479 was in use" in seen, seen
            for url in (dispatch, sensors):
                with urllib.request.urlopen(url, timeout=10) as answer:  # the real ones: they answer
                    assert b"agentd_build_info" in answer.read()
            try:
                urllib.request.urlopen(shown["the console"], timeout=10).close()
            except urllib.error.HTTPError as exc:  # the login page's redirect or refusal: it answers
                assert exc.code < 500
            assert "log in to the console with the demo token: " in seen
        finally:
            os.killpg(make.pid, signal.SIGINT)
            make.wait(timeout=60)
        seen += rest_of(lines, 2)
    assert "Traceback" not in seen
    assert session_members(make.pid) == [], "Ctrl-C left something running"
    assert (tmp_path / "var" / "demo" / "agentd.db").exists(), "the copy's state, not the repo's var/demo"
