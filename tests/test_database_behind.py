"""A database older than what happened (issue 23, finding 7): a restored backup, or a -wal lost after a
crash. At start the services find the evidence — attempt folders no attempt row names, a chain head
behind (or other than) the last one agentd published outside the database — and refuse to act, with
one line naming what they found and the command that resolves it (`agentd evidence accept-rollback`).
After the operator accepts, the work runs again, and every message it re-sends carries the key its
receiver already saw: keys derive from the task and the attempt's number, which the restore kept.

The in-process tests restore a backup of the rig's database; the process test SIGKILLs a real
dispatcher and deletes the -wal it left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest
from rig import Rig
from support import CliResult, agent_config, ok, wait_until

from agentd.cli import main
from agentd.clock import FakeClock, SystemClock
from agentd.config import Config
from agentd.errors import DatabaseBehind
from agentd.evidence.rollback import find_rollback, published_head, refuse_if_behind
from agentd.outlook.metrics import NullMetrics
from agentd.records import TaskIntent
from agentd.services.shell import Shell
from agentd.store import Store, init_state_dir, migrate, open_store
from agentd.work.intake import admit_task
from agentd.work.validation import load_config


def spooling(spool: Path) -> Callable[[dict[str, Any]], None]:
    def mutate(raw: dict[str, Any]) -> None:
        raw["message_handlers"] = [{"handler_id": "spool", "kind": "spool", "path": str(spool)}]
        raw["dispatch"]["default_message_handler"] = "spool"
        for profile in raw["profiles"]:
            profile["result_policy"]["allow_external_messages"] = True

    return mutate


def saying(n: int, task: str) -> dict[str, Any]:
    return {"outcome": ok(external_messages=[{"text": f"{task} message {i}"} for i in range(n)])}


def backup(db: Path, to: Path) -> None:
    """A consistent copy of a live database (what a backup tool takes)."""
    with closing(sqlite3.connect(db)) as source, closing(sqlite3.connect(to)) as target:
        source.backup(target)


def restore(rig: Rig, copy: Path) -> Rig:
    """Put an older copy of the database back (the rig's connections are closed first, as a restore
    would find the services stopped) and open the agent again on it."""
    rig.close()
    db = rig.config.db_path
    for stale in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        stale.unlink(missing_ok=True)
    shutil.copyfile(copy, db)
    return Rig(rig.config, rig.clock)


def agentd(capsys: pytest.CaptureFixture[str], config: Path, *args: str) -> CliResult:
    capsys.readouterr()
    code = main(["--config", str(config), *args])
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def spooled(spool: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in spool.read_text().splitlines()] if spool.exists() else []


async def drain(rig: Rig) -> None:
    """Run what is claimable and deliver what it asked to send, then stop."""
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.run_until_idle()
    await dispatcher.outbox.deliveries.deliver_due(rig.clock.now())
    await dispatcher.stop()


@pytest.mark.asyncio
async def test_a_restored_backup_is_refused_then_accepted_and_resends_under_the_same_keys(
    rig_factory: Callable[..., Rig], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spool = tmp_path / "spool.jsonl"
    rig = rig_factory(spooling(spool))
    tasks = [rig.add("scripted", subject=f"t{n}", payload=saying(2, f"t{n}")).task_id for n in range(3)]
    older = tmp_path / "before.db"
    backup(rig.config.db_path, older)  # taken while the tasks still waited
    await drain(rig)
    sent = spooled(spool)
    assert len(sent) == 6
    keys = sorted(line["idempotency_key"] for line in sent)
    folders = sorted((rig.config.paths.state_dir / "attempts").glob("*/*"))
    assert len(folders) == 3

    rig = restore(rig, older)
    try:
        dispatcher = rig.dispatcher()
        with pytest.raises(DatabaseBehind) as refused:
            await dispatcher.start()
        line = str(refused.value)
        assert "\n" not in line and "3 attempt folder(s) no attempt in it names" in line
        assert "agentd evidence accept-rollback" in line
        assert [t.status for t in rig.store.list_tasks()] == ["pending"] * 3  # nothing was dispatched
        assert spooled(spool) == sent
        started = [e for e in rig.events() if e.type in ("dispatch_started", "task_claimed")]
        assert started == [], "a refused start writes nothing"

        cli = agentd(capsys, rig.config.path, "evidence", "accept-rollback", "--reason", "restored last night's backup")
        assert cli.code == 0, cli.err
        assert "3 attempt folder(s)" in cli.out
        [accepted] = [e for e in rig.events() if e.type == "rollback_accepted"]
        assert accepted.payload["reason"] == "restored last night's backup" and accepted.payload["folders"] == 3
        assert not list((rig.config.paths.state_dir / "attempts").glob("*/*"))  # moved aside, kept
        kept = rig.config.paths.state_dir / accepted.payload["moved_to"]
        assert sorted(p.name for p in kept.glob("*/*")) == sorted(p.name for p in folders)

        await drain(rig)  # the work runs again; its messages go out again, under the keys already seen
        assert sorted(t.status for t in rig.store.list_tasks()) == ["completed"] * 3
        again = [e["key"] for t in tasks for e in rig.store.outbox_of(t) if e["kind"] == "external_message"]
        assert sorted(again) == keys
        resent = spooled(spool)[len(sent) :]
        assert sorted(line["idempotency_key"] for line in resent) == keys, "a receiver sees each as a duplicate"
        assert agentd(capsys, rig.config.path, "evidence", "verify").code == 0
    finally:
        rig.close()


@pytest.mark.asyncio
async def test_a_chain_behind_or_other_than_the_published_head_is_refused(
    rig: Rig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    older = tmp_path / "before.db"
    backup(rig.config.db_path, older)
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.stop()  # no attempt ran: only the head published at the stop can tell
    head = rig.store.chain_head()
    assert head is not None
    assert (rig.config.paths.state_dir / "chain_head").read_text() == f"{head[0]}:{head[1]}\n"

    rig = restore(rig, older)
    try:
        with pytest.raises(DatabaseBehind, match=f"ends at event [0-9]+ where agentd published {head[0]}:"):
            await rig.dispatcher().start()
        # written since the restore: the chain reaches the published sequence again, with other events
        for n in range(head[0]):
            assert agentd(capsys, rig.config.path, "task", "add", "--type", "example", "--subject", f"s{n}").code == 0
        with pytest.raises(DatabaseBehind, match=f"event {head[0]} is not the one agentd published"):
            await rig.dispatcher().start()
        with pytest.raises(DatabaseBehind):  # the sensor service acts too: it refuses the same way
            await rig.service.run()
        assert agentd(capsys, rig.config.path, "evidence", "accept-rollback", "--reason", "checked").code == 0
        dispatcher = rig.dispatcher()
        await dispatcher.start()  # accepted: the published head is this database's now
        await dispatcher.stop()
        nothing = agentd(capsys, rig.config.path, "evidence", "accept-rollback", "--reason", "again")
        assert nothing.code == 0 and "nothing to accept" in nothing.out
    finally:
        rig.close()


# --- a real dispatcher, killed, its -wal deleted -----------------------------------------------------


def run(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentd", "--config", str(config), *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.deep
@pytest.mark.process
def test_a_wal_lost_after_a_crash_is_refused_and_the_resend_carries_the_same_keys(tmp_path: Path) -> None:
    spool = tmp_path / "spool.jsonl"
    config_path = agent_config(tmp_path, spooling(spool))
    config: Config = load_config(config_path)
    init_state_dir(config.paths.state_dir, config.paths.workspace)
    migrate(config.db_path, SystemClock())
    store = open_store(config.db_path, SystemClock())
    for n in range(3):
        intent = TaskIntent(task_type="scripted", source="test", subject=f"t{n}", payload=saying(2, f"t{n}"))
        store.enqueue_task(admit_task(intent, config, SystemClock().now(), trusted=True), SystemClock().now())
    store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the tasks are in the main file now
    store.close()

    dispatcher = subprocess.Popen([sys.executable, "-m", "agentd", "--config", str(config_path), "dispatch"])
    try:
        wait_until(lambda: len(spooled(spool)) == 6, 60, "six messages in the spool")
    finally:
        dispatcher.send_signal(signal.SIGKILL)  # a crash: what it committed is still only in the -wal
        dispatcher.wait(timeout=10)
    sent = spooled(spool)
    db = config.db_path
    os.unlink(db.with_name(db.name + "-wal"))
    db.with_name(db.name + "-shm").unlink(missing_ok=True)
    folders = sorted((config.paths.state_dir / "attempts").glob("*/*"))

    refused = run(config_path, "dispatch")
    assert refused.returncode == 2, refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.startswith("agentd:")]
    assert len(lines) == 1 and "older than what happened" in lines[0] and "accept-rollback" in lines[0], refused.stderr
    assert "Traceback" not in refused.stderr
    assert sorted((config.paths.state_dir / "attempts").glob("*/*")) == folders  # nothing claimed
    assert spooled(spool) == sent

    accepted = run(config_path, "evidence", "accept-rollback", "--reason", "lost the -wal in a crash")
    assert accepted.returncode == 0, accepted.stderr
    again = subprocess.Popen([sys.executable, "-m", "agentd", "--config", str(config_path), "dispatch"])
    try:
        reader = open_store(config.db_path, FakeClock(), readonly=True)
        try:
            wait_until(
                lambda: (
                    reader._conn.execute("SELECT count(*) FROM events WHERE type = 'message_delivered'").fetchone()[0]
                    == 6
                ),
                60,
                "the six messages delivered again",
            )
        finally:
            reader.close()
    finally:
        again.send_signal(signal.SIGTERM)
        assert again.wait(timeout=30) == 0
    resent = spooled(spool)[len(sent) :]
    keys = sorted(line["idempotency_key"] for line in sent)
    assert sorted(line["idempotency_key"] for line in resent) == keys, "re-sent under the keys already seen"


@pytest.mark.process
def test_agentd_run_refuses_once_for_both_services(tmp_path: Path) -> None:
    """`agentd run` starts both services; both find the same thing and it is said in one line."""
    config_path = agent_config(tmp_path)
    assert run(config_path, "init").returncode == 0
    state = load_config(config_path).paths.state_dir
    (state / "chain_head").write_text("999:" + "a" * 64 + "\n")  # published by a database this one is behind
    refused = run(config_path, "run")
    lines = [line for line in refused.stderr.splitlines() if line.startswith("agentd:")]
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr
    assert "ends at event" in lines[0] and "where agentd published 999:" in lines[0]


@pytest.mark.parametrize("name", ["\u00b2", "\u0661", "1_0", "notes"])
def test_a_folder_in_attempts_not_named_by_a_task_id_is_not_a_rollback(rig: Rig, name: str) -> None:
    """What the services check before they act: a stray folder "²" (a digit to str.isdigit(), not to
    int()) stopped every service start with a ValueError traceback. Only a task id's folder says
    anything about the database; a folder named like none is `agentd evidence verify`'s to name."""
    (rig.config.paths.state_dir / "attempts" / name / "01ARZ3NDEKTSV4RRFFQ69G5FAV").mkdir(parents=True)
    assert not find_rollback(rig.store, rig.config.paths.state_dir)
    refuse_if_behind(rig.store, rig.config.paths.state_dir)


