"""The console row (issue #44): live event streams against a real `agentd run` (dispatcher and console in
one process), each replaying a backlog of events from the first, while no-op tasks drain: how many
streams it holds (the rest get 429), how long `/api/status` takes meanwhile, how much slower the
dispatcher drains the same tasks than with no stream open, and the process's memory."""

from __future__ import annotations

import json
import re
import secrets
import selectors
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentd.clock import SystemClock
from agentd.process.wake import poke
from agentd.store import Store
from agentd.web.auth import new_token
from bench.agent import agentd_argv, cli_env, enqueue, open_agent, with_noop_task_type, write_config, write_noop_script
from bench.processes import TICKS_PER_S

URL = re.compile(r"console and API at (http://127\.0\.0\.1:[0-9]+/)")
TOKENS = 25  # stream owners: the streams asked for are spread over them
STATUS_EVERY_S = 0.1


@dataclass(frozen=True)
class ConsoleLoad:
    asked: int
    held: int
    refused: int
    quiet_status_ms: list[float]  # /api/status with no stream open
    status_ms: list[float]  # and while the streams replay
    quiet_s: float  # the tasks' drain with no stream open
    loaded_s: float  # the same number of tasks while the streams replay
    quiet_cpu_s: float  # the CPU `agentd run` took for the quiet drain
    loaded_cpu_s: float  # and for the loaded one
    replayed: int  # events the streams delivered while the loaded drain ran
    peak_mb: float  # VmHWM of `agentd run`
    rss_mb: float  # VmRSS once the streams are closed


def console_load(directory: Path, tasks: int, streams: int, backlog: int) -> ConsoleLoad:
    """`streams` streams asked for (25 tokens' worth) over a backlog of `backlog` events, `tasks` no-op
    tasks drained before and while they replay."""
    config_path = write_config(directory, quiet(directory, with_noop_task_type(write_noop_script(directory / "bin"))))
    config, store = open_agent(config_path, SystemClock())
    try:
        append_backlog(store, backlog)
        tokens = [operator_token(store, f"bench{n}") for n in range(TOKENS)]
        with agentd_run(config_path, directory) as (process, url):
            with StatusProbe(url, tokens[0]) as alone:
                cpu = cpu_s(process.pid)
                quiet_s = drain(store, config, tasks)
                quiet_cpu_s = cpu_s(process.pid) - cpu
            with open_streams(url, tokens, streams) as held, StatusProbe(url, tokens[0]) as beside:
                cpu, before = cpu_s(process.pid), held.events
                loaded_s = drain(store, config, tasks)
                loaded_cpu_s, replayed = cpu_s(process.pid) - cpu, held.events - before
            rss_mb, peak_mb = memory_mb(process.pid)
        drains = (quiet_s, loaded_s, quiet_cpu_s, loaded_cpu_s)
        return ConsoleLoad(
            streams, held.count, streams - held.count, alone.ms, beside.ms, *drains, replayed, peak_mb, rss_mb
        )
    finally:
        store.close()


def quiet(directory: Path, mutate: Any) -> Any:
    """The noop task type, no sensors, no metrics port, the console on a port the OS picks."""
    (directory / "sensors").mkdir(parents=True, exist_ok=True)

    def change(raw: dict[str, Any]) -> None:
        mutate(raw)
        raw["paths"]["sensors_dir"] = str(directory / "sensors")
        raw["metrics"] = {"enabled": False}
        raw["web"] = {"enabled": True, "listen": "127.0.0.1:0"}

    return change


def append_backlog(store: Store, count: int) -> None:
    """`count` events in one transaction: what a busy agent's log holds for a stream to replay."""
    now = SystemClock().now()
    with store.transaction(), store._events_batched():
        for n in range(count):
            payload = {"name": f"backlog{n}", "token_id": secrets.token_hex(6), "by": "bench"}
            store._append_event("web_token_added", now, payload=payload)


def operator_token(store: Store, name: str) -> str:
    token_id, hashed, whole = new_token()
    store.add_web_token(token_id, name, hashed, "bench", SystemClock().now())
    return whole


@contextmanager
def agentd_run(config_path: Path, directory: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`agentd run` until the block ends, once its log names the console's address."""
    log_path = directory / "run.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(agentd_argv(config_path, "run"), env=cli_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while (found := URL.search(log_path.read_text(errors="replace"))) is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"agentd run did not serve the console:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.05)
        yield process, found.group(1)
    finally:
        process.terminate()
        process.wait(timeout=60)


def drain(store: Store, config: Any, count: int) -> float:
    """Seconds from queueing `count` no-op tasks to the last one completed."""
    before = len(store.list_tasks(statuses=("completed",), limit=1_000_000))
    started = time.perf_counter()
    enqueue(store, config, "noop", count)
    poke(config.paths.state_dir)  # as `agentd task add` wakes an idle dispatcher
    deadline = started + 600
    while len(store.list_tasks(statuses=("completed",), limit=1_000_000)) < before + count:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{count} tasks did not complete within 600 s")
        time.sleep(0.01)
    return time.perf_counter() - started


class Streams:
    """The streams the console held open, read to the end in one thread (as many clients would)."""

    def __init__(self, socks: list[socket.socket]) -> None:
        self.socks, self.count, self.events = socks, len(socks), 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        chosen = selectors.DefaultSelector()
        for sock in self.socks:
            sock.setblocking(False)
            chosen.register(sock, selectors.EVENT_READ)
        while not self.stopping.is_set():
            for key, _ in chosen.select(timeout=0.1):
                data = key.fileobj.recv(1 << 20)  # type: ignore[union-attr]
                if not data:
                    chosen.unregister(key.fileobj)
                self.events += data.count(b"\ndata: ")

    def stop(self) -> int:
        self.stopping.set()
        self.thread.join(10)
        for sock in self.socks:
            sock.close()
        return self.events


@contextmanager
def open_streams(url: str, tokens: list[str], count: int) -> Iterator[Streams]:
    """`count` streams asked for from the first event, round-robin over `tokens`; those answered 200 are
    held (and read), the others closed."""
    parts = urlsplit(url)
    held: list[socket.socket] = []
    for n in range(count):
        sock = socket.create_connection((parts.hostname or "", parts.port or 0), timeout=30)
        token = tokens[n % len(tokens)]
        head = (
            f"GET /api/events/stream?after=0 HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n\r\n"
        )
        sock.sendall(head.encode())
        status = sock.recv(12)
        if status.startswith(b"HTTP/1.1 200"):
            held.append(sock)
        else:
            sock.close()
    streams = Streams(held)
    try:
        yield streams
    finally:
        streams.stop()


class StatusProbe:
    """`GET /api/status` every STATUS_EVERY_S from a thread of its own while the block runs; each
    answer's milliseconds."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token, self.ms = url, token, list[float]()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._probe, daemon=True)

    def __enter__(self) -> StatusProbe:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _probe(self) -> None:
        import http.client

        parts = urlsplit(self.url)
        while True:  # one answer at least, however short the block (a quick run's drain is shorter than the pace)
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
            started = time.perf_counter()
            conn.request("GET", "/api/status", headers={"Authorization": f"Bearer {self.token}"})
            answer = conn.getresponse()
            json.loads(answer.read())
            self.ms.append((time.perf_counter() - started) * 1e3)
            conn.close()
            if answer.status != 200:
                raise RuntimeError(f"/api/status answered {answer.status}")
            if self.stopping.wait(STATUS_EVERY_S):
                return

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(70)


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process, in MB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return tuple(int(fields[name].split()[0]) / 1024 for name in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


def cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0
