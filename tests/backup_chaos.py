"""Chaos for backups (docs/backup-and-archive.md): a real dispatcher drains script tasks while `agentd backup` runs
again and again into one folder and into archive files, SIGKILLed at random moments (and the dispatcher with it,
now and then); then every backup that was published restores onto a fresh state dir, clean, its events a prefix
of the agent's own chain, and nothing a killed backup left is accepted.

    python tests/backup_chaos.py --kills 20 --seed 7 [--keep DIR]

`make chaos` runs it beside tests/chaos.py; tests/test_backup_process.py runs a short form.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import agent_config, new_agent

from agentd.clock import SystemClock
from agentd.store import open_store

ENV = {**os.environ, "AGENTD_DISPATCH__BACKOFF_BASE_S": "0", "AGENTD_DISPATCH__GRACE_S": "1"}


@dataclass
class Report:
    kills: int = 0
    dispatcher_kills: int = 0
    published: list[str] = field(default_factory=list)
    restored: int = 0
    failed: list[str] = field(default_factory=list)

    def table(self) -> str:
        return (
            f"backups SIGKILLed {self.kills}, dispatcher SIGKILLed {self.dispatcher_kills}, "
            f"backups published {len(self.published)}, restored clean {self.restored}, failures {len(self.failed)}"
            + "".join(f"\n  FAILED {line}" for line in self.failed)
        )


def agentd(config: Path, *args: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "agentd", "--config", str(config), *args]
    return subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def ran(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "agentd", "--config", str(config), *args]
    return subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=300, check=False)


def run_backup_chaos(root: Path, *, kills: int, seed: int, tasks: int = 400) -> Report:
    rng, report = random.Random(seed), Report()
    config, store = new_agent(root / "agent", tasks)
    folder = root / "backups"
    dispatcher = agentd(config, "dispatch")
    try:
        while report.kills < kills:
            dest = folder if rng.random() < 0.7 else root / f"archive-{report.kills}.tar.gz"
            backup = agentd(config, "backup", str(dest))
            time.sleep(rng.uniform(0.2, 1.5))
            if backup.poll() is None:
                backup.send_signal(signal.SIGKILL)
                report.kills += 1
            backup.wait(timeout=300)
            if rng.random() < 0.35:  # the dispatcher dies too, mid-drain, and comes back (its boot sweep runs)
                dispatcher.send_signal(signal.SIGKILL)
                dispatcher.wait(timeout=30)
                report.dispatcher_kills += 1
                dispatcher = agentd(config, "dispatch")
        final = ran(config, "backup", str(folder), "--json")
        if final.returncode != 0:
            report.failed.append(f"the backup after the kills: {final.stderr.strip()}")
    finally:
        dispatcher.send_signal(signal.SIGTERM)
        dispatcher.wait(timeout=60)
    chain = [(e.sequence, e.type) for e in store.read_events(limit=10_000_000)]
    store.close()
    check_every_published(root, config, folder, chain, report)
    return report


def check_every_published(root: Path, config: Path, folder: Path, chain: list[tuple[int, str]], report: Report) -> None:
    """Each published backup (the folder's manifests, each archive that exists) restores clean onto a fresh state
    dir, its events a prefix of the agent's chain; what a kill left (no manifest) is refused."""
    sources = sorted(folder.glob("backup-*.json")) + sorted(root.glob("archive-*.tar.gz"))
    for index, source in enumerate(sources):
        report.published.append(source.name)
        fresh_dir = root / f"fresh-{index}"
        fresh_dir.mkdir()
        fresh = agent_config(fresh_dir)
        restored = ran(fresh, "restore", str(source), "--json")
        if restored.returncode != 0:
            report.failed.append(f"restore {source.name}: exit {restored.returncode}: {restored.stderr.strip()[:300]}")
            continue
        head = json.loads(restored.stdout)["chain_head"]["sequence"]
        copy = open_store(fresh_dir / "state" / "agentd.db", SystemClock(), readonly=True)
        try:
            events = [(e.sequence, e.type) for e in copy.read_events(limit=10_000_000)]
        finally:
            copy.close()
        if events != chain[:head]:
            report.failed.append(f"restore {source.name}: its events are not the chain's first {head}")
            continue
        report.restored += 1
    for leftover in root.glob(".archive-*.partial-*"):
        answer = ran(config, "restore", str(leftover))
        if answer.returncode != 2:
            report.failed.append(f"a killed archive {leftover.name} was not refused (exit {answer.returncode})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=54)
    parser.add_argument("--tasks", type=int, default=600)
    parser.add_argument("--keep", type=Path, help="run in DIR and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentd-backup-chaos-") as scratch:
        root = args.keep or Path(scratch)
        report = run_backup_chaos(root, kills=args.kills, seed=args.seed, tasks=args.tasks)
    print(report.table())
    return 1 if report.failed or report.kills < args.kills else 0


if __name__ == "__main__":
    raise SystemExit(main())
