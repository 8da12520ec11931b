"""The CLI starts light (issue #13): a command imports what it uses, so the commands an operator
types all day never load the services' machinery. Structural, not timed: timings live in bench/."""

from __future__ import annotations

import json
import os
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
    "agentd.services.dispatch",
    "agentd.evidence",
    "agentd.install",
    "agentd.outlook.metrics",
    "agentd.evidence.retention",
    "agentd.process.runner",
    "agentd.services.sensing",
    "agentd.services.shell",
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
    [("task", "add", "--type", "example", "--payload", '{"note": "hi"}'), ("status",), ("task", "list")],
    ids=lambda command: " ".join(command[:2]),
)
def test_the_everyday_commands_leave_the_services_machinery_alone(state_dir: Path, command: tuple[str, ...]) -> None:
    """Nor do they load jsonschema (~60–100 ms to import): the example config's payload schemas and
    a payload that fits them are judged by agentd's compiled checks; jsonschema only names what is
    wrong."""
    config = ("--config", str(EXAMPLE_CONFIG))
    subprocess.run([sys.executable, "-m", "agentd", *config, "init"], capture_output=True, check=True, timeout=60)
    loaded = imported_by(*config, *command)
    assert among(loaded, SERVICE_ONLY) == []
    assert among(loaded, ("jsonschema",)) == []
    # Nor ctypes (a service's start clears its capabilities with it) or subprocess; only `task add`, which
    # rings the dispatcher's doorbell, opens a socket.
    assert among(loaded, ("ctypes", "subprocess", *(("socket",) if command[1:2] != ("add",) else ()))) == []


def test_help_builds_every_parser_without_loading_a_record() -> None:
    loaded = imported_by("--help")
    assert among(loaded, (*SERVICE_ONLY, "jsonschema", "pydantic", "agentd.records", "agentd.config")) == []


def test_no_pydantic_plugin_installed_beside_agentd_is_loaded(state_dir: Path, tmp_path: Path) -> None:
    """A package in the same environment that registers a pydantic plugin never sees agentd's
    records (and agentd never pays for looking: every package's metadata would be read)."""
    site = tmp_path / "site"
    (site / "spy_plugin-1.0.dist-info").mkdir(parents=True)
    (site / "spy_plugin-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: spy-plugin\nVersion: 1.0\n"
    )
    (site / "spy_plugin-1.0.dist-info" / "entry_points.txt").write_text("[pydantic]\nspy = spy_plugin:plugin\n")
    loaded = tmp_path / "spy-loaded"
    (site / "spy_plugin.py").write_text(
        f"open({str(loaded)!r}, 'w').close()\n"
        "class Spy:\n"
        "    def new_schema_validator(self, *args, **kwargs):\n"
        "        return None, None, None\n"
        "plugin = Spy()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    control = "from pydantic import BaseModel\nclass M(BaseModel):\n    a: int\nM(a=1)\n"
    subprocess.run([sys.executable, "-c", control], env=env, capture_output=True, check=True, timeout=60)
    assert loaded.exists(), "the spy plugin is found by pydantic itself (the test's setup works)"
    loaded.unlink()
    config = ("--config", str(EXAMPLE_CONFIG))
    for command in (("init",), ("status",)):
        done = subprocess.run(
            [sys.executable, "-m", "agentd", *config, *command], env=env, capture_output=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
    assert not loaded.exists(), "agentd let a pydantic plugin in"


def test_a_run_that_sends_nothing_and_serves_no_metrics_loads_neither_http_nor_prometheus(state_dir: Path) -> None:
    """httpx (~35 ms) is loaded by the process that sends a webhook, calls ollama or probes an endpoint;
    prometheus_client by the one that serves /metrics. A one-shot drain of an empty queue does neither
    (docs/decisions.md, "Start-up"); with --metrics it serves, so it loads prometheus_client."""
    config = ("--config", str(EXAMPLE_CONFIG))
    subprocess.run([sys.executable, "-m", "agentd", *config, "init"], capture_output=True, check=True, timeout=60)
    drained = imported_by(*config, "dispatch", "--until-idle")
    assert "agentd.services.dispatch" in drained  # the dispatcher itself did run
    assert among(drained, ("httpx", "prometheus_client")) == []
    assert among(drained, ("agentd.gateway.server", "h11")) == []  # made for the first attempt that uses it
    assert among(imported_by(*config, "dispatch", "--until-idle", "--metrics"), ("prometheus_client",))
