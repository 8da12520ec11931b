"""`agentd backup` and `agentd restore` (docs/backup-and-archive.md): a consistent snapshot, published whole by its
manifest, incremental for evidence; a restore that checks every hash before it writes and refuses a running agent."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sqlite3
import tarfile
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from support import CliResult, agent_config, ok, run_main, tree

from agentd.backup.manifest import MANIFEST_PREFIX
from agentd.evidence.verify import verify
from agentd.store import migrate, open_store
from agentd.store.migrations import available_migrations


async def finished(rig: Rig, count: int) -> list[int]:
    ids = [rig.add("scripted", payload={"outcome": ok(), "stdout": f"task {n}"}).task_id for n in range(count)]
    await rig.drain()
    return ids


def fresh_agent(directory: Path) -> Path:
    """The same agent's TOML on a fresh machine: another folder, its state dir empty."""
    directory.mkdir()
    return agent_config(directory)


def cli(capsys: pytest.CaptureFixture[str], config: Path, *args: str) -> CliResult:
    return run_main(capsys, config, *args)


def published(dest: Path) -> list[Path]:
    return sorted(dest.glob(f"{MANIFEST_PREFIX}*.json"))


@pytest.mark.asyncio
async def test_a_backup_restored_onto_a_fresh_state_dir_is_the_agent_as_it_was(
    rig: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await finished(rig, 3)
    dest = tmp_path / "backups"
    taken = cli(capsys, rig.config.path, "backup", str(dest), "--json")
    assert taken.code == 0, taken.err
    report = taken.json()
    assert report["sealed_copied"] == 3 and report["sealed_reused"] == 0
    assert [p.name for p in published(dest)] == [f"{MANIFEST_PREFIX}{report['backup_id']}.json"]
    events = [(e.sequence, e.type) for e in rig.store.read_events()]

    fresh = fresh_agent(tmp_path / "elsewhere")
    restored = cli(capsys, fresh, "restore", str(dest), "--json")
    assert restored.code == 0, restored.err
    assert restored.json()["verify"] == {"ok": True, "findings": []}
    state = tmp_path / "elsewhere" / "state"
    store = open_store(state / "agentd.db", rig.clock, readonly=True)
    try:
        assert [(e.sequence, e.type) for e in store.read_events()] == events
        assert verify(store, state).findings == []
        assert all(a.evidence_dir.startswith(str(state)) for a in store.all_attempts() if a.evidence_dir)
    finally:
        store.close()
    assert (state / "chain_head").read_text().strip() == f"{events[-1][0]}:{rig.store.chain_head()[1]}"  # type: ignore[index]


@pytest.mark.asyncio
async def test_a_second_backup_into_a_folder_copies_only_new_evidence(
    rig: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await finished(rig, 2)
    dest = tmp_path / "backups"
    assert cli(capsys, rig.config.path, "backup", str(dest)).code == 0
    await finished(rig, 1)
    second = cli(capsys, rig.config.path, "backup", str(dest), "--json").json()
    assert (second["sealed_copied"], second["sealed_reused"]) == (1, 2)
    assert len(published(dest)) == 2


@pytest.mark.asyncio
async def test_an_archive_file_dest_is_one_tar_restore_takes(
    rig: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await finished(rig, 2)
    dest = tmp_path / "agent.tar.gz"
    assert cli(capsys, rig.config.path, "backup", str(dest)).code == 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no partial left
    fresh = fresh_agent(tmp_path / "elsewhere")
    restored = cli(capsys, fresh, "restore", str(dest))
    assert restored.code == 0, restored.err
    assert "verify   clean" in restored.out


@pytest.mark.asyncio
async def test_a_tampered_backup_is_refused_and_nothing_is_written(
    rig: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await finished(rig, 2)
    dest = tmp_path / "backups"
    assert cli(capsys, rig.config.path, "backup", str(dest)).code == 0
    stdout = next(dest.glob("evidence/*/*/stdout.log"))
    stdout.chmod(0o600)
    stdout.write_text("not what the attempt printed\n")
    fresh = fresh_agent(tmp_path / "elsewhere")
    state = tmp_path / "elsewhere" / "state"
    before = tree(tmp_path / "elsewhere")
    refused = cli(capsys, fresh, "restore", str(dest))
    assert refused.code == 2
    assert "does not match its manifest, nothing restored" in refused.err and "stdout.log" in refused.err
    assert len(refused.err.strip().splitlines()) == 1
    assert tree(tmp_path / "elsewhere") == before
    assert not (state / "agentd.db").exists()


@pytest.mark.asyncio
async def test_a_tampered_database_is_refused(rig: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    await finished(rig, 1)
    dest = tmp_path / "backups"
    assert cli(capsys, rig.config.path, "backup", str(dest)).code == 0
    database = next(dest.glob("snapshots/*/agentd.db"))
    database.chmod(0o600)
    with database.open("r+b") as handle:
        handle.seek(200)
        handle.write(b"\x01")
    refused = cli(capsys, fresh_agent(tmp_path / "elsewhere"), "restore", str(dest))
    assert refused.code == 2 and "agentd.db: sha256" in refused.err


def test_a_folder_with_no_published_manifest_is_no_backup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "backups"
    (dest / "snapshots" / "20261122T100000Z-ABCDEFGHIJ").mkdir(parents=True)
    refused = cli(capsys, fresh_agent(tmp_path / "elsewhere"), "restore", str(dest))
    assert refused.code == 2 and "no published backup" in refused.err


@pytest.mark.asyncio
async def test_a_restore_onto_another_agent_says_so_and_needs_yes(
    rig: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await finished(rig, 1)
    dest = tmp_path / "backups"
    assert cli(capsys, rig.config.path, "backup", str(dest)).code == 0
    (tmp_path / "other").mkdir()

    def rename(raw: dict[str, Any]) -> None:
        raw["agent"]["agent_id"] = "another-agent"

    other = agent_config(tmp_path / "other", rename)
    asked = cli(capsys, other, "restore", str(dest))
    assert asked.code == 2 and "become agent 'another-agent'" in asked.err and "--yes" in asked.err
    assert not (tmp_path / "other" / "state" / "agentd.db").exists()
    done = cli(capsys, other, "restore", str(dest), "--yes", "--json")
    assert done.code == 0, done.err
    assert any("another-agent" in note for note in done.json()["notes"])


@pytest.mark.asyncio
async def test_restore_refuses_while_the_agents_dispatcher_runs(
    rig: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await finished(rig, 1)
    dest = tmp_path / "backups"
    assert cli(capsys, rig.config.path, "backup", str(dest)).code == 0
    dispatcher = rig.dispatcher()
    await dispatcher.start()  # holds the dispatch lock, as a live process on this host
    try:
        before = tree(rig.config.paths.state_dir / "attempts")
        refused = cli(capsys, rig.config.path, "restore", str(dest))
    finally:
        await dispatcher.stop()
    assert refused.code == 2 and "a service of this agent runs" in refused.err
    assert tree(rig.config.paths.state_dir / "attempts") == before


@pytest.mark.asyncio
async def test_restore_onto_the_stopped_agent_keeps_what_it_replaces(
    rig: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await finished(rig, 1)
    dest = tmp_path / "backups"
    assert cli(capsys, rig.config.path, "backup", str(dest)).code == 0
    await finished(rig, 1)  # work after the backup: the restore takes the agent back to before it
    rig.close()
    restored = cli(capsys, rig.config.path, "restore", str(dest), "--json")
    assert restored.code == 0, restored.err
    aside = Path(restored.json()["set_aside"])
    assert (aside / "agentd.db").is_file() and len(list((aside / "attempts").glob("*/*"))) == 2
    assert len(list((rig.config.paths.state_dir / "attempts").glob("*/*"))) == 1


def test_backup_into_the_state_dir_is_refused(rig: Rig, capsys: pytest.CaptureFixture[str]) -> None:
    refused = cli(capsys, rig.config.path, "backup", str(rig.config.paths.state_dir / "b"))
    assert refused.code == 2 and "inside the state dir" in refused.err


@pytest.mark.asyncio
async def test_an_archive_member_naming_a_path_outside_is_refused_and_nothing_is_written(
    rig: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await finished(rig, 1)
    dest = tmp_path / "agent.tar"
    assert cli(capsys, rig.config.path, "backup", str(dest)).code == 0
    with tarfile.open(dest, "a") as archive:
        data = b"planted"
        info = tarfile.TarInfo("../../planted")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    fresh = fresh_agent(tmp_path / "elsewhere")
    refused = cli(capsys, fresh, "restore", str(dest))
    assert refused.code == 2 and "archive member" in refused.err
    assert not list(tmp_path.rglob("planted")) and not (tmp_path / "elsewhere" / "state" / "agentd.db").exists()


@pytest.mark.asyncio
async def test_an_archive_a_kill_left_unrenamed_is_refused(
    rig: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await finished(rig, 1)
    dest = tmp_path / "agent.tar"
    assert cli(capsys, rig.config.path, "backup", str(dest)).code == 0
    left = dest.rename(tmp_path / ".agent.tar.partial-20261122T100000Z-ABCDEFGHIJ.tar")  # whole, but never published
    refused = cli(capsys, fresh_agent(tmp_path / "elsewhere"), "restore", str(left))
    assert refused.code == 2 and "never published" in refused.err


def test_a_backup_of_an_older_schema_says_it_will_migrate_and_needs_yes(
    rig: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A backup an older agentd made: its database one migration behind this agentd's (made so here: a database
    migrated to all but the last migration, put in a backup's place with its manifest written to match)."""
    dest = tmp_path / "backups"
    assert cli(capsys, rig.config.path, "backup", str(dest)).code == 0
    [manifest_path] = published(dest)
    body = json.loads(manifest_path.read_text())
    older = tmp_path / "older.db"
    behind = available_migrations()[:-1]
    migrate(older, rig.clock, behind)
    with sqlite3.connect(older) as conn:
        sequence, last_hash = conn.execute(
            "SELECT sequence, hash FROM events ORDER BY sequence DESC LIMIT 1"
        ).fetchone()
    database = dest / body["database"]["path"]
    database.chmod(0o600)
    shutil.copyfile(older, database)
    data = database.read_bytes()
    body.update(
        schema_version=behind[-1].version,
        chain_head={"sequence": sequence, "hash": last_hash},
        database={**body["database"], "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)},
        sealed=[],
        files=[],
    )
    manifest_path.chmod(0o600)
    manifest_path.write_text(json.dumps(body))
    fresh = fresh_agent(tmp_path / "elsewhere")
    asked = cli(capsys, fresh, "restore", str(dest))
    assert asked.code == 2 and f"is migrated to {behind[-1].version + 1}" in asked.err and "--yes" in asked.err
    assert not (tmp_path / "elsewhere" / "state" / "agentd.db").exists()
    done = cli(capsys, fresh, "restore", str(dest), "--yes", "--json")
    assert done.code == 0, done.err
    store = open_store(tmp_path / "elsewhere" / "state" / "agentd.db", rig.clock, readonly=True)
    try:
        assert store.schema_version == behind[-1].version + 1
    finally:
        store.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the state dir away")
def test_root_restoring_over_a_services_users_state_dir_is_told_to_run_as_it(
    rig: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "backups"
    assert cli(capsys, rig.config.path, "backup", str(dest)).code == 0
    fresh = fresh_agent(tmp_path / "elsewhere")
    state = tmp_path / "elsewhere" / "state"
    state.mkdir()
    os.chown(state, 65534, 65534)
    refused = cli(capsys, fresh, "restore", str(dest))
    assert refused.code == 2 and "run it as the state dir's owner: sudo -u" in refused.err
    assert list(state.iterdir()) == []
