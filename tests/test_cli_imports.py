"""The CLI starts light (issue #13): a command imports what it uses, so the commands an operator
types all day never load the services' machinery. Structural, not timed: timings live in bench/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import EXAMPLE_CONFIG

pytestmark = pytest.mark.process

# What only the services, `adapters --probe`, `install` and the evidence commands need.
SERVICE_ONLY = (
    "asyncio",
    "httpx",
    "prometheus_client",
    "pydantic_settings",
    "agentd.adapters",
    "agentd.dispatch",
    "agentd.evidence",
    "agentd.install",
    "agentd.metrics",
    "agentd.retention",
    "agentd.runner",
    "agentd.sensor_service",
    "agentd.service",
)

# Runs one command in a fresh interpreter and reports its exit code and every module it imported.
PROBE = """
import contextlib, io, json, sys
from agentd.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:  # --help
        code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def imported_by(*argv: str) -> set[str]:
    """Every module `agentd ARGV…` imported, run in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True, timeout=60)
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["code"] == 0, done.stderr
    return set(result["modules"])


def among(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == name or m.startswith(name + ".") for name in names))


@pytest.mark.parametrize(
    "command",
    [("task", "add", "--type", "example"), ("status",), ("task", "list")],
    ids=lambda command: " ".join(command[:2]),
)
def test_the_everyday_commands_leave_the_services_machinery_alone(state_dir: Path, command: tuple[str, ...]) -> None:
    config = ("--config", str(EXAMPLE_CONFIG))
    subprocess.run([sys.executable, "-m", "agentd", *config, "init"], capture_output=True, check=True, timeout=60)
    assert among(imported_by(*config, *command), SERVICE_ONLY) == []


def test_help_builds_every_parser_without_loading_a_record() -> None:
    loaded = imported_by("--help")
    assert among(loaded, (*SERVICE_ONLY, "jsonschema", "pydantic", "agentd.records", "agentd.config")) == []
