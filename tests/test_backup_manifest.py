"""A backup's manifest (agentd/backup/manifest.py): parsed strictly, and no path in it reaches outside the folder it
is restored into (docs/backup-and-archive.md)."""

from __future__ import annotations

import contextlib
import json
from pathlib import PurePosixPath
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from support import examples

from agentd.backup.manifest import BadManifest, Entry, Manifest, Sealed, parse_manifest, safe_path

SHA = "a" * 64
NAMES = st.from_regex(r"\A[A-Za-z0-9_][A-Za-z0-9._-]{0,20}\Z")


def manifest(**changes: Any) -> dict[str, Any]:
    body = Manifest(
        backup_id="20261122T100000Z-ABCDEFGHIJ",
        created_at="2026-11-22T10:00:00.000000Z",
        agent_id="agent",
        schema_version=23,
        state_dir="/var/lib/agentd/agent",
        chain_head=(12, SHA),
        database=Entry("snapshots/20261122T100000Z-ABCDEFGHIJ/agentd.db", SHA, 4096),
        files=(Entry("snapshots/20261122T100000Z-ABCDEFGHIJ/open/3/01J/stdout.log", SHA, 0),),
        sealed=(Sealed(2, "01JABC", "evidence/2/01JABC", SHA),),
    ).as_dict()
    body.update(changes)
    return body


def parsed(body: dict[str, Any]) -> Manifest:
    return parse_manifest(json.dumps(body).encode())


def test_a_manifest_agentd_wrote_parses_back_to_itself() -> None:
    body = manifest()
    assert parsed(body).as_dict() == body


@pytest.mark.parametrize(
    "path",
    [
        "../etc/passwd",
        "/etc/passwd",
        "evidence/../../x",
        "a//b",
        "./a",
        "a/.",
        "",
        "a/b/",
        "a\\..\\b",
        ".hidden/x",
        "a\x00b",
    ],
)
def test_a_path_outside_the_backup_is_refused(path: str) -> None:
    with pytest.raises(BadManifest, match=r"database\.path"):
        parsed(manifest(database={"path": path, "sha256": SHA, "size": 1}))


@given(parts=st.lists(st.one_of(NAMES, st.sampled_from(["..", ".", "", "/", "~"])), min_size=1, max_size=6))
@hypothesis_settings(max_examples=examples(300))
def test_every_accepted_path_stays_beneath_the_folder_it_is_restored_into(parts: list[str]) -> None:
    text = "/".join(parts)
    try:
        accepted = safe_path(text, "p")
    except BadManifest:
        return
    root = PurePosixPath("/restore/root")
    joined = PurePosixPath(*(root / accepted).parts)
    assert ".." not in joined.parts and "." not in accepted.split("/")
    assert str(joined).startswith("/restore/root/") and not accepted.startswith("/")


@given(text=st.text(max_size=60))
@hypothesis_settings(max_examples=examples(300))
def test_any_text_as_a_path_is_a_safe_path_or_a_one_line_refusal(text: str) -> None:
    try:
        accepted = safe_path(text, "files[0].path")
    except BadManifest as exc:
        assert str(exc).startswith("files[0].path: expected")
        return
    assert all(part not in ("", ".", "..") for part in accepted.split("/")) and not accepted.startswith("/")


@given(
    key=st.sampled_from(["format", "backup_id", "schema_version", "chain_head", "database", "sealed", "files"]),
    value=st.one_of(st.none(), st.integers(), st.text(max_size=10), st.lists(st.integers(), max_size=2)),
)
@hypothesis_settings(max_examples=examples(300))
def test_a_mangled_field_is_a_refusal_naming_it_never_a_crash(key: str, value: Any) -> None:
    body = manifest(**{key: value})
    try:
        parsed(body)
    except BadManifest as exc:
        assert key.split("_")[0] in str(exc) or "manifest" in str(exc)


@given(data=st.binary(max_size=200))
@hypothesis_settings(max_examples=examples(300))
def test_any_bytes_are_a_manifest_or_a_refusal(data: bytes) -> None:
    with contextlib.suppress(BadManifest):
        parse_manifest(data)


def test_a_path_named_twice_is_refused() -> None:
    twice = manifest(files=[manifest()["database"]])
    with pytest.raises(BadManifest, match="named twice"):
        parsed(twice)


def test_a_sealed_folder_outside_the_backup_is_refused() -> None:
    body = manifest(sealed=[{"task_id": 1, "attempt_id": "01J", "folder": "../../attempts", "manifest_sha256": SHA}])
    with pytest.raises(BadManifest, match=r"sealed\[0\].folder"):
        parsed(body)
