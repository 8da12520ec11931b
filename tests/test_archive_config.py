"""[archive] in the identity TOML (agentd/config/archive.py) and the archive's URL and keys
(agentd/archive/location.py): each bad value a one-line error naming the key, what was expected and what was
found; a credentials file others can read refused; the parsers checked with hypothesis."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import REPO, agent_config

from agentd.archive.location import (
    attempt_key,
    events_key,
    head_key,
    parse_archive_url,
    parsed_attempt_key,
    parsed_events_key,
    parsed_head_key,
)
from agentd.config.archive import bucket_problem, prefix_problem
from agentd.errors import ConfigError
from agentd.work.validation import load_config


def problems(tmp_path: Path, archive: dict[str, Any]) -> list[str]:
    def mutate(raw: dict[str, Any]) -> None:
        raw["archive"] = archive

    with pytest.raises(ConfigError) as caught:
        load_config(agent_config(tmp_path, mutate))
    return [str(p) for p in caught.value.problems]


def creds(tmp_path: Path, mode: int = 0o600, text: str = "AWS_ACCESS_KEY_ID=a\nAWS_SECRET_ACCESS_KEY=b\n") -> str:
    path = tmp_path / "s3.env"
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def test_a_configured_archive_loads(tmp_path: Path) -> None:
    config = load_config(
        agent_config(
            tmp_path, lambda raw: raw.update(archive={"bucket": "evidence", "credentials_file": creds(tmp_path)})
        )
    )
    assert config.archive.enabled and config.archive.lock_mode == "COMPLIANCE" and config.archive.head_interval_s == 60


def test_no_archive_is_the_default(tmp_path: Path) -> None:
    assert not load_config(agent_config(tmp_path)).archive.enabled


def test_a_credentials_file_others_can_read_is_refused(tmp_path: Path) -> None:
    [problem] = problems(tmp_path, {"bucket": "evidence", "credentials_file": creds(tmp_path, 0o644)})
    assert "archive.credentials_file" in problem and "others can read it; chmod 600 it" in problem


def test_a_credentials_file_without_the_key_pair_is_refused(tmp_path: Path) -> None:
    [problem] = problems(
        tmp_path, {"bucket": "evidence", "credentials_file": creds(tmp_path, text="AWS_ACCESS_KEY_ID=a\n")}
    )
    assert "archive.credentials_file" in problem and "expected AWS_SECRET_ACCESS_KEY=… line(s)" in problem


@pytest.mark.parametrize(
    ("archive", "said"),
    [
        ({"bucket": "Evidence!"}, "archive.bucket: expected an S3 bucket name"),
        ({"bucket": "evidence"}, "a bucket needs credentials_file"),
        ({"prefix": "../up/"}, "archive.prefix: expected '' or path segments"),
        ({"endpoint_url": "ftp://x"}, "archive.endpoint_url: expected http(s)://HOST[:PORT]"),
        ({"lock_mode": "FOREVER"}, "archive.lock_mode"),
        ({"retention_days": -1}, "archive.retention_days"),
        ({"head_interval_s": 0}, "archive.head_interval_s"),
        ({"unknown": 1}, "archive.unknown: unknown key"),
    ],
)
def test_each_bad_value_is_named(tmp_path: Path, archive: dict[str, Any], said: str) -> None:
    found = problems(tmp_path, archive)
    assert any(said in p for p in found), found


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_the_cli_says_a_bad_archive_url_in_one_line_and_exits_2(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "agentd", "evidence", "verify", "--archive", "s3://No_Such/", "--agent", "demo"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert run.returncode == 2 and "expected an S3 bucket name" in run.stderr and len(run.stderr.splitlines()) <= 3


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_agentd_version_does_not_import_boto3() -> None:
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "agentd", "--version"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0 and "agentd" in run.stdout
    assert "botocore" not in run.stderr and "boto3" not in run.stderr  # importtime names every module loaded


BUCKET_CHARS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-", min_size=3, max_size=63)
SEGMENT = st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,20}", fullmatch=True)


@given(BUCKET_CHARS, st.lists(SEGMENT, max_size=4))
def test_an_archive_url_is_read_back_as_written_or_refused_with_a_reason(bucket: str, segments: list[str]) -> None:
    prefix = "".join(f"{s}/" for s in segments)
    text = f"s3://{bucket}/{prefix}"
    if bucket_problem(bucket) is None and prefix_problem(prefix) is None:
        location = parse_archive_url(text)
        assert (location.bucket, location.prefix, location.url) == (bucket, prefix, text)
    else:
        with pytest.raises(ValueError, match="expected"):
            parse_archive_url(text)


@given(st.text(max_size=80))
def test_any_text_is_an_archive_url_or_a_one_line_reason(text: str) -> None:
    try:
        location = parse_archive_url(text)
    except ValueError as exc:
        assert "expected" in str(exc)
    else:
        assert text.startswith("s3://") and bucket_problem(location.bucket) is None
        assert ".." not in location.prefix.split("/") and not location.prefix.startswith("/")


@given(st.text(max_size=120))
def test_a_key_agentd_did_not_write_is_never_a_path(key: str) -> None:
    parsed = parsed_attempt_key(key)
    if parsed is not None:
        task_id, attempt_id = parsed
        assert attempt_key(task_id, attempt_id) == key and "/" not in attempt_id and attempt_id not in (".", "..")
    span = parsed_events_key(key)
    assert span is None or events_key(*span) == key
    sequence = parsed_head_key(key)
    assert sequence is None or head_key(sequence) == key


@given(st.integers(1, 10**18), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,40}", fullmatch=True))
def test_every_key_agentd_writes_is_read_back(task_id: int, attempt_id: str) -> None:
    assert parsed_attempt_key(attempt_key(task_id, attempt_id)) == (task_id, attempt_id)
    assert parsed_head_key(head_key(task_id)) == task_id
    assert parsed_events_key(events_key(task_id, task_id + 5)) == (task_id, task_id + 5)


def test_a_hostile_tar_writes_nothing_outside_its_folder(tmp_path: Path) -> None:
    """An object in the bucket is text someone else chose: only plain files with plain names are written."""
    import io
    import tarfile

    from agentd.archive.folder import pack_folder, unpack_folder

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, kind in (
            ("../escaped", tarfile.REGTYPE),
            ("/abs", tarfile.REGTYPE),
            ("sub/inner", tarfile.REGTYPE),
            ("link", tarfile.SYMTYPE),
            ("hard", tarfile.LNKTYPE),
            ("dir", tarfile.DIRTYPE),
            ("stdout.log", tarfile.REGTYPE),
            ("stdout.log", tarfile.REGTYPE),
        ):
            member = tarfile.TarInfo(name)
            member.type, member.linkname = kind, "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
            data = b"x" if kind == tarfile.REGTYPE else b""
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    target = tmp_path / "inside" / "folder"
    target.parent.mkdir()
    refused = unpack_folder(out.getvalue(), target)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["folder", "inside", "stdout.log"]
    assert len(refused) == 7 and any("in the tar twice" in r for r in refused)
    assert (target / "stdout.log").stat().st_mode & 0o777 == 0o600
    [garbage] = unpack_folder(b"not a tar" * 100, tmp_path / "other")
    assert garbage.startswith("not a tar agentd writes")
    again = tmp_path / "again"
    again.mkdir()
    (again / "stdout.log").write_text("out")
    (again / "link").symlink_to("/etc/passwd")
    assert pack_folder(again) == pack_folder(again)  # the same bytes for the same folder
    assert b"root:" not in pack_folder(again)  # a link is never followed
