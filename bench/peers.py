"""The peers at their defaults: huey (SqliteHuey; the real `huey_consumer` for the end-to-end row)
and persist-queue (SQLiteAckQueue). Both come from the `[bench]` extra; without it their rows
say so and the agentd rows still run."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench.agent import REPO, cli_env

PEERS = {"huey": "huey", "persist-queue": "persistqueue"}


def installed(peer: str) -> bool:
    return importlib.util.find_spec(PEERS[peer]) is not None


def describe(peer: str) -> str:
    """`huey 2.5.1 (synchronous=2)`: its version and the synchronous setting its defaults give."""
    if not installed(peer):
        return f"{peer}: not installed (pip install -e '.[bench]')"
    with_defaults = _huey_synchronous if peer == "huey" else _persist_queue_synchronous
    return f"{peer} {version(peer)} (defaults: synchronous={with_defaults()})"


def _huey_synchronous() -> int:
    from bench.huey_tasks import make_huey

    huey, _, _ = make_huey(":memory:")
    return int(huey.storage.conn.execute("PRAGMA synchronous").fetchone()[0])


def _persist_queue_synchronous() -> int:
    import tempfile

    from persistqueue import SQLiteAckQueue

    with tempfile.TemporaryDirectory() as folder:
        queue = SQLiteAckQueue(folder)
        level = int(queue._putter.execute("PRAGMA synchronous").fetchone()[0])
        queue.close()
    return level


# --- huey -----------------------------------------------------------------------------------------


def huey_enqueue_per_s(directory: Path, count: int) -> float:
    from bench.huey_tasks import make_huey

    directory.mkdir(parents=True)
    _, _, noop = make_huey(str(directory / "huey.db"))
    started = time.perf_counter()
    for _ in range(count):
        noop()
    return count / (time.perf_counter() - started)


def huey_claim_complete_per_s(directory: Path, count: int) -> float:
    """huey's own claim and completion: `dequeue` (select + delete) and `execute` (the task run,
    its result stored), as its worker loop does them."""
    from bench.huey_tasks import make_huey

    directory.mkdir(parents=True)
    huey, _, noop = make_huey(str(directory / "huey.db"))
    for _ in range(count):
        noop()
    started = time.perf_counter()
    for _ in range(count):
        huey.execute(huey.dequeue())
    elapsed = time.perf_counter() - started
    assert huey.result_count() == count
    return count / elapsed


def huey_consumer_per_s(directory: Path, script: Path, count: int) -> float:
    """Tasks/s of a real `huey_consumer -w 1` running the no-op script through subprocess: from the
    consumer's start until the last result is stored (the queue filled before it starts)."""
    from bench.huey_tasks import make_huey

    directory.mkdir(parents=True)
    database = directory / "huey.db"
    huey, run_script, _ = make_huey(str(database))
    for n in range(count):
        run_script(str(script), str(directory / f"result-{n}.json"))
    with open(directory / "consumer.log", "wb") as log:
        started = time.perf_counter()
        consumer = subprocess.Popen(
            [*_consumer_argv(), "bench.huey_tasks.huey", "--workers", "1"],
            cwd=REPO,
            env=cli_env(BENCH_HUEY_DB=str(database), PYTHONPATH=str(REPO)),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_for_results(huey, count, consumer, directory / "consumer.log")
            elapsed = time.perf_counter() - started
        finally:
            _stop(consumer)
    return count / elapsed


def _consumer_argv() -> list[str]:
    script = Path(sys.executable).parent / "huey_consumer"
    return [str(script)] if script.exists() else [sys.executable, "-m", "huey.bin.huey_consumer"]


def _wait_for_results(huey: Any, count: int, consumer: subprocess.Popen[bytes], log: Path) -> None:
    pause = threading.Event()
    deadline = time.monotonic() + 60 + count
    while huey.result_count() < count:
        if consumer.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"huey_consumer did not finish {count} tasks:\n{log.read_text()[-2000:]}")
        pause.wait(0.002)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGINT)  # huey's graceful stop
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- persist-queue --------------------------------------------------------------------------------


def persist_queue_enqueue_per_s(directory: Path, count: int) -> float:
    from persistqueue import SQLiteAckQueue

    queue = SQLiteAckQueue(str(directory))
    item = {"task_type": "example", "payload": {"note": "hello"}}
    started = time.perf_counter()
    for _ in range(count):
        queue.put(item)
    elapsed = time.perf_counter() - started
    queue.close()
    return count / elapsed


def persist_queue_claim_complete_per_s(directory: Path, count: int) -> float:
    """SQLiteAckQueue's claim and completion: `get` (the row marked unacked) and `ack`."""
    from persistqueue import SQLiteAckQueue

    queue = SQLiteAckQueue(str(directory))
    for n in range(count):
        queue.put({"task_type": "example", "n": n})
    started = time.perf_counter()
    for _ in range(count):
        queue.ack(queue.get(block=False))
    elapsed = time.perf_counter() - started
    assert queue.acked_count() == count
    queue.close()
    return count / elapsed
