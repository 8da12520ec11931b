"""Laying out a VM for one agent (DESIGN §8): `agentd install --agent NAME [--root DIR]`.

Writes /etc/agentd/NAME.toml (from the embedded example; never over an existing one) with the
agent's SOUL.md, PURPOSE.md, schemas, skills and sensors beside it in /etc/agentd/NAME/, the two
unit templates (ExecStart = this agentd), the agentd system user (systemd-sysusers) and the
state dir. Running it again changes nothing. `--root` lays the same tree under another
directory, which is how it is tested. `uninstall` reverses it and keeps the config and the state
unless told to purge.
"""

from __future__ import annotations

import os
import re
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from agentd.errors import InputError
from agentd.resources import data_dir, example_config
from agentd.runner import run_setup_command

UNITS = ("agentd-dispatch@.service", "agentd-sensors@.service")
TEMPLATE_BIN = "/usr/local/bin/agentd"
NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
AGENT_FILES = ("SOUL.md", "PURPOSE.md", "schemas", "scripts")


@dataclass(frozen=True)
class Layout:
    root: Path
    agent: str

    def _in_root(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    @property
    def config(self) -> Path:
        return self._in_root(f"/etc/agentd/{self.agent}.toml")

    @property
    def agent_dir(self) -> Path:
        return self._in_root(f"/etc/agentd/{self.agent}")

    @property
    def state_dir(self) -> Path:
        return self._in_root(f"/var/lib/agentd/{self.agent}")

    @property
    def units_dir(self) -> Path:
        return self._in_root("/etc/systemd/system")

    @property
    def sysusers(self) -> Path:
        return self._in_root("/etc/sysusers.d/agentd.conf")

    @property
    def on_this_system(self) -> bool:
        return self.root == Path("/")


@dataclass
class Report:
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    def note(self, path: Path, changed: bool) -> None:
        (self.changed if changed else self.unchanged).append(str(path))


def check_name(agent: str) -> None:
    if not NAME.match(agent):
        raise InputError(f"--agent: expected a lowercase name like 'arc' (letters, digits, - and _), found {agent!r}")


def install(agent: str, root: Path, agentd_bin: Path) -> Report:
    check_name(agent)
    layout, report = Layout(root, agent), Report()
    _copy_agent_files(layout, report)
    _write_config(layout, report)
    for unit in UNITS:
        text = (data_dir("units") / unit).read_text(encoding="utf-8").replace(TEMPLATE_BIN, str(agentd_bin))
        report.note(layout.units_dir / unit, _write_if_changed(layout.units_dir / unit, text, 0o644))
    sysusers = (data_dir("units") / "agentd.sysusers").read_text(encoding="utf-8")
    report.note(layout.sysusers, _write_if_changed(layout.sysusers, sysusers, 0o644))
    _create_user(layout)
    _make_state_dir(layout, report)
    if layout.on_this_system and shutil.which("systemctl"):
        run_setup_command(["systemctl", "daemon-reload"], check=False)
    return report


def enable_command(agent: str) -> str:
    return f"systemctl enable --now agentd-dispatch@{agent} agentd-sensors@{agent}"


def _copy_agent_files(layout: Layout, report: Report) -> None:
    layout.agent_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    sources = {name: example_config().parent / name for name in AGENT_FILES}
    sources.update(skills=data_dir("skills"), sensors=data_dir("sensors"))
    for name, source in sources.items():
        target = layout.agent_dir / name
        if target.exists():
            report.unchanged.append(str(target))
        elif source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            report.changed.append(str(target))
        else:
            shutil.copy2(source, target)
            report.changed.append(str(target))


def _write_config(layout: Layout, report: Report) -> None:
    if layout.config.exists():  # the operator's, possibly edited: never replaced
        report.kept.append(str(layout.config))
        return
    raw = tomllib.loads(example_config().read_text(encoding="utf-8"))
    agent = layout.agent
    raw["agent"].update(agent_id=agent, internal_name=agent, display_name=agent.capitalize())
    # Relative paths resolve against /etc/agentd, the file's own folder (so --root works too).
    raw["constitution"].update(soul_path=f"{agent}/SOUL.md", purpose_path=f"{agent}/PURPOSE.md")
    raw["paths"] = {
        "state_dir": f"/var/lib/agentd/{agent}",
        "workspace": f"/var/lib/agentd/{agent}/workspace",
        "skills_dir": f"{agent}/skills",
        "sensors_dir": f"{agent}/sensors",
    }
    raw["payload_schemas"] = {key: f"{agent}/{value}" for key, value in raw.get("payload_schemas", {}).items()}
    for adapter in raw.get("adapters", []):
        if adapter.get("kind") == "script" and not Path(adapter["command"]).is_absolute():
            adapter["command"] = f"{agent}/{adapter['command']}"
    header = (
        f"# The identity of agent {agent!r}, written by `agentd install` from agentd's example.\n"
        "# Edit it, then `agentd config check --agent NAME` and restart the two units.\n"
        "# Relative paths resolve against this file's folder (/etc/agentd).\n\n"
    )
    _write_if_changed(layout.config, header + tomli_w.dumps(raw), 0o644)
    report.changed.append(str(layout.config))


def _create_user(layout: Layout) -> None:
    sysusers = shutil.which("systemd-sysusers")
    if layout.on_this_system and os.geteuid() != 0:
        return  # nothing to do without root; the units say User=agentd and systemd will complain clearly
    if sysusers is not None:
        command = [sysusers, str(layout.sysusers)] if layout.on_this_system else [sysusers, f"--root={layout.root}"]
        run_setup_command(command)
    elif layout.on_this_system and _passwd_entry(layout, "agentd") is None:
        run_setup_command(
            [
                "useradd",
                "--system",
                "--home-dir",
                "/var/lib/agentd",
                "--shell",
                "/usr/sbin/nologin",
                "--user-group",
                "agentd",
            ]
        )


def _make_state_dir(layout: Layout, report: Report) -> None:
    existed = layout.state_dir.exists()
    layout.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(layout.state_dir, 0o700)
    entry = _passwd_entry(layout, "agentd")
    if entry is not None and os.geteuid() == 0:
        uid, gid = entry
        for path in (layout.state_dir.parent, layout.state_dir):
            if path.stat().st_uid != uid:
                os.chown(path, uid, gid)
    report.note(layout.state_dir, not existed)


def _passwd_entry(layout: Layout, user: str) -> tuple[int, int] | None:
    passwd = layout.root / "etc" / "passwd"
    if not passwd.is_file():
        return None
    for line in passwd.read_text(encoding="utf-8").splitlines():
        fields = line.split(":")
        if len(fields) > 3 and fields[0] == user:
            return int(fields[2]), int(fields[3])
    return None


def _write_if_changed(path: Path, text: str, mode: int) -> bool:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return True


def uninstall(agent: str, root: Path, *, purge: bool) -> Report:
    """Stop and remove what install wrote; the config and the state stay unless purge."""
    check_name(agent)
    layout, report = Layout(root, agent), Report()
    if layout.on_this_system and shutil.which("systemctl"):
        units = [f"agentd-dispatch@{agent}.service", f"agentd-sensors@{agent}.service"]
        run_setup_command(["systemctl", "disable", "--now", *units], check=False)
    for path in (layout.config, layout.agent_dir, layout.state_dir):
        if not path.exists():
            continue
        if purge:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            report.changed.append(str(path))
        else:
            report.kept.append(str(path))
    others = (
        [p for p in layout.config.parent.glob("*.toml") if p != layout.config] if layout.config.parent.is_dir() else []
    )
    if not others:  # the last agent: the shared templates and the user entry go too
        for path in (*(layout.units_dir / unit for unit in UNITS), layout.sysusers):
            if path.exists():
                path.unlink()
                report.changed.append(str(path))
    if layout.on_this_system and shutil.which("systemctl"):
        run_setup_command(["systemctl", "daemon-reload"], check=False)
    return report
