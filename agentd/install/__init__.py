"""Laying out a VM for an agent: its TOML, users, folders and units.

May import: records, config, gateway, process, store, work, evidence, outlook, adapters, attempt, control, archive,
services, web, backup.

May call: nothing.

Laying out a VM for one agent (docs/install-and-deploy.md, "Deploy on a VM"):
`agentd install --agent NAME [--root DIR]`.

Writes /etc/agentd/NAME.toml (the embedded example with its comments, edited for NAME, its run and
sensor users, a free pair of metrics ports and a free console port; never over an existing one) with
the agent's SOUL.md, PURPOSE.md, schemas, skills and sensors beside it in /etc/agentd/NAME/, the three
unit templates (dispatch, sensors, web; ExecStart = this agentd), the agent's three users
(/etc/sysusers.d/agentd-NAME.conf: `agentd-NAME` runs the services and owns the state dir,
`agentd-NAME-run` runs attempts and owns only the workspace, `agentd-NAME-sns` runs sensors and owns
only its home, where each sensor keeps its folder) and their folders (/etc/tmpfiles.d/agentd-NAME.conf).
Running it again changes nothing. `--root` lays the same
tree under another directory (a staging tree: nothing is applied to this system's accounts or
folders); `uninstall` reverses it and keeps the config and the state unless told to purge.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from agentd import frozen_value
from agentd.config.parsed import UnusableFile, read_toml
from agentd.edge import quoted
from agentd.errors import AgentdError, InputError
from agentd.install.ports import free_pair, free_port, other_agents, port_is_free, used_ports
from agentd.install.sockets import SERVICES, socket_names, socket_units
from agentd.install.toml_edit import Placement, agent_toml
from agentd.process.files import WORKSPACE_MODE, remove_tree
from agentd.process.privilege import not_in_own_group
from agentd.process.runner import run_setup_command
from agentd.resources import data_dir, example_config

UNITS = ("agentd-dispatch@.service", "agentd-sensors@.service", "agentd-web@.service")
# The scheduled backup (docs/backup-and-archive.md): shipped beside the services, started by the operator's own
# `systemctl enable --now agentd-backup@NAME.timer`, never restarted with them.
BACKUP_UNITS = ("agentd-backup@.service", "agentd-backup@.timer")
TEMPLATE_BIN = "/usr/local/bin/agentd"
TEMPLATE_DOCS = "/usr/local/share/doc/agentd"  # in the templates' Documentation=file:…; install writes its own
# agentd-NAME-run (the longest of its users) must fit the 32 characters of a user name.
NAME = re.compile(r"^[a-z][a-z0-9_-]{0,20}$")
AGENT_FILES = ("SOUL.md", "PURPOSE.md", "schemas", "scripts")
# PrivateTmp= and ProtectHome= in the units hide these from the services: an agentd in them cannot start.
HIDDEN_FROM_UNITS = tuple(map(Path, ("/tmp", "/var/tmp", "/home", "/root", "/run/user")))
# What ExecStart= takes as one word: no spaces (they split it) and no % (a unit specifier).
UNIT_SAFE_PATH = re.compile(r"/[A-Za-z0-9/._+-]+")


@frozen_value
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
        return self._in_root(self.placement.state_dir)

    @property
    def units_dir(self) -> Path:
        return self._in_root("/etc/systemd/system")

    @property
    def sysusers(self) -> Path:
        return self._in_root(f"/etc/sysusers.d/agentd-{self.agent}.conf")

    @property
    def tmpfiles(self) -> Path:
        return self._in_root(f"/etc/tmpfiles.d/agentd-{self.agent}.conf")

    @property
    def service_user(self) -> str:
        return f"agentd-{self.agent}"

    @property
    def run_user(self) -> str:
        return f"agentd-{self.agent}-run"

    @property
    def sensor_user(self) -> str:
        return f"agentd-{self.agent}-sns"

    @property
    def sensor_home(self) -> str:
        """The sensors' user's home (units/agentd.sysusers), where each sensor's own folder is made."""
        return f"{self.run_area}/sensors"

    @property
    def run_area(self) -> str:
        return f"/var/lib/agentd-run/{self.agent}"

    @property
    def placement(self) -> Placement:
        area = self.run_area
        return Placement(
            self.agent,
            f"/var/lib/agentd/{self.agent}",
            f"{area}/workspace",
            f"{area}/runs",
            self.run_user,
            self.sensor_user,
        )

    def folders(self) -> list[Folder]:
        """The agent's folders, who owns them and their modes (docs/install-and-deploy.md, "The boundary"): the
        state dir the services' alone; the run area theirs, which anyone may pass through (the attempts and
        sensors to their own folders) but only they list; the run dirs' folder theirs, in the run user's group;
        the workspace the run user's, in its group; the sensors' home theirs alone. Each user's group is its
        own and the services' user is a member of the run user's (units/agentd.sysusers), so the attempts and
        the sensors share no folder. tmpfiles.d makes them so on the target; install on this system, as
        root, does it now."""
        svc, run, sns, place = self.service_user, self.run_user, self.sensor_user, self.placement
        return [
            Folder(place.state_dir, svc, svc, 0o700),
            Folder(self.run_area, svc, svc, 0o711),
            Folder(place.run_dir, svc, run, 0o750),
            Folder(place.workspace, run, run, WORKSPACE_MODE),
            Folder(self.sensor_home, sns, sns, 0o700),
        ]

    @property
    def on_this_system(self) -> bool:
        return self.root == Path("/")


