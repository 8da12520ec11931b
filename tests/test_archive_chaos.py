"""The archiver SIGKILLed mid-upload, again and again (issue 54, `make chaos`'s "SIGKILLs during upload"): the
real sensor service (`agentd sensors`, which runs the archiver) killed while it uploads, started again each time.
Nothing is lost (every sealed folder ends in the bucket with its hash), and nothing is duplicated in a way the
auditor's check rejects (an object written twice is the same bytes: a second version of the same folder)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rig import Rig
from s3server import S3Server, credentials_file, start_s3
from support import wait_until
from test_archive import archived, bucket_of, run_tasks, sealed

from agentd.archive.audit import audit_archive
from agentd.archive.location import attempt_key
from agentd.clock import SystemClock
from agentd.store import open_store

pytestmark = pytest.mark.process
FOLDERS = 200


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3()
    yield server
    server.stop()


@pytest.mark.asyncio
@pytest.mark.timeout(180)
async def test_sigkills_during_upload_lose_nothing_and_duplicate_nothing_verify_rejects(
    rig_factory: Callable[..., Rig], s3: S3Server, tmp_path: Path
) -> None:
    rig = rig_factory(
        archived(s3.bucket("chaos"), s3.url, credentials_file(tmp_path / "s3.env"), concurrency=1, poll_s=0.2)
    )
    rig.store.set_archiving(True)
    await run_tasks(rig, FOLDERS)  # sealed in-process: the service below only uploads
    want = sealed(rig)
    rig.close()
    empty = tmp_path / "no-sensors"
    empty.mkdir()
    env = {"AGENTD_METRICS__ENABLED": "false", "AGENTD_PATHS__SENSORS_DIR": str(empty)}
    command = [sys.executable, "-m", "agentd", "--config", str(rig.config.path), "sensors"]
    store = open_store(rig.config.db_path, SystemClock())
    chance = random.Random(54)
    killed_with_work_left = 0
    try:
        import os

        for round_ in range(5):
            if store.archive_queue().length == 0:
                break
            with open(tmp_path / f"sensors-{round_}.log", "wb") as log:
                service = subprocess.Popen(command, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
            left = store.archive_queue().length
            moved = lambda left=left, service=service: store.archive_queue().length < left or service.poll() is not None  # noqa: E731
            wait_until(moved, 30, "an upload")
            time.sleep(chance.uniform(0.0, 0.05))  # uploads to a loopback server take milliseconds each
            service.send_signal(signal.SIGKILL)
            service.wait(timeout=10)
            killed_with_work_left += store.archive_queue().length > 0
        with open(tmp_path / "sensors-last.log", "wb") as log:
            service = subprocess.Popen(command, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
        serving = lambda: any(r["pid"] == service.pid for r in store.service_statuses())  # noqa: E731
        wait_until(serving, 30, "the last service serving")  # its SIGTERM handler in place
        wait_until(lambda: store.archive_queue().length == 0, 60, "the queue emptied")
        wait_until(lambda: store.archive_progress().head is not None, 30, "the head witnessed")
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=30) == 0
    finally:
        store.close()
    assert killed_with_work_left >= 2  # the kills landed while uploads were under way
    bucket = bucket_of(rig)
    for attempt_id, (task_id, manifest_sha256) in want.items():
        stored = bucket.get(attempt_key(task_id, attempt_id))
        assert stored is not None and stored.metadata["manifest-sha256"] == manifest_sha256
    audit = audit_archive(bucket)
    assert audit.findings == [] and audit.attempts == FOLDERS
    logs = "".join(p.read_text() for p in tmp_path.glob("sensors-*.log"))
    assert "Traceback" not in logs
