"""The archive row (issue 54): N no-op script tasks drained by a real `agentd dispatch --until-idle` beside a
real `agentd sensors`, without and then with [archive] (moto's S3 server on loopback, started here). Each side
first drains N tasks untimed: with [archive] their N sealed folders are a backlog the sensor service uploads while
the timed drain of N more runs, so the archive works flat out beside it. Measured: each timed drain's rate, and
the archive's: 2N attempts in the bucket per second, from the timed drain's start until the queue is empty."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentd.clock import SystemClock
from agentd.store import Store
from bench.agent import agentd_argv, cli_env, enqueue, open_agent, with_noop_task_type, write_config, write_noop_script

# moto stands for a remote S3 service: at nice 19 what it costs comes from idle CPU, not the drain's (a real
# bucket's CPU is another machine's).
SERVE = """
import os, threading
os.nice(19)
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server._server.server_port, flush=True)
threading.Event().wait()
"""
KEYS = "AWS_ACCESS_KEY_ID=bench\nAWS_SECRET_ACCESS_KEY=bench-secret\n"


@dataclass(frozen=True)
class Drain:
    tasks_per_s: float  # the drain's rate, from its start to its exit
    archived_per_s: float | None  # attempts in the bucket per second, from the drain's start to an empty queue


@contextmanager
def s3_server() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1, a port the OS picks: its URL."""
    process = subprocess.Popen([sys.executable, "-c", SERVE], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        if not port.isdigit():
            raise RuntimeError("moto's S3 server did not start (is moto[server] installed? `make bench` installs it)")
        yield f"http://127.0.0.1:{int(port)}"
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def drain(directory: Path, count: int, endpoint: str | None) -> Drain:
    """One side: `count` no-op tasks queued, `agentd sensors` serving, `agentd dispatch --until-idle` timed; with
    `endpoint`, [archive] to a new bucket there, and the time until the last folder is in it."""
    mutations = [with_noop_task_type(write_noop_script(directory / "bin"))]
    if endpoint is not None:
        mutations.append(_archived(directory, endpoint))
    config_path = write_config(directory, lambda raw: [m(raw) for m in mutations] and None)
    config, store = open_agent(config_path, SystemClock())
    try:
        (directory / "no-sensors").mkdir()
        env = cli_env(AGENTD_METRICS__ENABLED="false", AGENTD_PATHS__SENSORS_DIR=str(directory / "no-sensors"))
        enqueue(store, config, "noop", count)  # a backlog first: `count` sealed folders not yet archived
        subprocess.run(agentd_argv(config_path, "dispatch", "--until-idle"), env=env, check=True, capture_output=True)
        if endpoint is not None:
            store.set_archiving(True)  # as the sensor service's start does: the backlog queued, and what follows
        enqueue(store, config, "noop", count)
        with _serving(config_path, env, store, directory) as _:
            started = time.perf_counter()
            subprocess.run(
                agentd_argv(config_path, "dispatch", "--until-idle"), env=env, check=True, capture_output=True
            )
            drained = time.perf_counter() - started
            archived = None
            if endpoint is not None:
                _wait(lambda: store.archive_queue().length == 0, 300, "the archive queue to empty")
                archived = 2 * count / (time.perf_counter() - started)  # the backlog and the drain's own
        done = len(store.list_tasks(statuses=("completed",), limit=2 * count + 1))
        if done != 2 * count:
            raise RuntimeError(f"agentd dispatch completed {done} of {count} tasks")
        return Drain(count / drained, archived)
    finally:
        store.close()


def _archived(directory: Path, endpoint: str) -> Any:
    import boto3

    bucket = f"bench-{os.getpid()}-{int(time.time() * 1000) % 10**9}"
    client = boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench", aws_secret_access_key="x"
    )
    client.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    keys = directory / "s3.env"
    keys.write_text(KEYS)
    keys.chmod(0o600)

    def mutate(raw: dict[str, Any]) -> None:
        raw["archive"] = {
            "bucket": bucket,
            "endpoint_url": endpoint,
            "credentials_file": str(keys),
            "retention_days": 1,
            "poll_s": 0.2,
        }

    return mutate


@contextmanager
def _serving(config_path: Path, env: dict[str, str], store: Store, directory: Path) -> Iterator[None]:
    """`agentd sensors` started and serving (its row written: it acts from here on), stopped after."""
    with open(directory / "sensors.log", "wb") as log:
        service = subprocess.Popen(agentd_argv(config_path, "sensors"), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait(lambda: any(r["pid"] == service.pid for r in store.service_statuses()), 60, "agentd sensors to serve")
        yield
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(timeout=60)


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
