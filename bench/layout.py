"""What the lighter evidence layout issue #43 asked for would save, measured apart (docs/decisions.md,
"Performance, round four", second part): the folder and file operations one no-op script attempt makes
today, against the same attempt in one evidence folder with at most five files and its prompt linked
into the run folder, each done by this script alone (no agentd), `--attempts` times in a folder on the
disk to measure. Not a `make bench` row: the decision it informed is taken.

    .venv/bin/python bench/layout.py /var/lib/agentd-scratch /dev/shm
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PROMPT, SMALL, RESULT, TRACE, MANIFEST = 2000, 100, 60, 300, 3000


def _write(path: str, size: int) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write("x" * size)


def today(root: str, n: int) -> None:
    """attempts/<task>/<attempt>/ and runs/<attempt>/home/: 4 folders, 9 files, the manifest renamed."""
    evidence = f"{root}/attempts/{n}"
    os.mkdir(evidence)
    evidence += "/A"
    os.mkdir(evidence)
    run = f"{root}/runs/A{n}"
    os.mkdir(run)
    os.mkdir(f"{run}/home")
    for name in ("prompt.md", "stdin.json", "stdout.log", "stderr.log"):
        _write(f"{evidence}/{name}", SMALL)
    _write(f"{run}/prompt.md", PROMPT)
    _write(f"{run}/result.json", RESULT)
    _write(f"{evidence}/result.json", RESULT)
    _write(f"{evidence}/action_trace.jsonl", TRACE)
    _write(f"{evidence}/manifest.json.tmp", MANIFEST)
    os.rename(f"{evidence}/manifest.json.tmp", f"{evidence}/manifest.json")
    os.rmdir(f"{run}/home")
    os.unlink(f"{run}/prompt.md")
    os.unlink(f"{run}/result.json")
    os.rmdir(run)


def lighter(root: str, n: int) -> None:
    """attempts/<attempt>/ and runs/<attempt>/: 2 folders, 5 files, the prompt written once and linked."""
    evidence = f"{root}/attempts/A{n}"
    os.mkdir(evidence)
    run = f"{root}/runs/A{n}"
    os.mkdir(run)
    _write(f"{evidence}/prompt.md", PROMPT)
    os.link(f"{evidence}/prompt.md", f"{run}/prompt.md")
    for name in ("stdout.log", "stderr.log"):
        _write(f"{evidence}/{name}", SMALL)
    _write(f"{run}/result.json", RESULT)
    _write(f"{evidence}/result.json", RESULT)
    _write(f"{evidence}/manifest.json.tmp", MANIFEST)
    os.rename(f"{evidence}/manifest.json.tmp", f"{evidence}/manifest.json")
    os.unlink(f"{run}/prompt.md")
    os.unlink(f"{run}/result.json")
    os.rmdir(run)


def per_attempt_us(layout: Callable[[str, int], None], under: Path, attempts: int) -> float:
    root = tempfile.mkdtemp(prefix="agentd-layout-", dir=under)
    try:
        os.mkdir(f"{root}/attempts")
        os.mkdir(f"{root}/runs")
        started = time.perf_counter()
        for n in range(attempts):
            layout(root, n)
        return (time.perf_counter() - started) / attempts * 1e6
    finally:
        shutil.rmtree(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="where to measure (one per disk)")
    parser.add_argument("--attempts", type=int, default=300)
    parser.add_argument("--pairs", type=int, default=5, help="alternated repetitions")
    args = parser.parse_args()
    for folder in args.folders:
        found: dict[str, list[float]] = {"today": [], "lighter": []}
        for _ in range(args.pairs):
            for name, layout in (("today", today), ("lighter", lighter)):
                found[name].append(per_attempt_us(layout, folder, args.attempts))
        medians = {name: statistics.median(values) for name, values in found.items()}
        print(f"{folder}: today {medians['today']:,.0f} us, lighter {medians['lighter']:,.0f} us per attempt")


if __name__ == "__main__":
    main()
