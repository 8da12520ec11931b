"""The other agents on this VM (docs/install-and-deploy.md, "The boundary"): one agent's run and sensor users
must reach nothing another agent's operator decides. `agentd install` gives each agent a run user and folders of its
own; a TOML written by hand can still name another agent's run user, or put one agent's workspace over
another's state dir. `agentd config check` and the services' start read the other installed agents' TOMLs
(/etc/agentd/*.toml, as the port check does) and refuse such a clash, naming both files.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentd import frozen_value
from agentd.config import Config
from agentd.config.parsed import read_toml
from agentd.errors import ConfigError, Problem
from agentd.install.ports import installed_neighbours
from agentd.work.validation import operator_paths, within


@frozen_value
class Neighbour:
    """What another installed agent's TOML says about who runs its attempts and where."""

    toml: Path
    run_as: str | None
    state_dir: Path | None
    areas: tuple[tuple[str, Path], ...]  # (key, folder) its run user may write: workspace, run_dir
    sensors_run_as: str | None = None

    def users(self) -> list[tuple[str | None, str]]:
        """(name, what it is) of the users that run its attempts and sensors ([sensors] run_as unset: the first)."""
        return [(self.run_as, f"{self.toml}'s run user"), (self.sensors_run_as, f"{self.toml}'s sensor user")]


def refuse_neighbours(config: Config) -> None:
    """ConfigError naming every clash with another installed agent (neighbour_problems)."""
    if problems := neighbour_problems(config):
        raise ConfigError(problems)


def neighbour_problems(config: Config) -> list[Problem]:
    """One problem per clash between this agent and another installed one (ports.installed_neighbours)."""
    problems = []
    for other in installed_neighbours(config.path):
        try:
            theirs = neighbour(other)
        except (OSError, ValueError):
            continue  # that agent's own check reports its file
        problems += [Problem(str(config.path), key, what) for key, what in _clashes(config, theirs)]
    return problems


def neighbour_run_users(config: Config) -> list[tuple[str | None, str]]:
    """(user, what it is) of each other installed agent's run and sensor users: the console refuses
    their sockets too."""
    found: list[tuple[str | None, str]] = []
    for other in installed_neighbours(config.path):
        try:
            found += neighbour(other).users()
        except (OSError, ValueError):
            continue  # that agent's own check reports its file
    return found


def _clashes(config: Config, theirs: Neighbour) -> list[tuple[str, str]]:
    """(key, what) for each way this agent and `theirs` reach each other's."""
    found, other = [], theirs.toml
    shared = "each agent's attempts or sensors would reach the other's; give each agent its own"
    for key, name in (("dispatch.run_as", config.dispatch.run_as), ("sensors.run_as", config.sensors.run_as)):
        found += [
            (key, f"{name!r} is also {what}: {shared}")
            for theirs_name, what in theirs.users()
            if name is not None and name == theirs_name
        ]
    for key, path in operator_paths(config):
        found += [
            (key, f"{path} is inside {other}'s {area_key} ({area}): that agent's attempts may change what is there")
            for area_key, area in theirs.areas
            if within(path, area)
        ]
    for key, area in (("paths.workspace", config.paths.workspace), ("paths.run_dir", config.paths.run_dir)):
        if area is None:
            continue
        state_dir = theirs.state_dir
        if state_dir is not None and (within(state_dir, area) or within(area, state_dir)):
            found.append(
                (key, f"{area} overlaps {other}'s state dir ({state_dir}): this agent's attempts could reach it")
            )
        found += [  # two services would each make it their own run user's, and each agent's attempts see the other's
            (key, f"{area} overlaps {other}'s {their_key} ({their_area}): give each agent its own")
            for their_key, their_area in theirs.areas
            if within(area, their_area) or within(their_area, area)
        ]
    return found


def neighbour(toml: Path) -> Neighbour:
    """Another agent's run user and folders, its relative paths resolved as its own load resolves them.

    :raises OSError, ValueError: unreadable, not TOML, or tables that are not tables.
    """
    raw = read_toml(toml)
    paths, dispatch, sensors = raw.get("paths", {}), raw.get("dispatch", {}), raw.get("sensors", {})
    if not isinstance(paths, dict) or not isinstance(dispatch, dict) or not isinstance(sensors, dict):
        raise ValueError("[paths], [dispatch] or [sensors] is not a table")

    def folder(key: str) -> Path | None:
        value = paths.get(key)
        return Path(os.path.normpath(toml.parent / value)) if isinstance(value, str) and value else None

    run_as, sensors_run_as = dispatch.get("run_as"), sensors.get("run_as")
    areas = tuple((key, path) for key in ("workspace", "run_dir") if (path := folder(key)) is not None)
    return Neighbour(
        toml,
        run_as if isinstance(run_as, str) else None,
        folder("state_dir"),
        areas,
        sensors_run_as if isinstance(sensors_run_as, str) else None,
    )
