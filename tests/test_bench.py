"""The benchmark suite stays runnable: its short form runs in `make test` (numbers are not judged
here; targets live in bench/BENCHMARKS.md), its long form is `make bench`."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from support import REPO

MEASUREMENTS = (
    "claim p50 µs (before ANALYZE)",
    "claim p50 µs (after ANALYZE)",
    "enqueue per task µs (validation + transaction)",
    "sensor event µs (new)",
    "sensor event µs (deduped)",
)


@pytest.mark.process
def test_the_quick_benchmark_runs_and_reports_every_measurement() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "run.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    for name in MEASUREMENTS:
        match = re.search(rf"\| {re.escape(name)} \| ([\d,.]+) \|", result.stdout)
        assert match and float(match[1].replace(",", "")) > 0, name


@pytest.mark.slow
def test_the_claim_plan_holds_at_a_million_tasks(tmp_path: object) -> None:
    """The long form of test_store's 100k plan check: ten index seeks, before and after ANALYZE."""
    sys.path.insert(0, str(REPO / "bench"))
    from pathlib import Path

    import run as bench  # type: ignore[import-not-found]

    _, store, clock = bench.fresh(Path(str(tmp_path)))
    bench.bulk_tasks(store.path, 1_000_000, clock.now())
    for analyze in (False, True):
        plan = store.explain_claim(clock.now(), analyze=analyze)
        assert sum("USING INDEX tasks_claim (priority=? AND available_at<?)" in line for line in plan) == 10
    store.close()
