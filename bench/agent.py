"""A throwaway agent for one measurement: its config (the example identity, paths in a temp dir),
its migrated database, the no-op script task, and the environment its CLI runs in."""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import tomllib
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import tomli_w

from agentd.clock import FakeClock, SystemClock, format_ts
from agentd.config import Config
from agentd.records import TaskIntent
from agentd.store import Store, init_state_dir, migrate, open_store
from agentd.work.intake import admit_task
from agentd.work.validation import load_config

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "config" / "identity.example.toml"
ANY_OBJECT = "agent-runtime/payload.any-object/v1"

# The workload of the end-to-end row: the script writes a minimal ok outcome and nothing else.
NOOP_SCRIPT = """#!/bin/sh
printf '{"status":"completed","machine_status":"ok","operator_summary":"ok"}' > "$AGENTD_RESULT_PATH"
"""

Mutation = Callable[[dict[str, Any]], None]


def write_config(directory: Path, mutate: Mutation | None = None) -> Path:
    """A copy of the example config folder under `directory`, state and workspace there too."""
    config_dir = directory / "config"
    if not config_dir.exists():
        shutil.copytree(REPO / "config", config_dir)
    raw = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    raw["paths"] = {
        "state_dir": str(directory / "state"),
        "workspace": str(directory / "workspace"),
        "skills_dir": str(REPO / "skills"),
        "sensors_dir": str(REPO / "sensors"),
    }
    if mutate is not None:
        mutate(raw)
    path = config_dir / "agent.toml"
    path.write_text(tomli_w.dumps(raw), encoding="utf-8")
    return path


def write_noop_script(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "noop.sh"
    script.write_text(NOOP_SCRIPT, encoding="utf-8")
    script.chmod(0o755)
    return script


def with_noop_task_type(script: Path) -> Mutation:
    """Adapter `noop` (kind script) running `script`, and task type `noop` on it."""

    def mutate(raw: dict[str, Any]) -> None:
        raw["adapters"].append({"adapter_id": "noop", "kind": "script", "command": str(script), "timeout_ms": 30_000})
        raw["task_types"].append(
            {
                "task_type": "noop",
                "description": "benchmark: write a minimal ok outcome",
                "payload_schema_id": ANY_OBJECT,
                "default_profile_id": "operator",
                "default_adapter_id": "noop",
            }
        )

    return mutate


def open_agent(config_path: Path, clock: FakeClock | SystemClock) -> tuple[Config, Store]:
    """The config loaded, its state dir made and its database migrated, the store open."""
    config = load_config(config_path)
    init_state_dir(config.paths.state_dir, config.paths.workspace)
    migrate(config.db_path, clock)
    return config, open_store(config.db_path, clock)


def fresh(directory: Path) -> tuple[Config, Store, FakeClock]:
    """A migrated agent on a fake clock, for the store's verbs."""
    clock = FakeClock()
    config, store = open_agent(write_config(directory), clock)
    return config, store, clock


def enqueue(store: Store, config: Config, task_type: str, count: int) -> None:
    """`count` tasks through agentd's own intake (as `agentd task add` would), due now."""
    clock = SystemClock()
    intent = TaskIntent(task_type=task_type, source="bench", payload={})
    for _ in range(count):
        store.enqueue_task(admit_task(intent, config, clock.now(), trusted=True), clock.now())


def bulk_tasks(db_path: Path, count: int, now: datetime) -> None:
    """Benchmark data: `count` tasks; a tenth are priority-1 tasks delayed a day (a backlog in
    front of everything), the rest spread over priorities 2..10, a third of them done."""
    due, later = format_ts(now - timedelta(minutes=1)), format_ts(now + timedelta(days=1))
    with sqlite3.connect(db_path) as raw:
        raw.execute(
            f"""WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count})
                INSERT INTO tasks (task_type, source, priority, requested_profile_id, max_attempts,
                                   available_at, created_at, updated_at, status)
                SELECT 'example', 'bench', CASE WHEN i % 10 = 0 THEN 1 ELSE 2 + i % 9 END, 'operator', 3,
                       CASE WHEN i % 10 = 0 THEN '{later}' ELSE '{due}' END, '{due}', '{due}',
                       CASE WHEN i % 3 = 0 AND i % 10 != 0 THEN 'completed' ELSE 'pending' END
                FROM n"""
        )


def pending_tasks(db_path: Path, count: int, now: datetime) -> None:
    """Benchmark data: `count` pending tasks, all due, spread over priorities 1..10."""
    due = format_ts(now - timedelta(minutes=1))
    with sqlite3.connect(db_path) as raw:
        raw.execute(
            f"""WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count})
                INSERT INTO tasks (task_type, source, priority, requested_profile_id, max_attempts,
                                   available_at, created_at, updated_at)
                SELECT 'example', 'bench', 1 + i % 10, 'operator', 3, '{due}', '{due}', '{due}' FROM n"""
        )


def cli_env(**extra: str) -> dict[str, str]:
    """The environment an agentd CLI process gets: this one without any AGENTD_ override."""
    base = {key: value for key, value in os.environ.items() if not key.startswith("AGENTD_")}
    return {**base, **extra}


def agentd_argv(config_path: Path, *args: str) -> list[str]:
    """`agentd --config CONFIG ARGS…` as an operator runs it: the console script beside this
    interpreter (the venv's), else `python -m agentd`."""
    script = Path(sys.executable).parent / "agentd"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "agentd"]
    return [*command, "--config", str(config_path), *args]
