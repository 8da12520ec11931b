"""Helpers the tests share: config variants in a temp dir and an in-process CLI runner."""

from __future__ import annotations

import json
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_CONFIG = REPO / "config" / "identity.example.toml"
SHARED = REPO.parent / "shared"


def example_raw() -> dict[str, Any]:
    return tomllib.loads(EXAMPLE_CONFIG.read_text())


def write_config(
    directory: Path,
    mutate: Callable[[dict[str, Any]], None] | None = None,
    *,
    text: str | None = None,
    name: str = "agent.toml",
) -> Path:
    """A copy of the example config folder in `directory`, its TOML changed by `mutate`.

    State and workspace go under `directory`; skills and sensors stay the repository's.
    """
    config_dir = directory / "config"
    if not config_dir.exists():
        shutil.copytree(REPO / "config", config_dir)
    path = config_dir / name
    if text is not None:
        path.write_text(text)
        return path
    raw = example_raw()
    raw["paths"] = {
        "state_dir": str(directory / "state"),
        "workspace": str(directory / "workspace"),
        "skills_dir": str(REPO / "skills"),
        "sensors_dir": str(REPO / "sensors"),
    }
    if mutate is not None:
        mutate(raw)
    path.write_text(tomli_w.dumps(raw))
    return path


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


ADAPTERS = REPO / "tests" / "adapters"


def agent_config(directory: Path, mutate: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """The example config with test adapters and task types added:

    - task type `example` on adapter `script` (tests/adapters/complete.sh): completes with a report
    - task type `scripted` on adapter `scripted` (tests/adapters/scripted.py): does what its payload says
    - task type `flaky` on adapter `fails` (tests/adapters/always_fails.sh): always a retryable failure
    """

    def add(raw: dict[str, Any]) -> None:
        raw["adapters"] = [
            {"adapter_id": "script", "kind": "script", "command": str(ADAPTERS / "complete.sh"), "timeout_ms": 30_000},
            {
                "adapter_id": "scripted",
                "kind": "script",
                "command": str(ADAPTERS / "scripted.py"),
                "timeout_ms": 30_000,
            },
            {
                "adapter_id": "fails",
                "kind": "script",
                "command": str(ADAPTERS / "always_fails.sh"),
                "timeout_ms": 30_000,
            },
        ]
        raw["task_types"] += [
            {
                "task_type": "scripted",
                "payload_schema_id": "agent-runtime/payload.any-object/v1",
                "default_profile_id": "operator",
                "default_adapter_id": "scripted",
                "artifact_roles": ["output"],
            },
            {
                "task_type": "flaky",
                "payload_schema_id": "agent-runtime/payload.any-object/v1",
                "default_profile_id": "operator",
                "default_adapter_id": "fails",
            },
        ]
        raw["dispatch"].update(kill_grace_s=1.0, lock_heartbeat_s=1.0)
        if mutate is not None:
            mutate(raw)

    return write_config(directory, add)
