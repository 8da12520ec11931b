"""The evidence archive (issue 54; docs/backup-and-archive.md, "Archive", "Witnessed head") against moto's
standalone S3 server on loopback (tests/s3server.py), with versioning and object lock: every sealed folder in the
bucket with its manifest hash, nothing lost while the bucket is stopped, a locked object the agent cannot delete,
an auditor's check from the bucket alone, and a rolled-back state dir caught by the witnessed head."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from s3server import KEYS, S3Server, credentials_file, start_s3
from support import CliResult, ok, run_main

from agentd.archive.bucket import ArchiveUnavailable, Bucket
from agentd.archive.location import Location, attempt_key
from agentd.archive.upload import Archiver, backoff_s
from agentd.evidence.rollback import publish_head

pytestmark = pytest.mark.process  # an S3 server of its own (moto), a real child process

RETENTION_DAYS = 30  # past the real date the S3 server keeps (the fake clock starts 2026-11-22)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3()
    yield server
    server.stop()


def archived(bucket: str, endpoint: str, creds: Path, **more: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(raw: dict[str, Any]) -> None:
        raw["archive"] = {
            "bucket": bucket,
            "endpoint_url": endpoint,
            "credentials_file": str(creds),
            "retention_days": RETENTION_DAYS,
            "head_interval_s": 10,
            "timeout_s": 2,
            **more,
        }

    return mutate


@pytest.fixture
def archive_rig(rig_factory: Callable[..., Rig], s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest) -> Rig:
    name = "ev-" + request.node.name.lower().replace("_", "-")[:40].strip("-")
    return rig_factory(archived(s3.bucket(name), s3.url, credentials_file(tmp_path / "s3.env")))


def bucket_of(rig: Rig) -> Bucket:
    section = rig.config.archive
    return Bucket(Location.of(section), rig.config.agent.agent_id, KEYS, timeout_s=5)


async def run_tasks(rig: Rig, count: int) -> None:
    for _ in range(count):
        rig.add("scripted", payload={"outcome": ok()})
    assert await rig.drain() == count
    head = rig.store.chain_head()
    assert head is not None
    publish_head(rig.config.paths.state_dir, head)  # as the services do after each durable commit


def sealed(rig: Rig) -> dict[str, tuple[int, str]]:
    """attempt_id → (task_id, manifest sha256) of every attempt the chain sealed."""
    return {
        e.attempt_id: (e.task_id, e.payload["manifest_sha256"])
        for e in rig.events()
        if e.type == "task_attempt_finished" and e.attempt_id and e.task_id
    }


def cli(capsys: pytest.CaptureFixture[str], rig: Rig, *args: str) -> CliResult:
    return run_main(capsys, rig.config.path, *args)


@pytest.mark.asyncio
async def test_after_100_attempts_every_sealed_folder_is_in_the_bucket_with_its_hash(archive_rig: Rig) -> None:
    rig = archive_rig
    archiver = Archiver(rig.config, rig.db, rig.clock)
    await archiver.start()
    await run_tasks(rig, 100)
    assert rig.store.archive_queue().length == 100  # queued by each outcome commit, nothing uploaded yet
    done = await archiver.step(rig.clock.now())
    assert (done.uploaded, done.down) == (100, None)
    assert rig.store.archive_queue().length == 0
    bucket = bucket_of(rig)
    for attempt_id, (task_id, manifest_sha256) in sealed(rig).items():
        stored = bucket.get(attempt_key(task_id, attempt_id))
        assert stored is not None, attempt_id
        assert stored.metadata["manifest-sha256"] == manifest_sha256
    assert done.witnessed == rig.store.chain_head()  # the head went too, with the events up to it


@pytest.mark.asyncio
async def test_a_backlog_goes_in_bounded_rounds_and_the_head_is_witnessed_meanwhile(
    archive_rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentd.archive import upload

    monkeypatch.setattr(upload, "BATCH", 4)
    monkeypatch.setattr(upload, "ROUND_BATCHES", 2)
    rig = archive_rig
    archiver = Archiver(rig.config, rig.db, rig.clock)
    await archiver.start()
    await run_tasks(rig, 10)
    first = await archiver.step(rig.clock.now())
    assert (first.uploaded, first.more) == (8, True) and first.witnessed == rig.store.chain_head()
    second = await archiver.step(rig.clock.now())
    assert (second.uploaded, second.more) == (2, False) and rig.store.archive_queue().length == 0


@pytest.mark.asyncio
async def test_an_agent_without_archive_queues_nothing_and_enabling_queues_what_is_on_disk(rig: Rig) -> None:
    await run_tasks(rig, 3)
    assert rig.store.archive_queue().length == 0  # no [archive]: the trigger is off
    assert rig.store.set_archiving(True) == 3  # what enabling finds sealed on disk
    await run_tasks(rig, 2)
    assert rig.store.archive_queue().length == 5
    assert rig.store.set_archiving(False) == 0 and rig.store.archive_queue().length == 0


@pytest.mark.asyncio
async def test_a_sensor_service_without_archive_turns_archiving_off(rig: Rig) -> None:
    """[archive] removed from the config: the next sensor service start stops the queue growing (and retention may
    take the folders again), so an archive given up never fills the disk."""
    from agentd.archive.upload import archive_beside

    rig.store.set_archiving(True)
    await run_tasks(rig, 2)
    await archive_beside(rig.config, rig.db, rig.clock)  # the rig's config has no [archive]
    queue = rig.store.archive_queue()
    assert (queue.enabled, queue.length) == (False, 0)
    await run_tasks(rig, 1)
    assert rig.store.archive_queue().length == 0


@pytest.mark.asyncio
async def test_retention_never_prunes_a_folder_still_waiting_for_the_bucket(rig: Rig) -> None:
    from agentd.evidence.retention import Cutoffs, apply_retention

    rig.store.set_archiving(True)
    await run_tasks(rig, 2)
    now = rig.clock.advance(200 * 86_400)  # past [retention] evidence_days
    assert apply_retention(rig.store, rig.config, Cutoffs.configured(rig.config.retention, now), now).evidence_dirs == 0
    assert all(a.evidence_pruned_at is None for a in rig.store.all_attempts())
    rig.store.folders_archived(list(sealed(rig)))  # in the bucket now: retention may remove them
    assert apply_retention(rig.store, rig.config, Cutoffs.configured(rig.config.retention, now), now).evidence_dirs == 2


@pytest.mark.asyncio
@pytest.mark.timeout(120)
async def test_a_bucket_stopped_for_60_s_loses_nothing(rig_factory: Callable[..., Rig], tmp_path: Path) -> None:
    server = start_s3()  # its own: it is stopped (SIGSTOP) for the test's minute
    try:
        rig = rig_factory(
            archived(
                server.bucket("stopped"),
                server.url,
                credentials_file(tmp_path / "s3.env"),
                timeout_s=0.5,
                concurrency=1,
            )
        )
        archiver = Archiver(rig.config, rig.db, rig.clock)
        await archiver.start()
        await run_tasks(rig, 20)
        server.pause()
        tried = []
        for _ in range(6):  # 60 s of injected time, a round every 10 s (each try waits out a timeout)
            done = await archiver.step(rig.clock.now())
            assert done.uploaded == 0
            tried.append(archiver.retry_at)
            rig.clock.advance(10)
        assert archiver.down is not None and len(set(tried)) == 5  # backing off: one round of six waited
        assert rig.store.archive_queue().length == 20
        restarted = Archiver(rig.config, rig.db, rig.clock)  # a service restart meanwhile: the queue is the database's
        server.resume()
        done = await restarted.step(rig.clock.now())
        assert done.uploaded == 20 and rig.store.archive_queue().length == 0
        bucket = bucket_of(rig)
        assert all(bucket.get(attempt_key(t, a)) is not None for a, (t, _) in sealed(rig).items())
    finally:
        server.stop()


def test_the_backoff_doubles_up_to_its_ceiling() -> None:
    assert [backoff_s(n) for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 16.0]
    assert backoff_s(50) == 300.0


@pytest.mark.asyncio
async def test_a_locked_object_cannot_be_deleted_with_the_agents_credentials(archive_rig: Rig) -> None:
    rig = archive_rig
    archiver = Archiver(rig.config, rig.db, rig.clock)
    await archiver.start()
    await run_tasks(rig, 1)
    await archiver.step(rig.clock.now())
    [(attempt_id, (task_id, _))] = sealed(rig).items()
    key = attempt_key(task_id, attempt_id)
    bucket = bucket_of(rig)
    [version] = bucket.versions(key)
    with pytest.raises(ArchiveUnavailable, match="AccessDenied"):
        bucket.delete(key, version)
    bucket.delete(key)  # without a version: a delete marker on top, the locked version kept
    assert bucket.versions(key) == [version]


@pytest.mark.asyncio
async def test_an_auditor_verifies_the_chain_and_every_folder_from_the_bucket_alone(
    archive_rig: Rig, tmp_path: Path
) -> None:
    rig = archive_rig
    archiver = Archiver(rig.config, rig.db, rig.clock)
    await archiver.start()
    await run_tasks(rig, 5)
    done = await archiver.step(rig.clock.now())
    assert done.uploaded == 5 and done.witnessed is not None
    audit = [
        sys.executable,
        "-m",
        "agentd",
        "evidence",
        "verify",
        "--archive",
        f"s3://{rig.config.archive.bucket}/",
        "--agent",
        rig.config.agent.agent_id,
        "--endpoint-url",
        rig.config.archive.endpoint_url or "",
        "--credentials-file",
        str(rig.config.archive.credentials_file),
    ]
    elsewhere = tmp_path / "auditor"  # no config, no state dir: only the bucket
    elsewhere.mkdir()
    clean = subprocess.run(audit, cwd=elsewhere, capture_output=True, text=True, timeout=60)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "clean:" in clean.stdout and "5 attempts checked from the archive" in clean.stdout
    # a folder rewritten in the bucket (a new version over the locked one): named, the exit non-zero
    [(attempt_id, (task_id, _)), *_] = sealed(rig).items()
    key = attempt_key(task_id, attempt_id)
    bucket = bucket_of(rig)
    stored = bucket.get(key)
    assert stored is not None
    bucket.put(key, stored.body.replace(b"stdout", b"stdOUT", 1), stored.metadata)
    forged = subprocess.run([*audit, "--json"], cwd=elsewhere, capture_output=True, text=True, timeout=60)
    assert forged.returncode == 1
    findings = json.loads(forged.stdout)["findings"]
    assert any(key in f["where"] for f in findings), findings


@pytest.mark.asyncio
async def test_a_rolled_back_state_dir_is_reported_naming_the_first_missing_event(
    archive_rig: Rig, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rig = archive_rig
    archiver = Archiver(rig.config, rig.db, rig.clock)
    await archiver.start()
    await run_tasks(rig, 3)
    await archiver.step(rig.clock.now())
    state = rig.config.paths.state_dir
    rig.close()
    copy = tmp_path / "copy"
    shutil.copytree(state, copy, symlinks=True)
    rig = Rig(rig.config, rig.clock)
    archiver = Archiver(rig.config, rig.db, rig.clock)
    kept = rig.store.chain_head()
    assert kept is not None
    for _ in range(5):  # 50 more tasks, heads witnessed as they go
        await run_tasks(rig, 10)
        rig.clock.advance(rig.config.archive.head_interval_s)
        assert (await archiver.step(rig.clock.now())).witnessed == rig.store.chain_head()
    rig.close()
    shutil.rmtree(state)
    shutil.copytree(copy, state, symlinks=True)  # the copy put back: its chain and its head file agree
    plain = cli(capsys, rig, "evidence", "verify")
    assert plain.code == 0 and "witness  not compared with a witnessed head" in plain.out
    against = cli(capsys, rig, "evidence", "verify", "--against")
    assert against.code == 1, against.out + against.err
    first_missing = kept[0] + 1
    assert f"event {first_missing}: rollback: the local chain ends at event {kept[0]}" in against.out
    shown = cli(capsys, rig, "evidence", "verify", "--against", "--json")
    assert shown.code == 1 and json.loads(shown.out)["witnessed"]["rollback"] is True
    section = rig.config.archive  # the same archive named by its URL, as another operator would
    by_url = cli(
        capsys,
        rig,
        "evidence",
        "verify",
        "--against",
        f"s3://{section.bucket}/",
        "--endpoint-url",
        section.endpoint_url or "",
        "--credentials-file",
        str(section.credentials_file),
    )
    assert by_url.code == 1 and f"event {first_missing}: rollback:" in by_url.out


def test_against_an_archive_with_no_head_yet_says_so(archive_rig: Rig, capsys: pytest.CaptureFixture[str]) -> None:
    against = cli(capsys, archive_rig, "evidence", "verify", "--against")
    assert against.code == 0 and "witness  nothing witnessed yet to compare with" in against.out


@pytest.mark.asyncio
async def test_status_shows_the_queue_length_and_the_oldest_age(
    archive_rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    rig = archive_rig
    archiver = Archiver(rig.config, rig.db, rig.clock)
    await archiver.start()
    await run_tasks(rig, 3)
    rig.clock.advance(90)
    for args in (("status", "--json"), ("status",)):  # the fast path and the full one read the same rows
        shown = cli(capsys, rig, *args)
        assert shown.code == 0, shown.err
    status = json.loads(cli(capsys, rig, "status", "--json").out)
    assert status["archive"]["queued"] == 3 and status["archive"]["enabled"] is True
    assert status["archive"]["oldest_age_s"] >= 90  # fake time: the CLI reads the wall clock, later still
    assert "archive  3 sealed attempt folder(s) not yet in the bucket" in cli(capsys, rig, "status").out
    await archiver.step(rig.clock.now())
    assert json.loads(cli(capsys, rig, "status", "--json").out)["archive"]["queued"] == 0


async def rolled_back(rig: Rig, tmp_path: Path, before: int, after: int) -> tuple[Rig, tuple[int, str]]:
    """`before` tasks archived and witnessed; the state dir copied; `after` more, heads witnessed as they go (a
    round per 10 tasks); then the copy put back. The rig on the copy, and the head the copy ends at."""
    archiver = Archiver(rig.config, rig.db, rig.clock)
    await archiver.start()
    await run_tasks(rig, before)
    await archiver.step(rig.clock.now())
    state = rig.config.paths.state_dir
    rig.close()
    shutil.copytree(state, tmp_path / "copy", symlinks=True)
    rig = Rig(rig.config, rig.clock)
    archiver = Archiver(rig.config, rig.db, rig.clock)
    for _ in range(after // 10):
        await run_tasks(rig, 10)
        rig.clock.advance(rig.config.archive.head_interval_s)
        assert (await archiver.step(rig.clock.now())).witnessed == rig.store.chain_head()
    rig.close()
    shutil.rmtree(state)
    shutil.copytree(tmp_path / "copy", state, symlinks=True)
    back = Rig(rig.config, rig.clock)
    kept = back.store.chain_head()
    assert kept is not None
    return back, kept


@pytest.mark.asyncio
async def test_a_chain_forking_from_the_witnessed_one_names_the_first_different_event(
    archive_rig: Rig, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rig, kept = await rolled_back(archive_rig, tmp_path, 2, 10)
    rig.clock.advance(3600)  # other work on the copy: a chain as long as the witnessed one, and longer
    await run_tasks(rig, 15)
    against = cli(capsys, rig, "evidence", "verify", "--against")
    assert against.code == 1
    assert f"event {kept[0] + 1}: rollback: event {kept[0] + 1} (" in against.out  # its type, task and id
    assert "the local chain forks from the head witnessed at event" in against.out
