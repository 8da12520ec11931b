"""The config's cached view is keyed on every file the full load reads (issue 44, finding 3): a payload
schema edited or deleted after the view was written made the fast `task add` judge payloads by the old
one, while the API and the dispatcher used the new. Each file the load opens is found by watching the
load itself (an audit hook in a child process), not by asking the code that builds the key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rig import Rig

from agentd.cli.fast.cache import read_view, write_view

# Prints every file a full load opened, and what the view's key covers (its paths and its trees).
WATCH_THE_LOAD = """
import json, os, sys
from pathlib import Path
opened = set()
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)) and (args[2] & (os.O_WRONLY | os.O_RDWR)) == 0:
        opened.add(os.path.abspath(os.fsdecode(args[0])))
from agentd.work.validation import load_config
from agentd.cli.fast.view import named_paths
sys.addaudithook(hook)
config = load_config(Path(sys.argv[1]))
sys.addaudithook(lambda *_: None)
paths, trees = named_paths(config)
print(json.dumps({"opened": sorted(opened), "paths": paths, "trees": trees}))
"""
NOT_CONFIG = (sys.prefix, sys.base_prefix, "/usr/lib/python", "/usr/share/zoneinfo", "/etc/localtime", "/proc/")


def watched_load(config: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    done = subprocess.run(
        [sys.executable, "-c", WATCH_THE_LOAD, str(config)], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return found


def config_files_opened(rig: Rig) -> list[str]:
    """What the full load opened that is the agent's config, not Python's or agentd's own code."""
    watched = watched_load(rig.config.path)
    package = str(Path(__import__("agentd").__file__).parent)
    return [p for p in watched["opened"] if not p.startswith((*NOT_CONFIG, package)) and "__pycache__" not in p]


def with_secrets(tmp_path: Path) -> Callable[[dict[str, Any]], None]:
    """A config that names more files: an adapter's env_file and a command handler's."""
    secrets = tmp_path / "config" / "secrets.env"

    def mutate(raw: dict[str, Any]) -> None:
        secrets.write_text("TOKEN=t\n")
        secrets.chmod(0o600)
        raw["adapters"][0]["env_file"] = str(secrets)
        raw["message_handlers"] = [
            {"handler_id": "cmd", "kind": "command", "argv": ["/bin/true"], "env_file": str(secrets)}
        ]

    return mutate


@pytest.mark.process
def test_every_file_the_full_load_opens_is_in_the_views_key(rig_factory: Callable[..., Rig], tmp_path: Path) -> None:
    rig = rig_factory(with_secrets(tmp_path))
    watched = watched_load(rig.config.path)
    keyed = set(watched["paths"]) | {str(rig.config.path)}
    opened = config_files_opened(rig)
    assert any(p.endswith("example.payload.json") for p in opened), "the load reads the payload schemas"
    unkeyed = [p for p in opened if p not in keyed and not any(p.startswith(t + os.sep) for t in watched["trees"])]
    assert unkeyed == [], "files the load read that the view's key does not cover"


@pytest.mark.process
@pytest.mark.parametrize("change", ["edited", "deleted"])
def test_each_file_the_load_reads_makes_the_view_stale_when_it_changes(
    rig_factory: Callable[..., Rig], tmp_path: Path, change: str
) -> None:
    """Every file of this agent's own config folder the load opened (the TOML, SOUL.md, PURPOSE.md, the
    payload schemas, the env_file): changed, the view is not used; put back, it is again."""
    rig = rig_factory(with_secrets(tmp_path))
    mine = [Path(p) for p in config_files_opened(rig) if Path(p).is_relative_to(rig.config.path.parent)]
    assert len(mine) >= 6, mine  # the TOML, SOUL.md, PURPOSE.md, two payload schemas, secrets.env
    write_view(rig.config)
    for path in mine:
        before, mode = path.read_bytes(), path.stat().st_mode
        if change == "edited":
            path.write_bytes(before + b" ")
        else:
            path.unlink()
        assert read_view(rig.config.path) is None, f"{path} {change}: the view is stale"
        path.write_bytes(before)
        path.chmod(mode)  # as it was (a new file gets the umask's mode)
        assert read_view(rig.config.path) is not None, f"{path} as it was: the view holds again"


def fast_task_add(config: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """`agentd task add` in a child with this test's environment (the view's key holds its AGENTD_*)."""
    command = [sys.executable, "-m", "agentd", "--config", str(config), "task", "add", "--type", "example", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@pytest.mark.process
def test_task_add_judges_a_payload_by_the_schema_as_it_is_now(rig: Rig) -> None:
    """The schema tightened after the view was written: `task add` refuses what the new one refuses,
    as the full path, the API and the dispatcher do; deleted, the config itself is refused."""
    schema = rig.config.path.parent / "schemas" / "example.payload.json"
    assert fast_task_add(rig.config.path, "--payload", '{"note": "long enough"}').returncode == 0  # leaves a view
    assert read_view(rig.config.path) is not None
    tightened = json.loads(schema.read_text())
    tightened["properties"]["note"]["maxLength"] = 3
    schema.write_text(json.dumps(tightened))
    refused = fast_task_add(rig.config.path, "--payload", '{"note": "long enough"}')
    assert refused.returncode == 2, refused.stdout
    assert "payload.note: 'long enough' is too long (schema example.payload/v1)" in refused.stderr
    schema.unlink()
    gone = fast_task_add(rig.config.path, "--payload", '{"note": "ok"}')
    assert gone.returncode == 2 and "expected a JSON Schema file, found nothing at" in gone.stderr
    assert [t.subject for t in rig.store.list_tasks()] == [None], "only the first was written"
