"""The backup row (issue 54): `agentd backup` of an agent whose dispatcher left N no-op attempts' sealed evidence,
first into an empty folder, then again into the same folder (incremental: the sealed folders are there already),
and `agentd restore` of that backup onto a fresh state dir (the RTO docs/backup-and-archive.md quotes)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from bench.agent import agentd_argv, cli_env, write_config
from bench.endtoend import agentd_dispatch


def drained_agent(directory: Path, attempts: int) -> Path:
    """An agent whose `agentd dispatch --until-idle` ran `attempts` no-op tasks to completion: its TOML."""
    return agentd_dispatch(directory, attempts).config_path


def timed(argv: list[str], log: Path) -> float:
    with open(log, "ab") as out:
        started = time.perf_counter()
        done = subprocess.run(argv, env=cli_env(), stdout=out, stderr=subprocess.STDOUT, check=False)
        elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[-3:])} exited {done.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
        )
    return elapsed


def backup_and_restore_s(config_path: Path, folder: Path) -> tuple[float, float, float]:
    """Seconds of the first backup into an empty folder, of the second into the same folder, and of the restore
    of that backup onto a fresh state dir (each the whole command, start-up included)."""
    folder.mkdir(parents=True, exist_ok=True)
    dest, log = folder / "backups", folder / "backup.log"
    first = timed(agentd_argv(config_path, "backup", str(dest)), log)
    second = timed(agentd_argv(config_path, "backup", str(dest)), log)
    restored = write_config(folder / "restored")  # the same agent on a fresh machine: another state dir
    restore = timed(agentd_argv(restored, "restore", str(dest)), log)
    shutil.rmtree(folder / "restored" / "state", ignore_errors=True)
    shutil.rmtree(dest, ignore_errors=True)
    return first, second, restore
