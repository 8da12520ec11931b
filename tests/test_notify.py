"""The sd_notify protocol, as systemd would see it: a real `agentd dispatch` and a datagram socket."""

# ruff: noqa: F811  (agent is test_dispatch_process's fixture, imported to be used by name)

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from queue import Empty, Queue

import pytest
from test_dispatch_process import Agent, agent, ok, wait_until  # noqa: F401

pytestmark = pytest.mark.process


class NotifySocket:
    """What systemd listens on: every datagram the service sends, with the services' rows (read first: the
    service goes on at once) and the events at that moment."""

    def __init__(self, path: Path, agent: Agent) -> None:
        self.path, self.agent = path, agent
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: Queue[tuple[str, list[str]]] = Queue()
        self.rows_at: dict[str, dict[str, int]] = {}  # a datagram's first line → each service row's pid then
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096).decode()
            except TimeoutError:
                continue
            rows = {row["service"]: row["pid"] for row in self.agent.store.service_statuses()}
            self.rows_at.setdefault(data.splitlines()[0], rows)
            events = [e.type for e in self.agent.store.read_events(limit=100_000)]
            self.messages.put((data, events))

    def wait_for(self, prefix: str, timeout: float = 20) -> tuple[str, list[str]]:
        """The next datagram with a line starting with `prefix` (others are kept in `seen`)."""
        while True:
            try:
                data, events = self.messages.get(timeout=timeout)
            except Empty:
                raise AssertionError(f"no {prefix} within {timeout}s") from None
            self.seen.append(data)
            if any(line.startswith(prefix) for line in data.splitlines()):
                return data, events

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


def test_ready_after_the_boot_sweep_then_watchdog_status_and_stopping(agent: Agent, tmp_path: Path) -> None:
    task_id = agent.add(once_marker="first", sleep_first_s=600, sleep_s=3, outcome=ok())
    crashed = agent.start()  # leaves an open attempt behind for the sweep
    agent.wait_event("task_started", task_id)
    # Killed only once the first attempt has left its marker: killed sooner (a slow start under load),
    # the second attempt would take itself for the first and sleep its 600 s.
    wait_until(lambda: (agent.config.paths.workspace / "first").exists(), 20, "the first attempt's marker")
    crashed.send_signal(signal.SIGKILL)
    crashed.wait(timeout=10)

    notify = NotifySocket(tmp_path / "notify.sock", agent)
    try:
        service = agent.start(NOTIFY_SOCKET=str(notify.path), WATCHDOG_USEC="1000000")
        _, events_at_ready = notify.wait_for("READY=1")
        assert "boot_sweep_reclaimed" in events_at_ready, "READY=1 only after the boot sweep"
        # the row is this process's (the killed one's is there too): `agentd status` lists it live at once
        assert notify.rows_at["READY=1"].get("dispatch") == service.pid, "READY=1 before the service's row"
        assert "dispatch_lock_stale_cleared" in events_at_ready
        notify.wait_for(f"STATUS=running task {task_id} (scripted, no model)")
        notify.wait_for("WATCHDOG=1")
        notify.wait_for("WATCHDOG=1")  # periodic: it keeps coming while the attempt runs
        agent.wait_event("task_finished", task_id, timeout=20)
        notify.wait_for("STATUS=idle, 0 claimable")
        service.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING=1")
        assert service.wait(timeout=15) == 0
    finally:
        notify.close()
    statuses = [line for data in notify.seen for line in data.splitlines() if line.startswith("STATUS=")]
    assert len(set(statuses)) >= 3, statuses


def test_without_notify_socket_nothing_is_sent_and_it_still_runs(agent: Agent) -> None:
    service = agent.start("--until-idle")
    assert service.wait(timeout=20) == 0
    assert "Traceback" not in agent.log(0)


@pytest.mark.parametrize("usec", ["-5", "0", "abc", "1e6", ""])
def test_a_watchdog_interval_that_is_not_a_positive_number_is_not_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, usec: str
) -> None:
    """systemd sets a positive count of microseconds; anything else (a hand-written unit, a test) means no
    watchdog, said once in the log, never a crash at start (a negative one was: anyio's sleep refused it)."""
    from agentd.config.environment import systemd_watchdog_interval

    monkeypatch.setenv("WATCHDOG_USEC", usec)
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    assert systemd_watchdog_interval() is None
    assert (usec == "") or "is not a positive number of microseconds" in caplog.text
    monkeypatch.setenv("WATCHDOG_USEC", "3000000")
    assert systemd_watchdog_interval() == 1.5


def test_the_console_is_ready_once_it_serves_and_its_row_is_written(agent: Agent, tmp_path: Path) -> None:
    """agentd-web@ is Type=notify: READY=1 comes after the console listens and has written its status row, so
    `agentd status` lists it as soon as `systemctl start` returns (a Type=exec console was missing from it for
    the moment it took to start). STOPPING=1 at SIGTERM; `agentd run`'s console beside the dispatcher is silent."""
    notify = NotifySocket(tmp_path / "notify.sock", agent)
    try:
        web = subprocess.Popen(
            [sys.executable, "-m", "agentd", "--config", str(agent.config_path), "web", "--listen", "127.0.0.1:0"],
            env={**agent.env, "NOTIFY_SOCKET": str(notify.path)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        agent.processes.append(web)
        ready, _ = notify.wait_for("READY=1")
        assert notify.rows_at["READY=1"] == {"web": web.pid}, "READY=1 only once `agentd status` lists the console"
        rows = {row["service"]: row for row in agent.store.service_statuses()}
        assert rows["web"]["status"].startswith("serving the console and API at http://127.0.0.1:"), rows
        assert f"STATUS={rows['web']['status']}" in ready.splitlines()
        url = rows["web"]["status"].rsplit(" ", 1)[1]
        assert urllib.request.urlopen(f"{url}login", timeout=5).status == 200  # it serves
        web.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING=1")
        assert web.wait(timeout=15) == 0
    finally:
        notify.close()
