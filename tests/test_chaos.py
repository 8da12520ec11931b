"""The short form of `make chaos` (`make test-slow`, which CI runs): real services, at least ten SIGKILLs,
every invariant checked."""

from __future__ import annotations

from pathlib import Path

import privsep
import pytest
from chaos import run_chaos

pytestmark = [pytest.mark.process, pytest.mark.slow]  # `make test-slow`; CI runs it


@pytest.mark.timeout(240)
def test_chaos_short_form(tmp_path: Path) -> None:
    report = run_chaos(tmp_path, kills=10, seed=2026, deadline_s=40.0, pace_s=(0.2, 1.0), task_s=(0.02, 0.25))
    assert sum(report.kills.values()) >= 10, report.table()
    assert len(report.poisoned) >= 6, report.table()  # every poisoned surface was exercised
    assert report.failed == [], report.table()
    if privsep.missing() is None:  # behind the boundary, an attempt tried to act as its operator, and failed
        assert report.poisoned["the agent as its operator"] >= 1, report.table()
        assert report.poisoned["the run user at the console"] >= 20, report.table()  # its floods, closed early
