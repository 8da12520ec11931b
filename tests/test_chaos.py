"""The short form of `make chaos`: real services, at least ten SIGKILLs, every invariant checked."""

from __future__ import annotations

from pathlib import Path

from chaos import run_chaos


def test_chaos_short_form(tmp_path: Path) -> None:
    report = run_chaos(tmp_path, kills=10, seed=2026, deadline_s=40.0)
    assert sum(report.kills.values()) >= 10, report.table()
    assert len(report.poisoned) >= 6, report.table()  # every poisoned surface was exercised
    assert report.failed == [], report.table()
