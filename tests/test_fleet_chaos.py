"""The short form of `make fleet-chaos` (`make test-slow`; CI runs the long form): three real agents on one
real PostgreSQL, SIGKILLs, partitions and a PostgreSQL restart mid-run, every invariant checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from fleet_chaos import run_fleet_chaos

pytestmark = [pytest.mark.process, pytest.mark.slow]


@pytest.mark.timeout(300)
def test_fleet_chaos_short_form(tmp_path: Path) -> None:
    # the kill phase ends at 6 kills; its deadline only bounds a machine too slow to reach them
    report = run_fleet_chaos(tmp_path, tasks=45, kills=6, seed=2026, deadline_s=90.0, task_s=(0.02, 0.2))
    assert report.kills >= 6 and report.postgres_restarts == 1 and report.partitions == 3, report.table()
    assert report.refused_writes > 0, report.table()  # stale agents did write, and were refused
    assert sum(report.fleet.values()) == 45, report.table()
    assert report.failed == [], report.table()
