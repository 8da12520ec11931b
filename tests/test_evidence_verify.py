"""`agentd evidence verify` on a real state dir the real dispatcher filled: clean when untouched
(also from a copy it must not change), and each kind of tampering named where it happened."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from rig import Rig
from support import CliResult, sql, tree

from agentd import control
from agentd.evidence import MANIFEST, artifact_hash
from agentd.records import TaskIntent
from agentd.web.views import task_view


@pytest_asyncio.fixture
async def filled(rig: Rig) -> Rig:
    """A completed task, a task that failed three times, and one canceled before it ran."""
    rig.add("example", subject="done")
    rig.add("flaky", subject="fails")
    canceled = rig.add("example", subject="canceled", schedule={"delay_minutes": 60})
    control.cancel_task(rig.config, rig.store, canceled.task_id, rig.clock.now())
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    for _ in range(4):
        await dispatcher.run_until_idle()
        rig.clock.advance(3600)
    return rig


@pytest.fixture
def verify(rig_cli: Callable[..., CliResult]) -> Callable[..., CliResult]:
    def run(rig: Rig, *args: str, state_dir: Path | None = None) -> CliResult:
        return rig_cli(rig, "evidence", "verify", *args, state_dir=state_dir)

    return run


def head(rig: Rig) -> str:
    found = rig.store.chain_head()
    assert found is not None
    return f"{found[0]}:{found[1]}"


def an_attempt_dir(rig: Rig) -> Path:
    attempt = rig.store.all_attempts()[0]
    return rig.config.paths.state_dir / "attempts" / str(attempt.task_id) / attempt.attempt_id


@pytest.mark.asyncio
async def test_an_untouched_state_dir_verifies_clean(filled: Rig, verify: Any) -> None:
    result = verify(filled)
    assert result.code == 0, result.out
    assert result.out.startswith("clean: ") and f"head {head(filled)}" in result.out
    shown = verify(filled, "--json", "--expect-head", head(filled)).json()
    assert shown["ok"] is True and shown["attempts_checked"] == 4 and shown["findings"] == []


@pytest.mark.asyncio
async def test_a_copy_verifies_clean_and_is_not_changed(filled: Rig, verify: Any, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(filled.config.paths.state_dir, copy)
    before = tree(copy)
    for path in copy.rglob("*"):
        os.chmod(path, 0o500 if path.is_dir() else 0o400)
    try:
        result = verify(filled, state_dir=copy)
    finally:
        for path in copy.rglob("*"):
            os.chmod(path, 0o700 if path.is_dir() else 0o600)
    assert result.code == 0, result.out
    assert tree(copy) == before


@pytest.mark.parametrize(
    ("tamper", "spot"),
    [
        ("UPDATE events SET payload = json_set(payload, '$.x', 1) WHERE sequence = 5", "event 5"),
        ("DELETE FROM events WHERE sequence = 1", "event 2"),
        ("DELETE FROM events WHERE sequence = 7", "event 8"),
    ],
)
@pytest.mark.asyncio
async def test_an_edited_or_removed_event_is_named(filled: Rig, verify: Any, tamper: str, spot: str) -> None:
    sql(filled, tamper)
    result = verify(filled)
    assert result.code == 1
    assert any(line.startswith(spot) for line in result.out.splitlines()), result.out


@pytest.mark.asyncio
@pytest.mark.parametrize("stored", ["{not json", '{"manifest_sha256": 7}', "[1, 2]"])
async def test_an_outcome_event_edited_into_no_json_is_named_and_verify_goes_on(
    filled: Rig, verify: Any, stored: str
) -> None:
    """The events table keeps no json_valid CHECK (migration 0019): an attempt's task_attempt_finished edited
    into text that is not JSON (or JSON without the manifest's sha256) is a break of the chain, named with
    its sequence; verify reads the rest and exits 1, never a traceback."""
    [finished, *_] = [e.sequence for e in filled.events() if e.type == "task_attempt_finished"]
    sql(filled, "UPDATE events SET payload = ? WHERE sequence = ?", stored, finished)
    result = verify(filled, "--json")
    assert result.code == 1 and "Traceback" not in result.err, result
    shown = result.json()
    assert shown["attempts_checked"] == 4 and any(f["where"] == f"event {finished}" for f in shown["findings"])


def test_an_approvals_context_edited_into_no_json_reads_as_none(rig: Rig) -> None:
    """The approval hand-off's context comes from the task's task_enqueued event: edited into text that is not
    JSON, or a context that is no object, it reads as none (the chain names the edit) instead of an SQL error."""
    intent = TaskIntent(task_type="example", source="test", payload={})
    context = {"ticket": "T-1"}
    now = rig.clock.now()
    task = control.add_task(rig.config, rig.store, intent, now, require_approval=True, by="t", dispatch_context=context)
    assert rig.store.approval_context(task.task_id)["dispatch_context"] == context
    for stored in ("{not json", '{"dispatch_context": "T-1"}', "[]"):
        sql(rig, "UPDATE events SET payload = ? WHERE type = 'task_enqueued' AND task_id = ?", stored, task.task_id)
        assert rig.store.approval_context(task.task_id)["dispatch_context"] is None
        shown = task_view(rig.config, rig.store, task.task_id)["dispatch_context"]  # the console shows what is there
        assert shown == ("T-1" if "dispatch_context" in stored else None)


@pytest.mark.asyncio
async def test_an_event_stored_as_other_text_of_the_same_value_still_verifies(filled: Rig, verify: Any) -> None:
    """The chain is checked from each row's text as agentd stores it (canonical) and, when that does not
    match, from its value: an older agentd's payload text (spaced, keys unsorted) verifies; an edit does not."""
    with sqlite3.connect(filled.config.db_path) as conn:
        rows = conn.execute("SELECT sequence, payload FROM events WHERE payload != '{}'").fetchall()
        for sequence, payload in rows:
            loose = json.dumps(dict(reversed(json.loads(payload).items())), indent=1, ensure_ascii=True)
            conn.execute("UPDATE events SET payload = ? WHERE sequence = ?", (loose, sequence))
    assert rows and verify(filled).code == 0
    sequence, payload = rows[0]
    edited = json.dumps({**json.loads(payload), "added": True}, indent=1)
    sql(filled, "UPDATE events SET payload = ? WHERE sequence = ?", edited, sequence)
    result = verify(filled)
    assert result.code == 1 and f"event {sequence}: hash does not match the event's content" in result.out, result.out


@pytest.mark.asyncio
async def test_removing_the_last_events_is_caught(filled: Rig, verify: Any) -> None:
    recorded = head(filled)
    last = int(recorded.split(":")[0])
    sql(filled, "DELETE FROM events WHERE sequence >= ?", last - 1)
    result = verify(filled)
    assert result.code == 1
    assert f"event {last - 1}: events {last - 1}..{last} were removed from the end of the chain" in result.out
    # A writer who also winds back SQLite's high-water mark: only the head held elsewhere catches it.
    sql(filled, "UPDATE sqlite_sequence SET seq = ? WHERE name = 'events'", last - 2)
    assert verify(filled).code == 0
    caught = verify(filled, "--expect-head", recorded)
    assert caught.code == 1
    assert f"event {last}: the recorded head is {last}, but the chain ends at {last - 2}: events cut" in caught.out


@pytest.mark.asyncio
async def test_a_head_that_differs_is_named(filled: Rig, verify: Any) -> None:
    sequence = head(filled).split(":")[0]
    result = verify(filled, "--expect-head", f"{sequence}:{'0' * 64}")
    assert result.code == 1 and f"event {sequence}: hash " in result.out


@pytest.mark.asyncio
async def test_an_edited_evidence_file_is_named(filled: Rig, verify: Any) -> None:
    stdout = an_attempt_dir(filled) / "stdout.log"
    stdout.write_text(stdout.read_text() + "one more line\n")
    result = verify(filled)
    assert result.code == 1
    assert f"{stdout}: sha256 differs from the manifest" in result.out


@pytest.mark.asyncio
async def test_an_edited_manifest_field_is_named(filled: Rig, verify: Any) -> None:
    manifest_path = an_attempt_dir(filled) / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    os.chmod(manifest_path, 0o600)
    manifest["outcome"]["status"] = "completed" if manifest["outcome"]["status"] != "completed" else "blocked"
    manifest_path.write_text(json.dumps(manifest))
    result = verify(filled)
    assert result.code == 1 and f"{manifest_path}: artifact_hash does not match its fields" in result.out


@pytest.mark.asyncio
async def test_a_manifest_field_outside_its_schema_is_named_even_with_a_recomputed_hash(
    filled: Rig, verify: Any
) -> None:
    manifest_path = an_attempt_dir(filled) / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    os.chmod(manifest_path, 0o600)
    manifest["exit_status"] = "fine"
    manifest["redactions"] = {"count": -1}
    manifest["artifact_hash"] = artifact_hash(manifest)
    manifest_path.write_text(json.dumps(manifest))
    out = verify(filled).out
    assert f"{manifest_path} exit_status: outside the manifest schema" in out
    assert f"{manifest_path} redactions.count: outside the manifest schema" in out
    assert f"{manifest_path} exit_status: says 'fine', the attempt row says" in out


@pytest.mark.asyncio
async def test_a_manifest_time_in_other_digits_is_outside_its_schema(filled: Rig, verify: Any) -> None:
    """The schema's times are ASCII digits, as a JSON Schema's \\d is; Python's \\d took "٢٠٢٦"."""
    manifest_path = an_attempt_dir(filled) / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    os.chmod(manifest_path, 0o600)
    manifest["completed_at"] = "\u0662\u0660\u0662\u0666" + manifest["completed_at"][4:]
    manifest["artifact_hash"] = artifact_hash(manifest)
    manifest_path.write_text(json.dumps(manifest))
    assert f"{manifest_path} completed_at: outside the manifest schema" in verify(filled).out


@pytest.mark.asyncio
async def test_missing_and_extra_files_and_folders_are_named(filled: Rig, verify: Any) -> None:
    folder = an_attempt_dir(filled)
    (folder / "stderr.log").unlink()
    (folder / "planted.sh").write_text("echo hi\n")
    stray = filled.config.paths.state_dir / "attempts" / "999" / "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    stray.mkdir(parents=True)
    out = verify(filled).out
    assert f"{folder / 'stderr.log'}: listed in the manifest but missing" in out
    assert f"{folder / 'planted.sh'}: present but not part of the evidence" in out
    assert f"{stray}: an attempt folder no attempt in the database names" in out


@pytest.mark.asyncio
@pytest.mark.parametrize("name", ["\u00b2", "\u0661", "1_0", "+1", "9" * 120])
async def test_a_task_folder_whose_name_only_looks_like_a_number_is_named(filled: Rig, verify: Any, name: str) -> None:
    """A planted task folder named "²" (a digit to str.isdigit(), not to int()) was a ValueError
    traceback; "١" (Arabic-Indic one) was read as task 1."""
    stray = filled.config.paths.state_dir / "attempts" / name / "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    stray.mkdir(parents=True)
    result = verify(filled)
    assert result.code == 1 and "Traceback" not in result.err, result
    assert f"{stray}: an attempt folder no attempt in the database names" in result.out


@pytest.mark.asyncio
@pytest.mark.parametrize("sequence", ["9223372036854775808", "\u0661\u0662", "0", "9" * 5000])
async def test_an_expected_head_whose_sequence_no_event_can_have_is_refused(
    filled: Rig, verify: Any, sequence: str
) -> None:
    """Past int64 was an OverflowError traceback from SQLite; 5,000 digits, int()'s own message."""
    refused = verify(filled, "--expect-head", f"{sequence}:{'0' * 64}")
    assert refused.code == 2 and "expected SEQUENCE:SHA256" in refused.err, refused


@pytest.mark.asyncio
async def test_one_task_and_bad_input(filled: Rig, verify: Any) -> None:
    [task] = [t for t in filled.store.list_tasks() if t.subject == "fails"]
    shown = verify(filled, "--task", str(task.task_id), "--json").json()
    assert shown["ok"] is True and shown["attempts_checked"] == 3
    refused = verify(filled, "--expect-head", "12:abc")
    assert refused.code == 2 and "expected SEQUENCE:SHA256" in refused.err
    missing = verify(filled, "--task", "99999")
    assert missing.code == 2 and "task 99999 does not exist" in missing.err


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_a_service_publishes_the_chain_head_in_its_log_when_it_stops(
    cli: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    assert cli("init").code == 0
    assert cli("task", "add", "--type", "example").code == 0
    with caplog.at_level(logging.INFO, logger="agentd.services.shell"):
        assert cli("dispatch", "--until-idle").code == 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("chain_head ")]
    assert len(lines) == 1
    _, sequence, digest, _ = lines[0].split(" ")
    published = f"{sequence.removeprefix('sequence=')}:{digest.removeprefix('hash=')}"
    clean = cli("evidence", "verify", "--expect-head", published)
    assert clean.code == 0, clean.out


@pytest.mark.asyncio
async def test_a_write_a_kill_cut_short_leaves_no_stray_file_in_the_sealed_evidence(
    rig: Rig, verify: Callable[..., CliResult]
) -> None:
    """SIGKILL during an atomic write leaves `prompt.md.tmp`; the boot sweep's seal must not keep it."""
    from agentd.attempt.prepare import plan_attempt

    task = rig.add("example")
    claim = rig.store.claim_next_task(
        rig.clock.now(), "gone", lambda t: plan_attempt(rig.config, t), rig.config.paths.state_dir / "attempts"
    )
    assert claim is not None and claim.attempt is not None and claim.attempt.evidence_dir is not None
    folder = Path(claim.attempt.evidence_dir)
    folder.mkdir(parents=True, mode=0o700)
    (folder / "prompt.md.tmp").write_text("half a promp")  # the dispatcher died here
    dispatcher = rig.dispatcher()
    await dispatcher.start()  # the boot sweep ends the attempt interrupted and seals it
    assert rig.store.attempts_of(task.task_id)[0].ended_at is not None
    checked = verify(rig, "--task", str(task.task_id))
    assert checked.code == 0, checked.out
    assert not (folder / "prompt.md.tmp").exists()


@pytest.mark.asyncio
async def test_an_attempt_renames_only_its_manifest_and_removes_nothing_that_is_not_there(
    rig: Rig, verify: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt's files are written in place until the seal, which alone is atomic (docs/evidence.md,
    "The attempt folder"): one rename per attempt, and no removal of a file that was never there."""
    state, runs = rig.config.paths.state_dir, rig.config.paths.runs
    renamed: list[str] = []
    missing: list[str] = []
    real_replace, real_unlink = os.replace, os.unlink

    def replace(src: Any, dst: Any, **kw: Any) -> None:
        if Path(dst).is_relative_to(state / "attempts") or Path(dst).is_relative_to(runs):
            renamed.append(Path(dst).name)
        real_replace(src, dst, **kw)

    def unlink(path: Any, *args: Any, **kw: Any) -> None:
        try:
            real_unlink(path, *args, **kw)
        except FileNotFoundError:
            missing.append(str(path))
            raise

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "unlink", unlink)
    outcome = {"status": "completed", "machine_status": "ok", "operator_summary": "did it"}
    task = rig.add("scripted", payload={"outcome": outcome, "stdout": "hello", "stderr": "world"})
    await rig.drain()
    monkeypatch.undo()
    (attempt,) = rig.store.attempts_of(task.task_id)
    assert attempt.ended_at is not None and attempt.evidence_dir is not None
    folder = Path(attempt.evidence_dir)
    assert {"prompt.md", "stdin.json", "stdout.log", "stderr.log", "result.json", "manifest.json"} <= {
        p.name for p in folder.iterdir()
    }
    assert renamed == [MANIFEST]
    assert missing == []
    assert (folder / MANIFEST).stat().st_mode & 0o777 == 0o400
    checked = verify(rig, "--task", str(task.task_id))
    assert checked.code == 0, checked.out
