"""Skills: `skills/<id>/SKILL.md` plus `skill.toml`, resolved to files and argv (seed 000 §4)."""

from __future__ import annotations

import os
from pathlib import Path

from agentd import frozen_value
from agentd.config.parsed import read_manifest
from agentd.edge import UnusableFile, quoted, read_bounded, resolves_inside, utf8_text
from agentd.errors import Problem
from agentd.hashing import canonical_json, sha256_hex
from agentd.records import SkillManifest
from agentd.records.base import command_argv

MANIFEST = "skill.toml"
# Declared by seed 000's skill manifest, used by nothing in agentd: refused, never silently ignored (issue 41).
UNENFORCED = ("subagent_path", "input_schema_id", "output_schema_id")


@frozen_value
class Skill:
    manifest: SkillManifest
    directory: Path
    instructions: str  # SKILL.md as read when the config was loaded: what every bundle uses

    @property
    def skill_id(self) -> str:
        return self.manifest.skill_id

    @property
    def version(self) -> str:
        """What the skill is now: its manifest and its instructions, hashed (skills carry no version
        number of their own; any change to either is a new version)."""
        return sha256_hex(
            canonical_json({"manifest": self.manifest.model_dump(mode="json"), "instructions": self.instructions})
        )[:16]

    @property
    def instructions_path(self) -> Path:
        return self.directory / self.manifest.instruction_path

    def command_argv(self, name: str) -> list[str] | None:
        """The declared command's argv (relative executables resolve in the skill folder)."""
        for command in self.manifest.cli_commands or ():
            if command.name == name:
                argv = command_argv(command.command)  # never empty: the manifest's Command
                head = argv[0]
                if "/" in head and not Path(head).is_absolute():
                    argv = [str(self.directory / head), *argv[1:]]
                return list(argv)
        return None


def hidden(folder: Path) -> bool:
    """A folder named with a leading dot (.git, an editor's) is no skill or sensor: it is passed over."""
    return folder.name.startswith(".")


def load_skills(skills_dir: Path) -> tuple[dict[str, Skill], list[Problem]]:
    """Every skill folder under skills_dir, and every problem found while reading them."""
    skills: dict[str, Skill] = {}
    problems: list[Problem] = []
    if not os.path.isdir(skills_dir):  # False for whatever cannot be one (_folder_problems says which)
        return skills, problems
    for directory in sorted(p for p in skills_dir.iterdir() if p.is_dir() and not hidden(p)):
        skill, found = _load_skill(directory)
        problems.extend(found)
        if skill is not None:
            skills[skill.skill_id] = skill
    return skills, problems


def _load_skill(directory: Path) -> tuple[Skill | None, list[Problem]]:
    manifest_path = directory / MANIFEST
    source = str(manifest_path)
    if not manifest_path.is_file():
        return None, [Problem(source, "", "missing: every skill folder needs a skill.toml")]
    manifest, problems = read_manifest(manifest_path, SkillManifest, skill_id=directory.name)
    if manifest is None:
        return None, problems
    problems = []
    if manifest.skill_id != directory.name:
        problems.append(
            Problem(
                source, "skill_id", f"expected {directory.name!r} (the folder name), found {quoted(manifest.skill_id)}"
            )
        )
    problems += [
        Problem(source, field, f"agentd does not enforce {field}: remove it (seed 000 §3: enforced or removed)")
        for field in UNENFORCED
        if getattr(manifest, field) is not None
    ]
    for field in ("instruction_path", "sensor_path"):
        relative = getattr(manifest, field)
        if relative is None:
            continue
        if not resolves_inside(directory, relative):
            problems.append(Problem(source, field, f"{relative!r} escapes the skill folder (or is a link loop)"))
        elif not os.path.exists(directory / relative):
            problems.append(Problem(source, field, f"{relative!r} does not exist in {directory}"))
    names = [c.name for c in manifest.cli_commands or ()]
    for name in {n for n in names if names.count(n) > 1}:
        problems.append(Problem(source, "cli_commands", f"command {name!r} is declared twice"))
    instructions, problem = _instructions(directory / manifest.instruction_path)
    problems += [Problem(source, "instruction_path", problem)] if problem else []
    return Skill(manifest, directory, instructions), problems


def _instructions(path: Path) -> tuple[str, str | None]:
    """SKILL.md's text ("" where there is none), or why it cannot be read."""
    if not os.path.isfile(path):
        return "", None
    try:
        return utf8_text(read_bounded(path)), None
    except OSError as exc:
        return "", f"cannot read {path}: {exc.strerror or exc}"
    except UnusableFile as exc:
        return "", f"{path}: {exc}"
