"""The backup schedule (docs/backup-and-archive.md, "Schedule"): `[backup]` in the identity TOML, validated with a
clear error; `agentd backup --if-due`, which the shipped agentd-backup@NAME.timer runs; the units as installed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pydantic import ValidationError
from rig import Rig
from support import REPO, examples, run_main, write_config
from test_install import analyzer

from agentd.cli import main
from agentd.clock import parse_duration
from agentd.config.backup import BackupSection
from agentd.outlook.backups import LAST_BACKUP


def schedule(dest: Path, every: str = "6h") -> Any:
    return lambda raw: raw.__setitem__("backup", {"dest": str(dest), "every": every})


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ({"dest": "/b", "every": "soon"}, "backup.every: expected a duration like 90s, 15m, 2h or 7d, found 'soon'"),
        ({"dest": "/b", "every": "1m"}, "backup.every: expected a duration from 5m to 30d, found '1m'"),
        ({"every": "6h"}, "backup.dest: expected where to back up to, since backup.every is set"),
        ({"dest": "/b", "when": "6h"}, "backup.when"),
    ],
)
def test_a_bad_backup_section_is_one_clear_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], table: dict[str, str], said: str
) -> None:
    config = write_config(tmp_path, lambda raw: raw.__setitem__("backup", table))
    checked = run_main(capsys, config, "config", "check")
    assert checked.code == 2 and said in checked.err, checked.err


def test_a_relative_dest_is_beside_the_toml(rig_factory: Any) -> None:
    rig: Rig = rig_factory(lambda raw: raw.__setitem__("backup", {"dest": "backups", "every": "1d"}))
    assert rig.config.backup.dest == rig.config.path.parent / "backups" and rig.config.backup.every_s == 86400


def test_if_due_backs_up_when_none_was_taken_then_waits_for_the_schedule(
    rig_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rig: Rig = rig_factory(schedule(tmp_path / "backups"))
    first = run_main(capsys, rig.config.path, "backup", "--if-due", "--json")
    assert first.code == 0 and first.json()["dest"] == str(tmp_path / "backups")
    assert (rig.config.paths.state_dir / LAST_BACKUP).is_file()
    second = run_main(capsys, rig.config.path, "backup", "--if-due")
    assert second.code == 0 and "not due" in second.out
    assert len(list((tmp_path / "backups").glob("backup-*.json"))) == 1


def test_if_due_without_a_schedule_backs_nothing_up(rig: Rig, capsys: pytest.CaptureFixture[str]) -> None:
    quiet = run_main(capsys, rig.config.path, "backup", "--if-due")
    assert quiet.code == 0 and "nothing scheduled" in quiet.err
    assert not (rig.config.paths.state_dir / LAST_BACKUP).exists()
    refused = run_main(capsys, rig.config.path, "backup")
    assert refused.code == 2 and "give DEST, or set [backup] dest" in refused.err


def test_the_backup_units_carry_their_contract() -> None:
    service = (REPO / "units" / "agentd-backup@.service").read_text()
    settings = dict(re.findall(r"^(\w+)=(.*)$", service, re.M))
    assert settings["Type"] == "oneshot" and settings["User"] == "agentd-%i"
    assert settings["ExecStart"].endswith("--config /etc/agentd/%i.toml backup --if-due")
    assert settings["ReadWritePaths"] == "/var/lib/agentd/%i" and settings["ProtectSystem"] == "strict"
    assert settings["CapabilityBoundingSet"] == "" and settings["PrivateNetwork"] == "yes"
    timer = dict(re.findall(r"^(\w+)=(.*)$", (REPO / "units" / "agentd-backup@.timer").read_text(), re.M))
    assert timer["OnUnitInactiveSec"] == "5min" and timer["WantedBy"] == "timers.target"


@pytest.fixture
def installed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    root = tmp_path / "root"
    assert main(["install", "--root", str(root), "--agent", "demo"]) == 0
    capsys.readouterr()
    return root


@pytest.mark.process
def test_systemd_analyze_verify_passes_on_the_backup_units(installed: Path) -> None:
    units = [installed / "etc/systemd/system" / name for name in ("agentd-backup@.service", "agentd-backup@.timer")]
    result = subprocess.run(
        [analyzer(), "verify", "--man=no", *map(str, units)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr


@pytest.mark.process
def test_the_backup_units_exposure_stays_at_the_measured_level(installed: Path) -> None:
    """`systemd-analyze security --offline=yes` rates the backup service 0.6: no capability, no network."""
    path = installed / "etc/systemd/system" / "agentd-backup@demo.service"
    result = subprocess.run(
        [analyzer(), "security", "--offline=yes", "--no-pager", "--threshold=6", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout[-400:] + result.stderr


def test_uninstall_removes_the_backup_units(installed: Path) -> None:
    assert main(["uninstall", "--root", str(installed), "--agent", "demo", "--yes"]) == 0
    assert not (installed / "etc/systemd/system/agentd-backup@.timer").exists()


@given(every=st.one_of(st.text(max_size=12), st.from_regex(r"\A[0-9]{1,6}(\.[0-9]{1,2})?[smhd]?\Z")))
@hypothesis_settings(max_examples=examples(300))
def test_every_is_a_duration_from_5m_to_30d_or_a_one_line_refusal(every: str) -> None:
    try:
        seconds = parse_duration(every, "s")
    except ValueError:
        seconds = None
    try:
        section = BackupSection(dest="/b", every=every)
    except ValidationError as exc:
        assert seconds is None or not 300 <= seconds <= 30 * 86400, every
        [error] = exc.errors()
        assert str(error["msg"]).startswith("Value error, expected a duration"), error
        return
    assert seconds is not None and 300 <= seconds <= 30 * 86400 and section.every_s == seconds
