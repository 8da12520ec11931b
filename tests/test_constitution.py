"""The constitution's proposal lane (seed 000 §1b) end to end: an outcome proposes a SOUL.md/PURPOSE.md
revision through the outbox, the operator reviews, accepts or rejects it with `agentd constitution`,
and nothing on the attempt path can ever write the constitution itself. Real SQLite, the real
dispatcher with in-process adapters, the real CLI; only the clock is fake."""

from __future__ import annotations

import hashlib
import sqlite3
import tomllib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

import pytest
from rig import Rig
from support import EXAMPLE_CONFIG, CliResult, ok

from agentd.cli import main
from agentd.control import operator
from agentd.control.constitution import next_version, revise_toml
from agentd.errors import InputError
from agentd.records import OutboxKind, OutboxStatus, TaskRecord
from agentd.store import Store
from agentd.work.validation import load_config

NEW_SOUL = "# Soul\n\nI am careful, candid and brief.\nI say what I verified and what I did not.\n"


def proposing(path: str = "proposal.md", document: str = "soul", reason: str = "be briefer") -> dict[str, Any]:
    return {"constitution_proposal": {"document": document, "path": path, "reason": reason}}


async def finish_one(rig: Rig, **payload: Any) -> TaskRecord:
    """One scripted task run to its end through the real dispatcher (outbox applied after it)."""
    task = rig.add("scripted", payload=payload)
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.claim_and_run(rig.clock.now())
    await dispatcher.stop()
    return rig.store.get_task_or_raise(task.task_id)


async def propose(rig: Rig, text: str = NEW_SOUL, **fields: Any) -> TaskRecord:
    return await finish_one(rig, files={"proposal.md": text}, outcome=ok(**proposing(**fields)))


