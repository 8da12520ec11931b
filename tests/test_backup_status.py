"""The last good backup where an operator looks (docs/backup-and-archive.md, "Schedule"): `agentd status` (text and
--json, the fast path and the full one), the console's overview and the metrics; overdue past twice `[backup] every`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from rig import Rig
from support import run_main
from test_web_console import logged_in
from webrig import WebRig

from agentd.clock import SystemClock, format_ts
from agentd.outlook.backups import last_backup, record_success
from agentd.outlook.metrics import QueueCollector

HOURLY: Any = lambda raw: raw.__setitem__("backup", {"dest": "backups", "every": "1h"})  # noqa: E731


def test_status_shows_the_last_good_backup_and_calls_it_overdue_past_twice_the_schedule(
    rig_factory: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    rig: Rig = rig_factory(HOURLY)
    taken = SystemClock().now() - timedelta(hours=3)  # `agentd status` reads the system clock
    record_success(rig.config.paths.state_dir, "20261122T070000Z-ABCDEFGHIJ", taken, "/var/backups/a", 12345, 3600.0)
    shown = run_main(capsys, rig.config.path, "status", "--json").json()["backup"]
    assert shown["at"] == format_ts(taken) and shown["bytes"] == 12345 and shown["every_s"] == 3600.0
    assert shown["overdue"] is True  # 3 h old on an hourly schedule
    text = run_main(capsys, rig.config.path, "status").out
    assert "BACKUP   the last good backup is" in text and "more than twice its schedule (1h" in text

    fresh = SystemClock().now()
    record_success(rig.config.paths.state_dir, "20261122T070000Z-ABCDEFGHIJ", fresh, "/b", 10, 7 * 86400.0)
    text = run_main(capsys, rig.config.path, "status").out
    assert "backup   last good" in text and "in /b" in text and "BACKUP" not in text


def test_no_record_and_an_unreadable_one_show_nothing(rig: Rig) -> None:
    now = rig.clock.now()
    assert last_backup(rig.config.paths.state_dir, now) is None
    (rig.config.paths.state_dir / "backup_last.json").write_text("{not json")
    assert last_backup(rig.config.paths.state_dir, now) is None


def test_the_record_is_private(rig: Rig) -> None:
    record_success(rig.config.paths.state_dir, "20261122T070000Z-ABCDEFGHIJ", rig.clock.now(), "/b", 1, None)
    assert (rig.config.paths.state_dir / "backup_last.json").stat().st_mode & 0o777 == 0o600


def test_the_metrics_give_the_time_and_the_schedule(rig_factory: Any) -> None:
    rig: Rig = rig_factory(HOURLY)
    collector = QueueCollector(rig.config.db_path, rig.clock, rig.config)
    try:
        families = {f.name: f.samples[0].value for f in collector.collect() if f.samples and not f.samples[0].labels}
        assert families["agentd_backup_last_success_timestamp_seconds"] == 0.0
        assert families["agentd_backup_interval_seconds"] == 3600.0
        taken = rig.clock.now()
        record_success(rig.config.paths.state_dir, "20261122T070000Z-ABCDEFGHIJ", taken, "/b", 1, 3600.0)
        families = {f.name: f.samples[0].value for f in collector.collect() if f.samples and not f.samples[0].labels}
        assert families["agentd_backup_last_success_timestamp_seconds"] == taken.timestamp()
    finally:
        collector.close()


def test_the_console_overview_shows_the_last_good_backup(web: WebRig) -> None:
    browser, _ = logged_in(web)
    assert "no backup recorded yet" in browser.get("/").text
    state_dir = web.rig.config.paths.state_dir
    record_success(
        state_dir, "20261122T070000Z-ABCDEFGHIJ", web.rig.clock.now() - timedelta(days=30), "/b", 4096, 3600.0
    )
    page = browser.get("/").text
    assert "Overdue, older than twice its schedule" in page and "4,096 bytes, in /b" in page
