"""Reading what an attempt wrote (agentd/process/files.py) and writing where it may write (create_private):
never through a link, never a FIFO or a device, never past a cap. The attempt's user can replace any
path in its run dir or workspace at any moment, so none of this may follow what it planted."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import examples

from agentd.process.files import Refused, create_private, lstat_beneath, read_beneath, read_reported, sha256_beneath


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside the run dir, standing for the database or an env_file."""
    path = tmp_path / "state" / "agentd.db"
    path.parent.mkdir()
    path.write_text("the database")
    return path


@pytest.fixture
def run(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    return folder


def test_a_regular_file_is_read_up_to_its_cap(run: Path) -> None:
    (run / "result.json").write_text("x" * 10)
    assert read_reported(run / "result.json", 100) == (b"x" * 10, None)
    data, problem = read_reported(run / "result.json", 5)
    assert data is None and problem == "larger than 5 bytes; agentd reads at most that much"
    assert read_reported(run / "missing.json", 5) == (None, None)


def test_a_link_planted_as_the_result_is_refused_not_followed(run: Path, secret: Path) -> None:
    (run / "result.json").symlink_to(secret)
    data, problem = read_reported(run / "result.json", 1000)
    assert data is None and problem is not None and "symbolic link" in problem


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_what_is_not_a_regular_file_is_refused_without_hanging(run: Path, kind: str) -> None:
    target = run / "result.json"
    if kind == "fifo":
        os.mkfifo(target)  # opening it for reading would block forever without O_NONBLOCK
    elif kind == "folder":
        target.mkdir()
    else:
        target.symlink_to("/dev/zero")  # an endless read, through a link
    data, problem = read_reported(target, 1000)
    assert data is None and problem is not None


def test_a_link_in_the_middle_of_a_workspace_path_is_refused(tmp_path: Path, secret: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "reports").symlink_to(secret.parent)  # reports/agentd.db is the database
    for read in (
        lambda: read_beneath(workspace, "reports/agentd.db", 100),
        lambda: sha256_beneath(workspace, "reports/agentd.db"),
    ):
        with pytest.raises(Refused):
            read()
    with pytest.raises(Refused):
        lstat_beneath(workspace, "reports")


@pytest.mark.parametrize("relative", ["../state/agentd.db", "/etc/passwd", "a/../../x", ".", ""])
def test_a_path_that_is_not_plainly_inside_is_refused(tmp_path: Path, relative: str) -> None:
    with pytest.raises(Refused):
        read_beneath(tmp_path, relative, 100)


def test_a_link_planted_where_the_service_writes_is_replaced_not_written_through(run: Path, secret: Path) -> None:
    (run / "manifest.json.tmp").symlink_to(secret)  # where write_private's temp file goes
    (run / "stdout.log").symlink_to(secret)
    fd = create_private(run / "stdout.log")
    os.write(fd, b"output")
    os.close(fd)
    assert secret.read_text() == "the database"
    assert not (run / "stdout.log").is_symlink() and (run / "stdout.log").read_bytes() == b"output"


@pytest.mark.parametrize("write", ["create_private", "write_new", "write_private", "write_shared"])
def test_every_service_write_replaces_a_planted_link_and_never_writes_through_it(tmp_path: Path, write: str) -> None:
    from agentd.process import files

    secret = tmp_path / "agentd.db"
    secret.write_text("the database")
    target = tmp_path / "result.json"
    for planted in (target, target.with_name("result.json.tmp")):
        planted.symlink_to(secret)
    if write == "create_private":
        fd = files.create_private(target)
        os.write(fd, b"output")
        os.close(fd)
    elif write == "write_shared":
        files.write_shared(target, "output", None)
    else:
        getattr(files, write)(target, "output")
    assert secret.read_text() == "the database"
    assert not target.is_symlink() and target.read_text() == "output"
    assert target.stat().st_mode & 0o777 == 0o600


NAMES = st.sampled_from(["a", "b", "c"])


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    plan=st.lists(
        st.tuples(st.lists(NAMES, min_size=1, max_size=3), st.sampled_from(["file", "folder", "link-out", "link-in"])),
        max_size=8,
    ),
    probe=st.lists(NAMES, min_size=1, max_size=3),
)
def test_nothing_outside_the_root_is_ever_read_whatever_links_it_holds(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[list[str], str]], probe: list[str]
) -> None:
    base = tmp_path_factory.mktemp("tree")
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "a").write_text("OUTSIDE")
    for parts, kind in plan:
        path = root.joinpath(*parts)
        if path.exists() or path.is_symlink() or not path.parent.is_dir() or path.parent.is_symlink():
            continue
        if kind == "file":
            path.write_text("inside")
        elif kind == "folder":
            path.mkdir()
        elif kind == "link-out":
            path.symlink_to(outside)
        else:
            path.symlink_to(root)
    try:
        data = read_beneath(root, "/".join(probe), 100).data
    except OSError:
        return  # refused, or nothing there: never a read outside
    assert data == b"inside"
    assert not any(root.joinpath(*probe[: i + 1]).is_symlink() for i in range(len(probe)))