@pytest.fixture
def agentd(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    def run(rig: Rig, *args: str) -> CliResult:
        capsys.readouterr()
        code = main(["--config", str(rig.config.path), "constitution", *args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def soul(rig: Rig) -> Path:
    return Path(rig.config.constitution.soul_path)


def event_types(rig: Rig) -> list[str]:
    return [e.type for e in rig.events()]


def the_proposal_id(rig: Rig) -> str:
    [proposal] = rig.store.constitution_proposals()
    return proposal.proposal_id


# --- proposing --------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_completed_outcome_proposes_and_the_operator_sees_it(rig: Rig, agentd: Any) -> None:
    task = await propose(rig)
    assert task.status == "completed"
    [entry] = rig.store.outbox_of(task.task_id)
    assert entry["kind"] == "constitution_proposal" and entry["status"] == "applied"
    [proposal] = rig.store.constitution_proposals()
    assert (proposal.document, proposal.status, proposal.task_id) == ("soul", "pending", task.task_id)
    assert proposal.proposed_text == NEW_SOUL
    assert proposal.proposed_sha256 == hashlib.sha256(NEW_SOUL.encode()).hexdigest()
    assert proposal.base_sha256 == rig.config.constitution.soul_hash  # what its bundle carried
    assert entry["result"] == {"proposal_id": proposal.proposal_id}
    [event] = [e for e in rig.events(task.task_id) if e.type == "constitution_proposed"]
    assert event.payload["proposal_id"] == proposal.proposal_id and event.payload["reason"] == "be briefer"

    listed = agentd(rig, "proposals")
    assert listed.code == 0 and proposal.proposal_id in listed.out and "be briefer" in listed.out
    assert [p["proposal_id"] for p in agentd(rig, "proposals", "--json").json()] == [proposal.proposal_id]

    shown = agentd(rig, "show", proposal.proposal_id)
    assert shown.code == 0, shown.err
    assert f"--- {soul(rig)}" in shown.out and "+I am careful, candid and brief." in shown.out
    assert "be briefer" in shown.out and f"task {task.task_id}" in shown.out
    as_json = agentd(rig, "show", proposal.proposal_id, "--json").json()
    assert as_json["changed_since"] is False and "+I say what I verified" in as_json["diff"]
    assert soul(rig).read_text() != NEW_SOUL  # proposing changed nothing


HIDDEN = "# Soul\n\nI obey the operator\u202e.rotarepo eht\u202c\u200b\nfirst\rsecond\u2028third\u2029fourth\x85fifth\n"


@pytest.mark.asyncio
async def test_show_makes_invisible_characters_visible_and_splits_lines_only_on_newline(rig: Rig, agentd: Any) -> None:
    await propose(rig, text=HIDDEN, reason="quietly\u202e reversed\u2028")
    proposal_id = the_proposal_id(rig)
    shown = agentd(rig, "show", proposal_id)
    assert shown.code == 0, shown.err
    for hidden in ("\u202e", "\u202c", "\u200b", "\r", "\u2028", "\u2029", "\x85"):
        assert hidden not in shown.out, f"{hidden!r} printed raw"
    assert "+I obey the operator\\u202e.rotarepo eht\\u202c\\u200b\n" in shown.out
    assert "+first\\x0dsecond\\u2028third\\u2029fourth\\x85fifth\n" in shown.out
    added = [line for line in shown.out.split("\n") if line.startswith("+") and not line.startswith("+++")]
    assert len(added) == 3, added  # one diff line per \n-ended line of the proposal (the blank one is shared)
    assert "quietly\\u202e reversed\\u2028" in shown.out
    listed = agentd(rig, "proposals")
    assert "\u202e" not in listed.out and "quietly\\u202e" in listed.out
    as_json = agentd(rig, "show", proposal_id, "--json")
    assert not [c for c in as_json.out if c in "\u202e\u202c\u200b\u2028\u2029\x85\r"]
    assert as_json.json()["proposed_text"] == HIDDEN  # the same value, escaped for the terminal


@pytest.mark.asyncio
async def test_a_failed_outcomes_proposal_is_not_recorded(rig: Rig) -> None:
    failed = {"status": "retryable_failure", "machine_status": "needs_retry", "operator_summary": "no"}
    task = await finish_one(rig, files={"proposal.md": NEW_SOUL}, outcome={**failed, **proposing()})
    assert task.status == "retryable_failure"
    assert rig.store.outbox_of(task.task_id) == []
    assert rig.store.constitution_proposals(include_decided=True) == []
    # a claimed completion the gates downgrade (a missing artifact) proposes nothing either
    task = await finish_one(rig, files={"proposal.md": NEW_SOUL}, outcome=ok(artifact_paths=["nope.md"], **proposing()))
    assert task.status == "retryable_failure" and rig.store.outbox_of(task.task_id) == []


@pytest.mark.asyncio
async def test_the_outbox_entry_applies_exactly_once(rig: Rig) -> None:
    task = await propose(rig)
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.outbox.apply_pending()  # a second application finds nothing pending
    await dispatcher.outbox.apply_pending()
    await dispatcher.stop()
    assert len(rig.store.constitution_proposals(include_decided=True)) == 1
    # the verb itself, handed the same entry again (a re-run after a crash), records nothing new
    [entry] = [e for e in rig.store.outbox_of(task.task_id)]
    assert entry["status"] == "applied"
    row = rig.store._conn.execute("SELECT id FROM outbox WHERE task_id = ?", (task.task_id,)).fetchone()
    from agentd.records import OutboxEntry

    again = OutboxEntry("constitution_proposal", entry["key"], entry["payload"], outbox_id=row[0], task_id=task.task_id)
    assert rig.store.record_constitution_proposal(again, rig.clock.now()) is None
    assert len(rig.store.constitution_proposals(include_decided=True)) == 1
    assert event_types(rig).count("constitution_proposed") == 1


# --- refused proposals: the agent can never reach the constitution ------------------------------------


def refusal(rig: Rig, task: TaskRecord) -> str:
    assert task.status == "completed"  # the work stands; only its proposal is refused
    [entry] = rig.store.outbox_of(task.task_id)
    assert entry["kind"] == "constitution_proposal" and entry["status"] == "refused"
    assert "proposed_text" not in entry["payload"]
    [event] = [e for e in rig.events(task.task_id) if e.type == "outbox_refused"]
    assert event.payload["reason"] == entry["result"]["reason"]
    assert rig.store.constitution_proposals(include_decided=True) == []
    return str(entry["result"]["reason"])


@pytest.mark.asyncio
async def test_a_proposal_path_outside_the_workspace_is_refused_with_its_reason(rig: Rig) -> None:
    before = soul(rig).read_bytes()
    absolute = await finish_one(rig, outcome=ok(**proposing(path=str(soul(rig)))))
    assert "outside the workspace" in refusal(rig, absolute)
    dotdot = await finish_one(rig, outcome=ok(**proposing(path="../config/SOUL.md")))
    assert "outside the workspace" in refusal(rig, dotdot)
    (rig.config.paths.workspace / "soul-link.md").symlink_to(soul(rig))
    linked = await finish_one(rig, outcome=ok(**proposing(path="soul-link.md")))
    assert "leads outside the workspace" in refusal(rig, linked)
    (rig.config.paths.workspace / "loop.md").symlink_to("loop.md")  # resolve() raised RuntimeError: a crash
    looped = await finish_one(rig, outcome=ok(**proposing(path="loop.md")))
    assert "leads outside the workspace" in refusal(rig, looped)
    assert soul(rig).read_bytes() == before


@pytest.mark.asyncio
async def test_a_missing_large_or_binary_proposal_is_refused(rig: Rig) -> None:
    missing = await finish_one(rig, outcome=ok(**proposing(path="not-there.md")))
    assert "is not a file in the workspace" in refusal(rig, missing)
    large = await propose(rig, text="x" * (64 * 1024 + 1))
    assert "65,537 bytes, past what a proposal may hold (65,536 bytes)" in refusal(rig, large)
    (rig.config.paths.workspace / "binary.md").write_bytes(b"\xff\xfe soul")
    binary = await finish_one(rig, outcome=ok(**proposing(path="binary.md")))
    assert "not UTF-8" in refusal(rig, binary)
    (rig.config.paths.workspace / "folder").mkdir()
    folder = await finish_one(rig, outcome=ok(**proposing(path="folder")))
    assert "not a file" in refusal(rig, folder)


@pytest.mark.asyncio
async def test_an_outcome_cannot_write_soul_md_as_an_artifact(rig: Rig) -> None:
    before = soul(rig).read_bytes()
    for path in (str(soul(rig)), "../config/SOUL.md"):
        task = await finish_one(rig, outcome=ok(artifact_paths=[path]))
        assert task.status == "retryable_failure" and "outside the workspace" in (task.last_error or "")
    assert soul(rig).read_bytes() == before
    assert rig.store.constitution_proposals(include_decided=True) == []


# --- the operator decides -------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_accept_writes_the_document_and_moves_the_version_on(rig: Rig, agentd: Any) -> None:
    old_hash, toml_before = rig.config.constitution.soul_hash, rig.config.path.read_text()
    await propose(rig)
    proposal_id = the_proposal_id(rig)
    mode = 0o640
    soul(rig).chmod(mode)

    accepted = agentd(rig, "accept", proposal_id, "--note", "reads well")
    assert accepted.code == 0, accepted.err
    assert "version 1 → 2" in accepted.out and "restart" in accepted.out
    assert soul(rig).read_text() == NEW_SOUL and soul(rig).stat().st_mode & 0o777 == mode
    assert not [p for p in soul(rig).parent.iterdir() if p.name.endswith(".tmp")]
    raw = tomllib.loads(rig.config.path.read_text())
    assert raw["constitution"]["version"] == "2" and raw["constitution"]["revised_at"] != "2026-11-22T00:00:00Z"
    changed = [
        (a, b)
        for a, b in zip(toml_before.splitlines(), rig.config.path.read_text().splitlines(), strict=True)
        if a != b
    ]
    assert [a.split("=")[0].strip() for a, _ in changed] == ["version", "revised_at"]  # nothing else touched

    reloaded = load_config(rig.config.path)  # what a restarted service loads
    assert reloaded.constitution.version == "2" and reloaded.soul_text == NEW_SOUL
    assert reloaded.constitution.soul_hash == hashlib.sha256(NEW_SOUL.encode()).hexdigest()

    [proposal] = rig.store.constitution_proposals(include_decided=True)
    assert (proposal.status, proposal.decided_by, proposal.decision_note) == ("accepted", operator(), "reads well")
    assert proposal.decided_at is not None and (proposal.version_before, proposal.version_after) == ("1", "2")
    [event] = [e for e in rig.events() if e.type == "constitution_accepted"]
    assert event.payload["sha256_before"] == old_hash
    assert event.payload["sha256_after"] == reloaded.constitution.soul_hash
    assert event.payload["by"] == operator() and event.payload["proposal_id"] == proposal_id
    assert agentd(rig, "proposals").out.startswith("no pending")
    assert agentd(rig, "accept", proposal_id).code == 2  # decided once


@pytest.mark.asyncio
async def test_accept_refuses_when_the_document_changed_since(rig: Rig, agentd: Any) -> None:
    await propose(rig)
    proposal_id = the_proposal_id(rig)
    soul(rig).write_text("# Soul\n\nThe operator edited this meanwhile.\n")
    toml_before, soul_before = rig.config.path.read_bytes(), soul(rig).read_bytes()
    assert "accept` would refuse it" in agentd(rig, "show", proposal_id).out

    refused = agentd(rig, "accept", proposal_id)
    assert refused.code == 2 and "changed since proposal" in refused.err and "nothing was written" in refused.err
    assert soul(rig).read_bytes() == soul_before and rig.config.path.read_bytes() == toml_before
    [proposal] = rig.store.constitution_proposals()
    assert proposal.status == "pending" and "constitution_accepted" not in event_types(rig)


@pytest.mark.asyncio
async def test_reject_records_the_reason_and_leaves_the_document(rig: Rig, agentd: Any) -> None:
    before = soul(rig).read_bytes()
    await propose(rig, document="soul")
    proposal_id = the_proposal_id(rig)
    assert agentd(rig, "reject", proposal_id).code == 2  # --reason is required

    rejected = agentd(rig, "reject", proposal_id, "--reason", "too terse")
    assert rejected.code == 0, rejected.err
    [proposal] = rig.store.constitution_proposals(include_decided=True)
    assert (proposal.status, proposal.decision_note, proposal.decided_by) == ("rejected", "too terse", operator())
    [event] = [e for e in rig.events() if e.type == "constitution_rejected"]
    assert event.payload == {"proposal_id": proposal_id, "document": "soul", "by": operator(), "reason": "too terse"}
    assert soul(rig).read_bytes() == before
    assert "rejected" in agentd(rig, "proposals", "--all").out


@pytest.mark.asyncio
async def test_accepting_one_supersedes_the_others_for_that_document(rig: Rig, agentd: Any) -> None:
    await propose(rig)
    await propose(rig, text="# Soul\n\nAnother take.\n")
    await propose(rig, text="# Purpose\n\nShip verified work.\n", document="purpose")
    first, second, purpose = rig.store.constitution_proposals()  # oldest first
    assert purpose.document == "purpose"
    assert agentd(rig, "accept", first.proposal_id).code == 0
    statuses = {p.proposal_id: p.status for p in rig.store.constitution_proposals(include_decided=True)}
    assert statuses == {first.proposal_id: "accepted", second.proposal_id: "superseded", purpose.proposal_id: "pending"}
    accepted = agentd(rig, "accept", purpose.proposal_id)
    assert accepted.code == 0 and "version 2 → 3" in accepted.out
    assert Path(rig.config.constitution.purpose_path).read_text() == "# Purpose\n\nShip verified work.\n"


@pytest.mark.asyncio
async def test_an_unknown_proposal_id_exits_2(rig: Rig, agentd: Any) -> None:
    for args in (("show", "01NOPE"), ("accept", "01NOPE"), ("reject", "01NOPE", "--reason", "x")):
        result = agentd(rig, *args)
        assert result.code == 2 and "no constitution proposal '01NOPE'" in result.err


# --- the pieces -------------------------------------------------------------------------------------


def test_every_outbox_kind_and_status_can_be_stored_after_all_migrations(store: Store) -> None:
    sql = store._conn.execute("SELECT sql FROM sqlite_master WHERE name = 'outbox'").fetchone()[0]
    assert all(f"'{value}'" in sql for value in (*get_args(OutboxKind), *get_args(OutboxStatus)))
    names = {r[0] for r in store._conn.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'outbox'")}
    assert "outbox_pending" in names
    assert store._conn.execute("PRAGMA foreign_key_check").fetchall() == []


def test_next_version_counts_the_last_number_up_or_takes_the_time() -> None:
    now = datetime(2027, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert [next_version(v, now) for v in ("1", "1.4.2", "v07", "2.0-rc1")] == ["2", "1.4.3", "v08", "2.0-rc2"]
    assert next_version("2026-11-22T00:00:00Z", now) == "2027-03-04T05:06:07Z"
    assert next_version("2026-11-22", now) == "2027-03-04"
    assert next_version("first", now) == "2027-03-04T05:06:07Z"
    # Only ASCII digits count, and only as many as make a number: past 100 digits is a name, not a count
    # (int() would refuse past 4,300 with a ValueError).
    assert next_version("v\u0660\u0667", now) == "2027-03-04T05:06:07Z"
    assert next_version("v" + "9" * 5000, now) == "2027-03-04T05:06:07Z"


def test_revise_toml_changes_two_lines_and_keeps_every_comment() -> None:
    text = EXAMPLE_CONFIG.read_text()
    revised = revise_toml(text, "2", "2027-01-01T00:00:00Z", EXAMPLE_CONFIG)
    diff = [(a, b) for a, b in zip(text.splitlines(), revised.splitlines(), strict=True) if a != b]
    assert diff == [
        ('version = "1"', 'version = "2"'),
        ('revised_at = "2026-11-22T00:00:00Z"', 'revised_at = "2027-01-01T00:00:00Z"'),
    ]
    commented = text.replace('version = "1"', "version = '1'   # bumped by agentd constitution accept")
    assert 'version = "2"   # bumped' in revise_toml(commented, "2", "2027-01-01T00:00:00Z", EXAMPLE_CONFIG)
    quoted = text.replace('version = "1"', '"version" = "1"')
    with pytest.raises(InputError, match="cannot set"):  # a line agentd would not edit safely: refused
        revise_toml(quoted, "2", "2027-01-01T00:00:00Z", EXAMPLE_CONFIG)


def test_the_outbox_table_keeps_its_rows_through_the_migration(tmp_path: Path) -> None:
    """0006 rebuilds the outbox to widen its kind CHECK: rows, ids and the id counter survive."""
    from agentd.clock import FakeClock
    from agentd.store import migrate
    from agentd.store.migrations import available_migrations

    db, migrations = tmp_path / "agentd.db", available_migrations()
    before = [m for m in migrations if m.version < 6]
    migrate(db, FakeClock(), before)
    at = "2026-01-01T00:00:00Z"
    with sqlite3.connect(db) as conn:
        conn.execute(
            """INSERT INTO tasks (id, task_type, source, requested_profile_id, max_attempts, available_at,
                   created_at, updated_at) VALUES (1, 'example', 'test', 'operator', 3, ?, ?, ?)""",
            (at, at, at),
        )
        conn.execute(
            """INSERT INTO task_attempts (attempt_id, task_id, attempt_number, adapter_id, adapter_kind,
                   runner_id, started_at) VALUES ('a', 1, 1, 'script', 'script', 'r', ?)""",
            (at,),
        )
        conn.execute(
            """INSERT INTO outbox (id, task_id, attempt_id, kind, idempotency_key, payload, created_at)
               VALUES (41, 1, 'a', 'follow_up_task', 'k', '{}', ?)""",
            (at,),
        )
        conn.execute("UPDATE sqlite_sequence SET seq = 50 WHERE name = 'outbox'")
        # a table that refers to outbox rows (0005's deliveries) must still point at them afterwards
        referrers = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE sql LIKE '%REFERENCES outbox%'")]
        if "deliveries" in referrers:
            conn.execute(
                "INSERT INTO deliveries (outbox_id, handler_id, created_at, updated_at) VALUES (41, 'h', ?, ?)",
                (at, at),
            )
    migrate(db, FakeClock(), migrations)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT id, kind, status FROM outbox").fetchall() == [(41, "follow_up_task", "pending")]
        assert conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'").fetchone() == (50,)
        for table in referrers:
            assert {r[2] for r in conn.execute(f"PRAGMA foreign_key_list({table})")} >= {"outbox"}
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == (table == "deliveries")