@frozen_value
class Folder:
    path: str  # on the target
    owner: str
    group: str
    mode: int

    def tmpfiles_line(self) -> str:
        return f"d {self.path} {self.mode:04o} {self.owner} {self.group} -"


@dataclass
class Report:
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)  # the ports a new TOML got: dispatch, sensors, web
    users: str = ""  # how the users of the sysusers.d file come to exist (install never writes /etc/passwd)
    sockets: list[str] = field(default_factory=list)  # the socket units that hold the agent's ports

    def note(self, path: Path, changed: bool) -> None:
        (self.changed if changed else self.unchanged).append(str(path))


def check_name(agent: str) -> None:
    if not NAME.match(agent):
        raise InputError(
            f"--agent: expected a lowercase name like 'arc' (letters, digits, - and _; at most 21, so that its "
            f"user agentd-NAME-run fits a user name), found {quoted(agent)}"
        )


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
        report.warnings += _older_config(layout)
    else:
        _write_if_changed(layout.config, config_text, 0o644)
        report.changed.append(str(layout.config))
    for unit in (*UNITS, *BACKUP_UNITS):
        text = unit_text((data_dir("units") / unit).read_text(encoding="utf-8"), agentd_bin)
        report.note(layout.units_dir / unit, _write_if_changed(layout.units_dir / unit, text, 0o644))
    for path, held in socket_units(layout.config, layout.units_dir).items():
        if held is not None:
            report.note(path, _write_if_changed(path, held, 0o644))
            report.sockets.append(path.name)
        else:
            _remove([path], report)  # that port is off, or the service binds it itself
    report.note(layout.sysusers, _write_if_changed(layout.sysusers, sysusers_text(layout), 0o644))
    report.note(layout.tmpfiles, _write_if_changed(layout.tmpfiles, tmpfiles_text(layout), 0o644))
    _create_users(layout, report)
    report.warnings += _shared_groups(layout)
    _make_folders(layout, report)
    if layout.on_this_system and shutil.which("systemctl"):
        run_setup_command(["systemctl", "daemon-reload"], check=False)
    return report


