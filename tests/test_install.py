"""`agentd install` in a temp root, and the units it writes checked by systemd's own analyzer."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import REPO

from agentd.cli import main
from agentd.validation import load_config


def tree(root: Path) -> dict[str, tuple[int, str]]:
    """Every path under root with its mode and content hash: what a no-op must leave equal."""
    found = {}
    for path in sorted(root.rglob("*")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        found[str(path.relative_to(root))] = (path.stat().st_mode, digest)
    return found


@pytest.fixture
def installed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    root = tmp_path / "root"
    assert main(["install", "--root", str(root), "--agent", "demo"]) == 0
    assert "next: systemctl enable --now agentd-dispatch@demo agentd-sensors@demo" in capsys.readouterr().out
    return root


def test_install_lays_out_the_tree(installed: Path) -> None:
    for path in (
        "etc/agentd/demo.toml",
        "etc/agentd/demo/SOUL.md",
        "etc/agentd/demo/skills/example/SKILL.md",
        "etc/agentd/demo/sensors/inbox/sensor.toml",
        "etc/systemd/system/agentd-dispatch@.service",
        "etc/systemd/system/agentd-sensors@.service",
        "etc/sysusers.d/agentd.conf",
    ):
        assert (installed / path).is_file(), path
    state = installed / "var/lib/agentd/demo"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    passwd = (installed / "etc/passwd").read_text()
    assert re.search(r"^agentd:x:\d+:\d+:agentd agent runtime:/var/lib/agentd:/usr/sbin/nologin$", passwd, re.M)


def test_the_written_config_passes_config_check(installed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_path = installed / "etc/agentd/demo.toml"
    assert main(["config", "check", "--config", str(config_path)]) == 0, capsys.readouterr().err
    config = load_config(config_path)
    assert config.agent.internal_name == "demo"
    assert config.paths.state_dir == Path("/var/lib/agentd/demo")
    assert config.paths.skills_dir == installed / "etc/agentd/demo/skills"


def test_installing_twice_changes_nothing(installed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = tree(installed)
    assert main(["install", "--root", str(installed), "--agent", "demo"]) == 0
    out = capsys.readouterr().out
    assert "nothing to change: already installed" in out and "kept" in out
    assert tree(installed) == before


def test_an_edited_config_is_never_replaced(installed: Path) -> None:
    config = installed / "etc/agentd/demo.toml"
    config.write_text(config.read_text().replace('display_name = "Demo"', 'display_name = "Edited"'))
    assert main(["install", "--root", str(installed), "--agent", "demo"]) == 0
    assert 'display_name = "Edited"' in config.read_text()


def test_uninstall_keeps_config_and_state_unless_purged(installed: Path) -> None:
    assert main(["uninstall", "--root", str(installed), "--agent", "demo"]) == 0
    assert not (installed / "etc/systemd/system/agentd-dispatch@.service").exists()
    assert (installed / "etc/agentd/demo.toml").exists() and (installed / "var/lib/agentd/demo").is_dir()
    assert main(["uninstall", "--root", str(installed), "--agent", "demo", "--purge"]) == 0
    assert not (installed / "etc/agentd/demo.toml").exists() and not (installed / "var/lib/agentd/demo").exists()


def test_a_bad_agent_name_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install", "--root", str(tmp_path), "--agent", "../etc"]) == 2
    assert "expected a lowercase name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def analyzer() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        if os.environ.get("AGENTD_REQUIRE_SYSTEMD_ANALYZE"):
            pytest.fail("systemd-analyze is required here (.ci/run installs it)")
        pytest.skip("systemd-analyze is not installed on this machine")
    return found


@pytest.mark.process
def test_systemd_analyze_verify_passes_on_both_units(installed: Path) -> None:
    units = [
        installed / "etc/systemd/system" / name for name in ("agentd-dispatch@.service", "agentd-sensors@.service")
    ]
    result = subprocess.run(
        [analyzer(), "verify", "--man=no", *map(str, units)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr


def test_the_units_carry_the_operational_contract() -> None:
    for name in ("agentd-dispatch@.service", "agentd-sensors@.service"):
        unit = (REPO / "units" / name).read_text()
        settings = dict(re.findall(r"^(\w+)=(.*)$", unit, re.M))
        assert settings["Type"] == "notify" and settings["NotifyAccess"] == "main"
        assert settings["ExecStartPre"].endswith("migrate") and settings["KillMode"] == "control-group"
        assert settings["Restart"] == "on-failure" and settings["User"] == "agentd"
        for hardening in ("NoNewPrivileges", "ProtectSystem", "PrivateTmp", "ProtectHome", "RestrictAddressFamilies"):
            assert hardening in settings, (name, hardening)
        assert settings["ReadWritePaths"] == "/var/lib/agentd/%i"
    dispatch = dict(re.findall(r"^(\w+)=(.*)$", (REPO / "units/agentd-dispatch@.service").read_text(), re.M))
    defaults: Any = load_config(REPO / "config/identity.example.toml").dispatch
    assert int(dispatch["TimeoutStopSec"].rstrip("s")) > defaults.grace_s + defaults.kill_grace_s
