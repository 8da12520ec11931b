"""Tampered attempt folders (issue 23, finding 8): links and special files planted in an attempt's
evidence are findings for `agentd evidence verify`, never followed; `evidence export` never archives a
link or anything but a regular file, skips such an attempt naming why (index.json, stderr) and exits 1;
an `--out` that is a symbolic link, or whose folder is one, is refused (exit 2, one line)."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from rig import Rig
from support import CliResult

from agentd.records import TaskAttempt


@pytest_asyncio.fixture
async def filled(rig: Rig) -> Rig:
    """Two completed tasks, run by the real dispatcher (in-process adapters)."""
    rig.add("example", subject="first")
    rig.add("example", subject="second")
    await rig.drain()
    return rig


@pytest.fixture
def agentd(rig_cli: Callable[..., CliResult]) -> Callable[..., CliResult]:
    return rig_cli


def attempts(rig: Rig) -> list[TaskAttempt]:
    return sorted(rig.store.all_attempts(), key=lambda a: a.task_id)


def folder(rig: Rig, attempt: TaskAttempt) -> Path:
    return rig.config.paths.state_dir / "attempts" / str(attempt.task_id) / attempt.attempt_id


def swap_for_link(path: Path, outside: Path) -> None:
    """Replace an evidence file with a link to a copy of it outside the folder: the same bytes, so a
    check that follows links sees nothing wrong."""
    shutil.copyfile(path, outside)
    path.chmod(0o600)
    path.unlink()
    path.symlink_to(outside)


@pytest.mark.asyncio
async def test_verify_names_links_and_special_files_and_never_follows_them(
    filled: Rig, agentd: Any, tmp_path: Path
) -> None:
    first, second = attempts(filled)
    linked = folder(filled, first)
    swap_for_link(linked / "stdout.log", tmp_path / "stdout-copy.log")
    swap_for_link(linked / "manifest.json", tmp_path / "manifest-copy.json")
    special = folder(filled, second)
    (special / "stderr.log").unlink()
    os.mkfifo(special / "stderr.log")  # a reader that opened it would wait forever
    os.mkfifo(special / "planted.fifo")

    result = agentd(filled, "evidence", "verify")
    assert result.code == 1, result.out
    assert f"{linked / 'stdout.log'}: a symbolic link (never followed)" in result.out
    assert f"{linked / 'manifest.json'}: a symbolic link (never followed)" in result.out
    assert f"{special / 'stderr.log'}: not a regular file (never read)" in result.out
    assert f"{special / 'planted.fifo'}: not a regular file (never read)" in result.out


@pytest.mark.asyncio
async def test_verify_does_not_follow_a_linked_attempt_folder(filled: Rig, agentd: Any, tmp_path: Path) -> None:
    first, _ = attempts(filled)
    real = folder(filled, first)
    moved = tmp_path / "elsewhere"
    shutil.move(real, moved)
    real.symlink_to(moved)
    result = agentd(filled, "evidence", "verify")
    assert result.code == 1 and f"{real}: a symbolic link (never followed)" in result.out, result.out


@pytest.mark.asyncio
async def test_the_bundle_never_archives_a_link_and_a_skipped_attempt_exits_1(
    filled: Rig, agentd: Any, tmp_path: Path
) -> None:
    first, second = attempts(filled)
    tampered = folder(filled, first)
    (tampered / "stdout.log").chmod(0o600)
    (tampered / "stdout.log").unlink()
    (tampered / "stdout.log").symlink_to("/etc/passwd")
    out = tmp_path / "evidence.tar.gz"

    result = agentd(filled, "evidence", "export", "--format", "bundle", "--all", "--out", str(out))
    assert result.code == 1, (result.out, result.err)
    assert f"not exported: {first.attempt_id}" in result.err and "symbolic link" in result.err
    with tarfile.open(out) as tar:
        members = tar.getmembers()
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        passwd = Path("/etc/passwd").read_bytes()
        contents = [tar.extractfile(m).read() for m in members if m.isfile()]  # type: ignore[union-attr]
    assert all(m.isfile() for m in members), [(m.name, m.type) for m in members if not m.isfile()]
    assert passwd not in contents
    assert not any(first.attempt_id in m.name for m in members)
    assert [a["attempt_id"] for a in index["attempts"]] == [second.attempt_id]
    [skipped] = index["skipped"]
    assert skipped["attempt_id"] == first.attempt_id and skipped["task_id"] == first.task_id
    assert "symbolic link" in skipped["why"]


@pytest.mark.asyncio
async def test_the_tracecore_export_never_follows_a_planted_trace(filled: Rig, agentd: Any, tmp_path: Path) -> None:
    first, second = attempts(filled)
    swap_for_link(folder(filled, first) / "action_trace.jsonl", tmp_path / "trace-copy.jsonl")
    out = tmp_path / "tracecore"
    result = agentd(filled, "evidence", "export", "--format", "tracecore", "--all", "--out", str(out), "--json")
    assert result.code == 1, (result.out, result.err)
    shown = result.json()
    assert shown["attempts"] == [second.attempt_id]
    assert [s["attempt_id"] for s in shown["skipped"]] == [first.attempt_id]
    assert sorted(p.name for p in out.iterdir()) == [f"{second.attempt_id}.json"]


@pytest.mark.parametrize("fmt", ["bundle", "tracecore"])
@pytest.mark.asyncio
async def test_an_out_that_is_a_link_or_inside_one_is_refused(
    filled: Rig, agentd: Any, tmp_path: Path, fmt: str
) -> None:
    target = tmp_path / "target"
    target.mkdir()
    dangling, pointing, parent = tmp_path / "dangling", tmp_path / "pointing", tmp_path / "linked-folder"
    dangling.symlink_to(tmp_path / "nowhere")
    pointing.symlink_to(target)
    parent.symlink_to(target)
    for out, says in (
        (dangling, "is a symbolic link"),
        (pointing, "is a symbolic link"),
        (parent / "x", "is a symbolic link"),
    ):
        result = agentd(filled, "evidence", "export", "--format", fmt, "--all", "--out", str(out))
        assert result.code == 2, (out, result.out, result.err)
        assert len(result.err.splitlines()) == 1 and says in result.err and "Traceback" not in result.err, result.err
    assert list(target.iterdir()) == [] and not (tmp_path / "nowhere").exists()


DEEP = b"[" * 100_000 + b"]" * 100_000
MANIFEST_TAMPERING = {
    "nested past json's reach": (DEEP, "not JSON agentd reads (nested deeper than Python's JSON parser goes)"),
    "over 16 MiB": (b" " * (16 * 1024 * 1024 + 1), "over 16,777,216 bytes, far more than agentd writes"),
    "not UTF-8": (b'{"a": "\xff"}', "not JSON ('utf-8' codec can't decode byte 0xff"),
    "a FIFO": (None, "not a regular file (never read)"),
    # Python's reader kept the last of the two, so the forged first one passed every check (the fields'
    # artifact_hash included) while an auditor's tool that takes the first read `crashed`.
    "a key written twice": (
        lambda original: original.replace(b"{\n", b'{\n  "exit_status": "crashed",\n', 1),
        "the key 'exit_status' is written twice in one object",
    ),
}


@pytest.mark.asyncio
@pytest.mark.parametrize(("content", "said"), MANIFEST_TAMPERING.values(), ids=MANIFEST_TAMPERING.keys())
async def test_whatever_a_tampered_manifest_holds_is_a_finding_for_verify_export_and_replay(
    filled: Rig, agentd: Any, tmp_path: Path, content: bytes | Callable[[bytes], bytes] | None, said: str
) -> None:
    first, _ = attempts(filled)
    manifest = folder(filled, first) / "manifest.json"
    manifest.chmod(0o600)
    if callable(content):  # an edit of what agentd wrote
        content = content(manifest.read_bytes())
    manifest.unlink()
    manifest.write_bytes(content) if content is not None else os.mkfifo(manifest)

    verified = agentd(filled, "evidence", "verify")
    assert verified.code == 1 and f"{manifest}: {said}" in verified.out, verified.out
    for fmt in ("bundle", "tracecore"):
        out = tmp_path / fmt
        exported = agentd(filled, "evidence", "export", "--format", fmt, "--all", "--out", str(out))
        assert exported.code == 1 and f"not exported: {first.attempt_id}" in exported.err, exported.err
    replayed = agentd(filled, "replay", first.attempt_id)
    assert replayed.code != 0 and "Traceback" not in replayed.err + replayed.out
    assert said in replayed.out + replayed.err, (replayed.out, replayed.err)


@pytest.mark.asyncio
async def test_an_action_trace_past_what_agentd_writes_is_hashed_not_read_whole(filled: Rig, agentd: Any) -> None:
    first, _ = attempts(filled)
    trace = folder(filled, first) / "action_trace.jsonl"
    trace.chmod(0o600)
    with trace.open("ab") as grown:  # 17 MiB more: the hash differs, and the parse is not attempted
        grown.write(b'{"step": 1}\n' * (17 * 1024 * 1024 // 12))
    verified = agentd(filled, "evidence", "verify")
    assert verified.code == 1
    assert f"{trace}: over 16,777,216 bytes, far more than agentd writes" in verified.out
    assert f"{trace}: sha256 differs from the manifest" in verified.out


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["bundle", "tracecore"])
async def test_an_out_the_system_refuses_is_one_line_and_nothing_is_left(
    filled: Rig, agentd: Any, tmp_path: Path, fmt: str
) -> None:
    before = sorted(tmp_path.iterdir())
    too_long = tmp_path / ("d" * 300)  # a name past NAME_MAX (255)
    result = agentd(filled, "evidence", "export", "--format", fmt, "--all", "--out", str(too_long))
    assert result.code == 2, (result.out, result.err)
    [line] = result.err.splitlines()
    assert line.startswith(f"agentd: cannot export to {too_long}: File name too long"), line
    assert line.endswith("nothing was written there")
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["bundle", "tracecore"])
async def test_an_export_is_its_owners_alone_as_the_evidence_is(
    filled: Rig, agentd: Any, tmp_path: Path, fmt: str
) -> None:
    out = tmp_path / "export"
    assert agentd(filled, "evidence", "export", "--format", fmt, "--all", "--out", str(out)).code == 0
    assert out.stat().st_mode & 0o077 == 0, oct(out.stat().st_mode)