@pytest.mark.parametrize(
    "make",
    [
        lambda w: (w / "loop").symlink_to("loop"),  # ln -s loop loop
        lambda w: ((w / "a").symlink_to("b"), (w / "b").symlink_to("a")),  # a → b → a
        lambda w: ((w / "dir").mkdir(), (w / "dir" / "loop").symlink_to("../dir/loop")),  # one deeper
    ],
    ids=["itself", "a pair", "inside a folder"],
)
def test_a_link_loop_named_as_an_artifact_leads_outside_the_workspace(tmp_path: Path, make: Any) -> None:
    """Path.resolve() raises RuntimeError, not OSError, on a link loop (Python 3.11): agentd recorded its
    own crash ("agentd failed running this attempt: RuntimeError: Symlink loop") and retried the task."""
    from agentd.attempt.conclude import HashBudget, file_fact

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    make(workspace)
    for name in ("loop", "a", "dir/loop"):
        if os.path.lexists(workspace / name):
            fact = file_fact(name, workspace, HashBudget(1 << 20, "the test's budget"))
            assert fact.problem == f"path {name!r} leads outside the workspace", fact


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_reported_file_of_another_user_is_refused_not_taken_for_the_attempts(run: Path, tmp_path: Path) -> None:
    """What an attempt reports (its result, its harness's last message or usage file, its progress, its
    artifacts) is its run user's: a file another party left where agentd reads (a sensor, another agent,
    the operator) is refused by its owner, as a link is refused by its kind."""
    from agentd.attempt.conclude import HashBudget, file_fact

    attempt_user, someone_else = 4242, 4343
    result = run / "result.json"
    result.write_text('{"status": "completed"}')
    os.chown(result, someone_else, someone_else)
    data, problem = read_reported(result, 1000, owner=attempt_user)
    assert (
        data is None
        and problem == f"'result.json' belongs to uid {someone_else}, not to the attempt's user (uid {attempt_user})"
    )
    assert read_reported(result, 1000, owner=someone_else)[0] == b'{"status": "completed"}'  # the control
    assert read_reported(result, 1000)[0] is not None  # without a run user, anyone's (the service's own)
    workspace = tmp_path / "workspace"
    (workspace / "reports").mkdir(parents=True)
    (workspace / "reports" / "planted.md").write_text("not the attempt's")
    os.chown(workspace / "reports" / "planted.md", someone_else, someone_else)
    fact = file_fact("reports/planted.md", workspace, HashBudget(1 << 20, "the budget"), owner=attempt_user)
    assert fact.problem is not None and "not to the attempt's user" in fact.problem
    assert "an artifact is a file its attempt made" in fact.problem
    with pytest.raises(Refused):
        lstat_beneath(workspace, "reports/planted.md", owner=attempt_user)
    assert file_fact("reports/planted.md", workspace, HashBudget(1 << 20, "b"), owner=someone_else).sha256