def unit_text(template: str, agentd_bin: Path) -> str:
    """A unit template as installed: ExecStart= the agentd it runs, Documentation= the docs shipped with
    that agentd (a page on this machine, readable offline; docs/install-and-deploy.md, "The units")."""
    return template.replace(TEMPLATE_BIN, str(agentd_bin)).replace(TEMPLATE_DOCS, str(data_dir("docs")))


def _purge(path: Path) -> None:
    """Delete a file or a whole folder: the workspace is the attempts', so it may be nested deeper than
    shutil.rmtree recurses (`remove_tree` removes any depth).

    :raises AgentdError: something stays, naming it (exit 1).
    """
    if path.is_dir() and not path.is_symlink():
        remove_tree(path)
    else:
        path.unlink()
    if os.path.lexists(path):
        raise AgentdError(f"--purge: {path} could not be removed (see the log above); remove it by hand")


def _remove(paths: list[Path], report: Report) -> None:
    for path in paths:
        if path.exists():
            path.unlink()
            report.changed.append(str(path))


def sysusers_text(layout: Layout) -> str:
    """The agent's three users, from units/agentd.sysusers: the one source of agentd's users."""
    template = (data_dir("units") / "agentd.sysusers").read_text(encoding="utf-8")
    return template.replace("@AGENT@", layout.agent)


def tmpfiles_text(layout: Layout) -> str:
    lines = [f"# agent {layout.agent}'s folders, their owners and modes (`agentd install`; docs/install-and-deploy.md)"]
    return "\n".join([*lines, *(folder.tmpfiles_line() for folder in layout.folders())]) + "\n"


def _config_text(layout: Layout, report: Report) -> str:
    """The example TOML edited for this agent and a free pair of metrics ports (agentd/install/toml_edit.py)."""
    used, skipped = used_ports(layout.config)
    report.warnings += skipped
    # A staged tree (--root) is for another machine: this one's listeners say nothing of the target's, so only
    # the tree's own agents' TOMLs move its ports off the defaults (issue 52).
    is_free = port_is_free if layout.on_this_system else _any_port
    pair = free_pair(used, is_free=is_free)
    report.ports = [*pair, free_port(used | set(pair), is_free=is_free)]
    text, warning = agent_toml(layout.placement, report.ports)
    if warning:
        report.warnings.append(f"{layout.config}: {warning}")
    return text


def _any_port(port: int) -> bool:
    return True


def _older_config(layout: Layout) -> list[str]:
    """What a TOML written by an older install lacks that this one's users and folders are for."""
    try:
        raw = read_toml(layout.config)
    except (UnusableFile, OSError):
        return []  # `agentd config check` says what is wrong with it
    dispatch, sensors = raw.get("dispatch"), raw.get("sensors", {})
    if not isinstance(dispatch, dict) or "run_as" not in dispatch or not isinstance(sensors, dict):
        return []
    if "run_as" in sensors:
        return []
    return [
        f"{layout.config}: sensors run as the attempts' user ({dispatch['run_as']}), so an attempt can reach a "
        f'running sensor; add run_as = "{layout.sensor_user}" under [sensors] (its user and home exist now) and '
        f"restart agentd-sensors@{layout.agent}"
    ]


def _shared_groups(layout: Layout) -> list[str]:
    """What an older install's users lack: the run and sensor users were made in the services' group, and
    systemd-sysusers never changes an existing user's group (docs/install-and-deploy.md, "Upgrade")."""
    if not layout.on_this_system:
        return []
    found = (not_in_own_group(name) for name in (layout.run_user, layout.sensor_user))
    return [problem for problem in found if problem is not None]


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


def enable_command(agent: str, sockets: list[str]) -> str:
    """What starts the agent: its socket units first in the line (systemd orders them before the services
    anyway), then the three services."""
    return " ".join(
        ["systemctl enable --now", *sockets, f"agentd-dispatch@{agent} agentd-sensors@{agent} agentd-web@{agent}"]
    )


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


