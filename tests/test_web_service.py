"""`agentd web` as a process: it serves until SIGTERM and exits 0; a port in use is exit 2 naming
[web] listen; under `agentd run` too (one line, nothing started)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_web_footprint import URL, quiet_agent, started
from webrig import Client

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]


def test_agentd_web_serves_until_sigterm_then_exits_0(tmp_path: Path) -> None:
    config_path, token = quiet_agent(tmp_path, web=True)
    with started(config_path, "web", "--listen", "127.0.0.1:0", wait_for="console and API at") as (web, line):
        found = URL.search(line)
        assert found is not None
        answer = Client(found.group(1), token).get("/api/status")
        assert answer.status == 200 and answer.json()["operator"] == "alice"
        [row] = [s for s in answer.json()["services"] if s["service"] == "web"]  # as `agentd status` shows it
        assert row["liveness"] == "live" and found.group(1) in row["status"], row
        web.send_signal(signal.SIGTERM)
        assert web.wait(timeout=30) == 0
    shown = subprocess.run(
        [sys.executable, "-m", "agentd", "--config", str(config_path), "status", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    [row] = [s for s in json.loads(shown.stdout)["services"] if s["service"] == "web"]
    assert (row["status"], row["liveness"]) == ("stopped", "stopped"), row


def test_a_port_in_use_stops_agentd_web_and_agentd_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under `agentd run` too: the console's port is bound before anything starts (agentd/services/ports.py),
    so a port in use is one line and nothing runs without its console (tests/test_ports.py has the rest)."""
    config_path, _ = quiet_agent(tmp_path, web=True)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = f"127.0.0.1:{held.getsockname()[1]}"
        agentd = [sys.executable, "-m", "agentd", "--config", str(config_path)]
        refused = subprocess.run([*agentd, "web", "--listen", busy], capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2, refused.stderr
        assert f"web.listen: cannot listen on {busy}" in refused.stderr and "Traceback" not in refused.stderr
        monkeypatch.setenv("AGENTD_WEB__LISTEN", busy)
        run = subprocess.run([*agentd, "run"], capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr
        assert f"in use ({busy}, the console): set [web] listen" in run.stderr