# --- the head published off the attempts' path (issue #43) ------------------------------------------


async def published_soon(state_dir: Path, head: tuple[int, str], store: Store) -> None:
    """Until `head` is the published one (a hard deadline), checking at each look that the file never
    names a head the database has not committed."""
    with anyio.fail_after(10):
        while (published := published_head(state_dir)) != head:
            committed = store.chain_head()
            assert published is None or (committed is not None and published[0] <= committed[0]), published
            await anyio.sleep(0.02)


@pytest.mark.asyncio
async def test_the_chain_head_file_is_written_off_the_attempts_path_and_never_ahead(rig: Rig) -> None:
    """While a service serves, `reported` only hands the head over: the file is written by a task of
    its own (at once after a quiet spell, at most once a second while busy), so an attempt's end
    waits for no fsync of it; it lags the database, never leads it, and the stop writes the last."""
    state_dir = rig.config.paths.state_dir
    shell = Shell("dispatch", rig.db, rig.clock, NullMetrics(), "", state_dir=state_dir)

    async def line() -> str:
        return "idle"

    try:
        async with anyio.create_task_group() as group:
            await shell.serve(group, line)
            started = rig.store.chain_head()  # the row written before READY found it: the writer's first
            assert started is not None
            await published_soon(state_dir, started, rig.store)
            for n in range(3):
                before = published_head(state_dir)
                head = await rig.db.call(shell.row(f"busy {n}"))
                assert head is not None
                shell.reported(head)
                assert published_head(state_dir) == before  # handed over, not written on this path
                await published_soon(state_dir, head, rig.store)
            last = await rig.db.call(shell.row("last"))
            shell.reported(last)
            group.cancel_scope.cancel()
        await shell.stopped()
        assert published_head(state_dir) == rig.store.chain_head()
    finally:
        rig.close()
