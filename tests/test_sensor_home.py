"""The sensor user's home (docs/install-and-deploy.md, "The boundary"): where each sensor's folder is
made, so it must be that user's alone, and no one but root or the services' user may replace it or a
folder above it. Real folders, owned by `nobody` (root is needed to give them away)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agentd.process.privilege import BoundaryError, RunUser, home_problem, sensor_home_base

NOBODY = RunUser("nobody", 65534, 65534, "sensors.run_as")


def laid_out(tmp_path: Path, change: Callable[[Path, Path], None]) -> Path:
    """tmp/above (root's, 0755) / home (nobody's, 0700), then `change(above, home)`."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the folders are given to nobody")
    above, home = tmp_path / "above", tmp_path / "above" / "home"
    home.mkdir(parents=True)
    os.chmod(above, 0o755)
    os.chown(home, NOBODY.uid, NOBODY.gid)
    os.chmod(home, 0o700)
    change(above, home)
    return home


def relink(above: Path, home: Path) -> None:
    home.rename(above / "real")
    home.symlink_to(above / "real")


def link_above(above: Path, home: Path) -> None:
    above.rename(above.with_name("real-above"))
    above.symlink_to(above.with_name("real-above"))


CHANGES: dict[str, tuple[Callable[[Path, Path], None], str | None]] = {
    "as installed": (lambda above, home: None, None),
    "a sticky folder above anyone may write (/tmp)": (lambda above, home: os.chmod(above, 0o1777), None),
    "its group may enter": (lambda above, home: os.chmod(home, 0o750), "must be nobody's alone"),
    "others may enter": (lambda above, home: os.chmod(home, 0o701), "must be nobody's alone"),
    "another owner": (lambda above, home: os.chown(home, 0, 0), "must be nobody's alone"),
    "a link": (relink, "is not a folder"),
    "a link above": (link_above, "is reached through a link"),
    "a folder above another user owns": (
        lambda above, home: os.chown(above, NOBODY.uid, -1),
        "which a user other than root or this service's may change",
    ),
    "a folder above its group may write": (
        lambda above, home: os.chmod(above, 0o775),
        "which a user other than root or this service's may change",
    ),
    "missing": (lambda above, home: home.rmdir(), "cannot be read"),
}


@pytest.mark.parametrize("case", list(CHANGES))
def test_the_sensor_home_is_the_sensor_users_alone(tmp_path: Path, case: str) -> None:
    change, problem = CHANGES[case]
    home = laid_out(tmp_path, change)
    found = home_problem(home, NOBODY, {0})
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found, found


def test_a_relative_home_is_refused_and_the_error_names_the_user_and_the_fix() -> None:
    assert home_problem(Path("relative/home"), NOBODY, {0}) == "is not an absolute path"
    with pytest.raises(BoundaryError) as refused:
        sensor_home_base(NOBODY)  # nobody's home in passwd is /nonexistent
    said = str(refused.value)
    assert said.startswith("sensors.run_as: nobody's home ") and "`agentd install` makes it" in said