def user_setup(layout: Layout, *, euid: int, tools: dict[str, str | None]) -> tuple[list[list[str]], str]:
    """How the agent's users and folders come to exist: the commands to run now and what to tell the
    operator. The sysusers.d file is the one source of users and tmpfiles.d of their folders; only on
    the real root, as root, does install apply them. A staging tree never gets account files:
    untarred over /, a passwd written there would replace every account."""
    users, folders = f"/{layout.sysusers.relative_to(layout.root)}", f"/{layout.tmpfiles.relative_to(layout.root)}"
    apply = f"`systemd-sysusers {users}` and `systemd-tmpfiles --create {folders}`"
    if not layout.on_this_system:
        return [], f"none made in a staging tree: on the target, run {apply} before `systemctl enable`"
    if euid != 0:
        return [], f"not root: run {apply} as root before `systemctl enable`"
    if tools.get("systemd-sysusers") is None:
        return [], f"systemd-sysusers not found: create the users {users} lists before `systemctl enable`"
    commands = [[str(tools["systemd-sysusers"]), str(layout.sysusers)]]
    if tools.get("systemd-tmpfiles") is not None:
        commands.append([str(tools["systemd-tmpfiles"]), "--create", str(layout.tmpfiles)])
    users = f"{layout.service_user}, {layout.run_user} and {layout.sensor_user}"
    return commands, f"{users}: {apply} made sure they and their folders exist"


def _create_users(layout: Layout, report: Report) -> None:
    tools = {name: shutil.which(name) for name in ("systemd-sysusers", "systemd-tmpfiles")}
    commands, report.users = user_setup(layout, euid=os.geteuid(), tools=tools)
    for command in commands:
        run_setup_command(command)


def _make_folders(layout: Layout, report: Report) -> None:
    """The agent's folders, in the tree; owned as `Layout.folders` says where the users exist here."""
    for folder in layout.folders():
        path = layout.root / folder.path.lstrip("/")
        existed = path.exists()
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if layout.on_this_system and os.geteuid() == 0:
            _own(path, folder)
        elif not existed:
            os.chmod(path, folder.mode & 0o777)
        report.note(path, not existed)


def _own(path: Path, folder: Folder) -> None:
    try:
        uid, gid = pwd.getpwnam(folder.owner).pw_uid, grp.getgrnam(folder.group).gr_gid
    except KeyError:
        return  # users not made here (no systemd-sysusers): tmpfiles.d does it on the next boot
    if (path.stat().st_uid, path.stat().st_gid) != (uid, gid):
        os.chown(path, uid, gid)
    os.chmod(path, folder.mode)


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
    area = layout.root / layout.run_area.lstrip("/")
    own = [path for path in (layout.config, layout.agent_dir, layout.state_dir, area) if path.exists()]
    if not own:
        raise InputError(f"agent {agent!r} is not installed (no {layout.config})")
    if purge and not yes:
        raise InputError(
            f"--purge deletes {', '.join(map(str, own))} for good (the agent's identity, files, database and "
            "evidence): add --yes to confirm"
        )
    if layout.on_this_system and shutil.which("systemctl"):
        units = [f"agentd-{service}@{agent}.{kind}" for service in SERVICES for kind in ("service", "socket")]
        run_setup_command(["systemctl", "disable", "--now", *units], check=False)
    for path in own:
        if purge:
            _purge(path)
            report.changed.append(str(path))
        else:
            report.kept.append(str(path))
    # its socket units (its own ports) and its users' files go with it; the users stay in the account files
    _remove([layout.sysusers, layout.tmpfiles, *(layout.units_dir / name for name in socket_names(agent))], report)
    if not other_agents(layout.config):  # the last agent: the shared templates go too
        _remove([layout.units_dir / unit for unit in (*UNITS, *BACKUP_UNITS)], report)
    if layout.on_this_system and shutil.which("systemctl"):
        run_setup_command(["systemctl", "daemon-reload"], check=False)
    return report
