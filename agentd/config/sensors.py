"""Sensor definitions: `sensors/<id>/sensor.toml` plus its executable (or a skill's sensor_path).

A sensor observes something and prints SensorEvent objects (seed 000 §5) as JSON lines on its
stdout; the sensor service (agentd/services/sensing.py) turns them into tasks and workflows.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agentd import frozen_value
from agentd.config.environment import secret_file_problems
from agentd.config.parsed import read_manifest
from agentd.config.skills import Skill, hidden
from agentd.edge import quoted, resolves_inside
from agentd.errors import Problem
from agentd.records.base import IDENTIFIER_MAX, IDENTIFIER_PATTERN, IDENTIFIER_WORDS, Command, EnvVars, command_argv

MANIFEST = "sensor.toml"


class SensorManifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    description: str
    interval_seconds: float = Field(ge=1, le=31_536_000)
    timeout_seconds: float | None = Field(
        default=None, gt=0, le=86_400, description="default: [sensors] default_timeout_s"
    )
    command: Command = Field(description="argv; a relative executable resolves in the sensor folder")
    env: EnvVars = {}
    env_file: str | None = None
    enabled: bool = True
    # A sensor turns outside data into tasks: each runs on its task type's defaults unless these list
    # what a proposal may name instead (docs/sensors-and-workflows.md, "What a sensor may propose").
    may_request_profiles: list[str] = Field(default=[], description="profiles a proposed task may name")
    may_request_adapters: list[str] = Field(default=[], description="adapters a proposed task may name")
    may_request_models: list[str] = Field(default=[], description="models a proposed task may name")


@frozen_value
class Sensor:
    sensor_id: str
    manifest: SensorManifest
    directory: Path

    @property
    def argv(self) -> list[str]:
        argv = command_argv(self.manifest.command)  # never empty: the manifest's Command
        if "/" in argv[0] and not Path(argv[0]).is_absolute():
            argv[0] = str(self.directory / argv[0])
        return argv

    @property
    def env_file(self) -> Path | None:
        return None if self.manifest.env_file is None else self.directory / self.manifest.env_file


def load_sensors(sensors_dir: Path, skills: dict[str, Skill]) -> tuple[dict[str, Sensor], list[Problem]]:
    """Every sensor folder under sensors_dir and every skill's sensor, with the problems found."""
    listed = os.path.isdir(sensors_dir)  # False for whatever cannot be one (_folder_problems says which)
    folders = [(p.name, p) for p in sorted(sensors_dir.iterdir()) if p.is_dir() and not hidden(p)] if listed else []
    for skill in skills.values():
        sensor_path = skill.manifest.sensor_path
        if sensor_path and resolves_inside(skill.directory, sensor_path):  # the skill's own problem otherwise
            folders.append((skill.skill_id, skill.directory / sensor_path))
    sensors: dict[str, Sensor] = {}
    problems: list[Problem] = []
    for sensor_id, directory in folders:
        sensor, found = _load_sensor(sensor_id, directory)
        problems += found
        if sensor is None:
            continue
        if not is_identifier(sensor_id):  # it names the sensor in events, sources, logs and its state folder
            expected = f"{IDENTIFIER_WORDS}, at most {IDENTIFIER_MAX}"
            problems.append(
                Problem(
                    str(directory),
                    "",
                    f"a sensor's folder name is its id: expected {expected}, found {quoted(sensor_id)}",
                )
            )
            continue
        if sensor_id in sensors:
            problems.append(
                Problem(
                    str(directory / MANIFEST),
                    "",
                    f"sensor id {sensor_id!r} is already taken by {sensors[sensor_id].directory}",
                )
            )
            continue
        sensors[sensor_id] = sensor
    return sensors, problems


_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)


def is_identifier(text: str) -> bool:
    return len(text) <= IDENTIFIER_MAX and _IDENTIFIER.fullmatch(text) is not None


def _load_sensor(sensor_id: str, directory: Path) -> tuple[Sensor | None, list[Problem]]:
    path = directory / MANIFEST
    source = str(path)
    if not path.is_file():
        try:
            empty = directory.name == "__pycache__" or not any(directory.iterdir())
        except OSError as exc:
            return None, [
                Problem(str(directory), "", f"expected a sensor folder, found what cannot be listed ({exc.strerror})")
            ]
        if empty:
            return None, []
        return None, [Problem(source, "", "missing: every sensor folder needs a sensor.toml")]
    manifest, problems = read_manifest(path, SensorManifest)
    if manifest is None:
        return None, problems
    sensor = Sensor(sensor_id, manifest, directory)
    problems = []
    if "/" in sensor.argv[0] and not os.path.isfile(sensor.argv[0]):
        problems.append(Problem(source, "command", f"expected an executable, found nothing at {sensor.argv[0]}"))
    if sensor.env_file is not None:
        problems += secret_file_problems(source, "env_file", sensor.env_file)
    return sensor, problems
