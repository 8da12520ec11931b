"""The view of a fully loaded Config that agentd/cli/fast/cache.py keeps for the fast paths, and the
files and folders it depends on. Built only on the full path (pydantic is loaded there anyway)."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentd.config import Config

PATH_MAX = 4096


def view_of(config: Config) -> dict[str, Any]:
    """What the hot commands read from the config, as plain JSON: names and paths for all of them, and
    for `task add` what its admission checks (agentd/work/intake.py `admit_task`)."""
    from agentd.outlook.status import governance, network_report

    return {
        "config_path": str(config.path),
        "state_dir": str(config.paths.state_dir),
        "agent_id": config.agent.agent_id,
        "database": str(config.db_path),
        "workspace": str(config.paths.workspace),
        "run_as": config.dispatch.run_as,
        "max_pids": config.dispatch.max_pids,
        "max_memory_mb": config.dispatch.max_memory_mb,
        "sensors_run_as": config.sensors.run_as,
        "budget_capped": config.budget.capped,
        "governance": governance(config),  # agentd/outlook/status.py: the full path's own lines
        "network": network_report(config),  # likewise
        "intake": intake_view(config),
    }


def intake_view(config: Config) -> dict[str, Any]:
    from agentd.work.intake import known_models

    return {
        "intent_schema": intent_schema(),
        "task_types": {
            name: {
                "payload_schema_id": spec.payload_schema_id,
                "default_profile_id": spec.default_profile_id,
                "max_attempts": spec.max_attempts,
                "requires_approval": spec.requires_approval,
                "allowed_skill_ids": spec.allowed_skill_ids,
            }
            for name, spec in config.task_types.items()
        },
        "payload_schemas": {
            spec.payload_schema_id: config.payload_schemas[spec.payload_schema_id]
            for spec in config.task_types.values()
        },
        "default_profile_id": config.dispatch.default_profile_id,
        "default_max_attempts": config.dispatch.default_max_attempts,
        "profiles": sorted(config.profiles),
        "adapters": sorted(config.adapters),
        "models": sorted(known_models(config)),
        "skills": sorted(config.skills),
    }


@functools.cache
def intent_schema() -> dict[str, Any]:
    """The JSON Schema of a task intent as the fast `task add` checks it (built once per process; callers
    never change it)."""
    from agentd.records import TaskIntent

    return strict_patterns(inline_refs(TaskIntent.model_json_schema(mode="validation")))  # type: ignore[no-any-return]


def inline_refs(schema: Any, defs: Mapping[str, Any] | None = None) -> Any:
    """The schema with each `{"$ref": "#/$defs/X"}` replaced by X itself (the records' schemas are not
    recursive), so agentd/schema_check.py can compile it."""
    if defs is None and isinstance(schema, dict):
        defs = schema.get("$defs", {})
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and defs is not None:
            return inline_refs(defs[ref.removeprefix("#/$defs/")], defs)
        return {key: inline_refs(value, defs) for key, value in schema.items() if key != "$defs"}
    if isinstance(schema, list):
        return [inline_refs(value, defs) for value in schema]
    return schema


def strict_patterns(schema: Any) -> Any:
    """A pattern's closing `$` as pydantic reads it: the very end of the text. Python's `$` also
    matches before a final newline, so `re.search` alone would say yes to "abc\\n" where pydantic says no."""
    if isinstance(schema, dict):
        return {
            key: _end_anchored(value) if key == "pattern" and isinstance(value, str) else strict_patterns(value)
            for key, value in schema.items()
        }
    if isinstance(schema, list):
        return [strict_patterns(value) for value in schema]
    return schema


def _end_anchored(pattern: str) -> str:
    return pattern[:-1] + r"\Z" if re.search(r"(?<!\\)\$$", pattern) else pattern


def named_paths(config: Config) -> tuple[list[str], list[str]]:
    """Every absolute path the config names (each file it read, each file or folder it checked), and the
    folders whose whole contents it loads (skills and sensors)."""
    found: set[str] = set()
    _collect(config, found, 0)
    from agentd.store.core import AGENT_FILE  # loaded already: this is the full path

    found.add(str(config.paths.state_dir / AGENT_FILE))  # whose state dir it is (store/core.py own_state_dir)
    trees = sorted({str(config.paths.skills_dir), str(config.paths.sensors_dir)})
    return sorted(found), trees


def _collect(value: Any, found: set[str], depth: int) -> None:
    if depth > 64:
        return
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            _collect(getattr(value, field.name), found, depth + 1)
    elif hasattr(value, "model_dump"):
        _collect(value.model_dump(), found, depth + 1)
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect(item, found, depth + 1)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            _collect(item, found, depth + 1)
    elif isinstance(value, PurePath | str):
        text = str(value)
        if text.startswith("/") and "\n" not in text and "\x00" not in text and len(text) < PATH_MAX:
            found.add(str(Path(text)))
