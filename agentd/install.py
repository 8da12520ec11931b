"""Laying out a VM for one agent (DESIGN §8): `agentd install --agent NAME [--root DIR]`.

Writes /etc/agentd/NAME.toml (the embedded example with its comments, edited for NAME and a free
pair of metrics ports; never over an existing one) with the agent's SOUL.md, PURPOSE.md, schemas,
skills and sensors beside it in /etc/agentd/NAME/, the two unit templates (ExecStart = this
agentd), the sysusers.d file naming the agentd system user (applied by systemd-sysusers on the real
root only) and the state dir. Running it again changes nothing. `--root` lays the same tree under
another directory (a staging tree; also how it is tested) and never writes account files there.
`uninstall` reverses it and keeps the config and the state unless told to purge.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from agentd.errors import InputError
from agentd.ports import LOOPBACK, free_pair, other_agents, used_ports
from agentd.resources import data_dir, example_config
from agentd.runner import run_setup_command

UNITS = ("agentd-dispatch@.service", "agentd-sensors@.service")
SYSUSERS_FILE = "etc/sysusers.d/agentd.conf"  # the one source of agentd's users
TEMPLATE_BIN = "/usr/local/bin/agentd"
NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
AGENT_FILES = ("SOUL.md", "PURPOSE.md", "schemas", "scripts")
# PrivateTmp= and ProtectHome= in the units hide these from the services: an agentd in them cannot start.
HIDDEN_FROM_UNITS = tuple(map(Path, ("/tmp", "/var/tmp", "/home", "/root", "/run/user")))
# What ExecStart= takes as one word: no spaces (they split it) and no % (a unit specifier).
UNIT_SAFE_PATH = re.compile(r"/[A-Za-z0-9/._+-]+")
TABLE_HEADER = re.compile(r"^\s*\[\[?\s*(?P<name>[^\[\]#]+?)\s*\]\]?\s*(#.*)?$")
STRING_KEY = re.compile(
    r"""^(?P<lead>\s*(?P<key>[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')\s*=\s*)"""
    r"""(?P<value>"(?:[^"\\]|\\.)*"|'[^']*')(?P<gap>\s*)(?P<comment>#.*)?$"""
)


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
        return self._in_root(f"/{SYSUSERS_FILE}")

    @property
    def on_this_system(self) -> bool:
        return self.root == Path("/")


@dataclass
class Report:
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)  # the metrics pair a new TOML got: dispatch, sensors
    users: str = ""  # how the users of the sysusers.d file come to exist (install never writes /etc/passwd)

    def note(self, path: Path, changed: bool) -> None:
        (self.changed if changed else self.unchanged).append(str(path))


def check_name(agent: str) -> None:
    if not NAME.match(agent):
        raise InputError(f"--agent: expected a lowercase name like 'arc' (letters, digits, - and _), found {agent!r}")


def install(agent: str, root: Path, agentd_bin: Path) -> Report:
    """Everything is decided (name, agentd path, ports, the TOML's text) before the first write, so bad
    input leaves nothing behind."""
    check_name(agent)
    layout, report = Layout(root, agent), Report()
    check_agentd_bin(agentd_bin, layout, report)
    config_text = None if layout.config.exists() else _config_text(layout, report)
    _copy_agent_files(layout, report)
    if config_text is None:  # the operator's, possibly edited: never replaced
        report.kept.append(str(layout.config))
    else:
        _write_if_changed(layout.config, config_text, 0o644)
        report.changed.append(str(layout.config))
    for unit in UNITS:
        text = (data_dir("units") / unit).read_text(encoding="utf-8").replace(TEMPLATE_BIN, str(agentd_bin))
        report.note(layout.units_dir / unit, _write_if_changed(layout.units_dir / unit, text, 0o644))
    sysusers = (data_dir("units") / "agentd.sysusers").read_text(encoding="utf-8")
    report.note(layout.sysusers, _write_if_changed(layout.sysusers, sysusers, 0o644))
    _create_users(layout, report)
    _make_state_dir(layout, report)
    if layout.on_this_system and shutil.which("systemctl"):
        run_setup_command(["systemctl", "daemon-reload"], check=False)
    return report


def check_agentd_bin(agentd_bin: Path, layout: Layout, report: Report) -> None:
    """The units run this agentd, so it must be one they can see and exec. In a staging tree (--root) it
    may be the path agentd will have on the target, so only a warning there.

    :raises InputError: not absolute, not one ExecStart= word, or (on this system) missing or hidden.
    """
    if not UNIT_SAFE_PATH.fullmatch(str(agentd_bin)):
        raise InputError(
            f"--agentd-bin: expected an absolute path of letters, digits and /._+- "
            f"(ExecStart= splits on spaces and expands %), found {str(agentd_bin)!r}"
        )
    hidden = hidden_from_units(agentd_bin)
    if layout.on_this_system and hidden:
        raise InputError(
            f"agentd at {agentd_bin} cannot be started by the units: {hidden}; install agentd system-wide "
            "(e.g. a venv in /opt/agentd) and run that one, or pass --agentd-bin PATH naming it"
        )
    if layout.on_this_system and not (agentd_bin.is_file() and os.access(agentd_bin, os.X_OK)):
        raise InputError(f"--agentd-bin: {agentd_bin} is not an executable file on this system")
    if hidden:
        report.warnings.append(
            f"the units run {agentd_bin}, which they cannot see on a real system: {hidden}; "
            "pass --agentd-bin with the path agentd will have on the target"
        )


def hidden_from_units(agentd_bin: Path) -> str | None:
    """Why the units could not run this agentd, or None: it, the file it links to or the interpreter its
    #! line names (a venv in someone's home) is in a folder PrivateTmp=/ProtectHome= hide."""
    for path in (agentd_bin, agentd_bin.resolve(), _interpreter(agentd_bin)):
        for folder in HIDDEN_FROM_UNITS:
            if path is not None and path.is_relative_to(folder):
                return f"{path} is under {folder}, which the units' PrivateTmp=/ProtectHome= hide from them"
    return None


def _interpreter(script: Path) -> Path | None:
    try:
        with script.open("rb") as file:
            first = file.readline(4096)
    except OSError:
        return None
    words = first[2:].decode("utf-8", "replace").split() if first.startswith(b"#!") else []
    return Path(words[0]) if words else None


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


def _config_text(layout: Layout, report: Report) -> str:
    """The example TOML with its comments, edited in place for this agent and a free pair of metrics
    ports. If editing the text does not give exactly the intended values, the values win: the
    file is written without the comments and the report says so."""
    used, skipped = used_ports(layout.config)
    report.warnings += skipped
    report.ports = list(free_pair(used))
    example = example_config().read_text(encoding="utf-8")
    original = tomllib.loads(example)
    intended = _intended_config(copy.deepcopy(original), layout.agent, report.ports)
    header = _config_header(layout.agent, report.ports)
    text = header + _without_header(_edit_strings(example, _string_edits(original, intended)))
    try:
        if tomllib.loads(text) == intended:
            return text
    except tomllib.TOMLDecodeError:
        pass
    report.warnings.append(f"{layout.config}: written without the example's comments (editing them in failed)")
    return header + "\n" + tomli_w.dumps(intended)


def _intended_config(raw: dict[str, Any], agent: str, ports: list[int]) -> dict[str, Any]:
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
    dispatch, sensors = ports
    raw.setdefault("metrics", {}).update(
        dispatch_listen=f"{LOOPBACK}:{dispatch}", sensors_listen=f"{LOOPBACK}:{sensors}"
    )
    return raw


def _config_header(agent: str, ports: list[int]) -> str:
    return (
        f"# The identity of agent {agent!r}, written by `agentd install` from agentd's example.\n"
        f"# Edit it, then `agentd config check --agent {agent}` and restart the two units.\n"
        "# Relative paths resolve against this file's folder (/etc/agentd).\n"
        f"# Its metrics ports {ports[0]}/{ports[1]} were free and named by no other agent here when install ran\n"
        "# (pairs from 9478/9479 up); `agentd config check` refuses a port another agent's TOML names.\n"
    )


def _without_header(text: str) -> str:
    """The example minus its opening comment block, which describes the example, not this agent."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return "".join(lines[start:])


def _string_edits(old: dict[str, Any], new: dict[str, Any]) -> dict[tuple[str, int], dict[str, str]]:
    """(table, nth occurrence) -> {key: new string} for each string of a top-level table, or of the nth
    [[table]], that differs between the example and what this agent's file should say."""
    edits = {}
    for name, value in new.items():
        before = old.get(name)
        tables, were = (value, before) if isinstance(value, list) and isinstance(before, list) else ([value], [before])
        for index, (table, was) in enumerate(zip(tables, were, strict=False)):  # extra ones: no edit, values differ
            if isinstance(table, dict) and isinstance(was, dict):
                changed = {k: v for k, v in table.items() if isinstance(v, str) and was.get(k) != v}
                if changed:
                    edits[(name, index)] = changed
    return edits


def _edit_strings(text: str, edits: dict[tuple[str, int], dict[str, str]]) -> str:
    """Replace the named `key = "string"` lines in place, keeping their comments. Anything it cannot find
    (a key the example lacks, a value on several lines) stays as it was: the caller compares values."""
    lines, seen, table = [], Counter[str](), ("", 0)
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if header := TABLE_HEADER.match(body):
            table = (header["name"], seen[header["name"]])
            seen[header["name"]] += 1
        elif table in edits and (found := STRING_KEY.match(body)):
            new = edits[table].get(_key_name(found["key"]))
            line = line if new is None else _with_value(found, new) + line[len(body) :]
        lines.append(line)
    return "".join(lines)


def _key_name(key: str) -> str:
    return next(iter(tomllib.loads(f"{key} = 0")))  # TOML's own unquoting


def _with_value(found: re.Match[str], new: str) -> str:
    value = tomli_w.dumps({"v": new}).removeprefix("v = ").rstrip("\n")
    if not found["comment"]:
        return found["lead"] + value
    width = len(found["value"]) + len(found["gap"])  # the comment keeps its column where the value allows
    return found["lead"] + value.ljust(width - 1) + " " + found["comment"]


def user_setup(layout: Layout, *, euid: int, sysusers: str | None) -> tuple[list[str] | None, str]:
    """How the agentd user comes to exist: the command to run now (or None) and what to tell the operator.

    The sysusers.d file is the one source of users. Only on the real root, as root, does install apply
    it (systemd-sysusers changes the account files only if the user is missing). A staging tree never
    gets account files: untarred over /, a passwd written there would replace every account."""
    file, before = f"/{SYSUSERS_FILE}", "before `systemctl enable`"
    if not layout.on_this_system:
        return None, f"none made in a staging tree: on the target, `systemd-sysusers` creates them from {file} {before}"
    if euid != 0:
        return None, f"not root: run `systemd-sysusers {file}` as root {before}"
    if sysusers is None:
        return None, f"systemd-sysusers not found: create the users {file} lists {before}"
    return [sysusers, str(layout.sysusers)], f"`systemd-sysusers {file}` made sure they exist"


def _create_users(layout: Layout, report: Report) -> None:
    command, report.users = user_setup(layout, euid=os.geteuid(), sysusers=shutil.which("systemd-sysusers"))
    if command is not None:
        run_setup_command(command)


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


def uninstall(agent: str, root: Path, *, purge: bool, yes: bool = False) -> Report:
    """Stop and remove what install wrote; the config and the state stay unless purge (which must be
    confirmed). The shared unit templates and sysusers file go with the last agent's TOML.

    :raises InputError: the agent is not installed, or purge without yes; nothing is touched then.
    """
    check_name(agent)
    layout, report = Layout(root, agent), Report()
    own = [path for path in (layout.config, layout.agent_dir, layout.state_dir) if path.exists()]
    if not own:
        raise InputError(f"agent {agent!r} is not installed (no {layout.config})")
    if purge and not yes:
        raise InputError(
            f"--purge deletes {', '.join(map(str, own))} for good (the agent's identity, files, database and "
            "evidence): add --yes to confirm"
        )
    if layout.on_this_system and shutil.which("systemctl"):
        units = [f"agentd-dispatch@{agent}.service", f"agentd-sensors@{agent}.service"]
        run_setup_command(["systemctl", "disable", "--now", *units], check=False)
    for path in own:
        if purge:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            report.changed.append(str(path))
        else:
            report.kept.append(str(path))
    if not other_agents(layout.config):  # the last agent: the shared templates and the user entry go too
        for path in (*(layout.units_dir / unit for unit in UNITS), layout.sysusers):
            if path.exists():
                path.unlink()
                report.changed.append(str(path))
    if layout.on_this_system and shutil.which("systemctl"):
        run_setup_command(["systemctl", "daemon-reload"], check=False)
    return report
