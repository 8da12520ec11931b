"""An agent laid out as `agentd install` lays one out, with real users, for the boundary tests: a
service user that owns the state dir, a run user for attempts, a sensor user whose home holds the
sensors' folders, a cgroup delegated to the
service user (as the units' Delegate=yes does) and the service started as that user with only
CAP_SETUID/CAP_SETGID/CAP_KILL, ambient (as the units' AmbientCapabilities= does).

Needs root, useradd/userdel, setpriv and a writable cgroup v2 hierarchy; a test that uses it skips with
the reason when one is missing, unless AGENTD_REQUIRE_PRIVSEP=1 (CI) makes that a failure."""

from __future__ import annotations

import hashlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from support import REPO, example_raw

CAPS = "+setuid,+setgid"  # as the units grant them (no CAP_KILL)


def missing() -> str | None:
    """Why real users cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root: the boundary tests create real users"
    for tool in ("useradd", "userdel", "groupdel", "setpriv"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if cgroup2_mount() is None:
        return "no cgroup v2 hierarchy is mounted"
    if reachable_python() is None:
        return (
            f"no python{sys.version_info.major}.{sys.version_info.minor} that every user may run (this venv's, "
            f"{os.path.realpath(sys.executable)}, is in a folder other users cannot enter)"
        )
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    if not _reachable(site) or not _reachable(REPO):
        return f"{site} or {REPO} is in a folder other users cannot enter"
    return None


def _reachable(path: Path) -> bool:
    """Every folder on the way may be entered by anyone, and the path itself read."""
    real = Path(os.path.realpath(path))
    return all(os.stat(p).st_mode & 0o001 for p in real.parents) and bool(os.stat(real).st_mode & 0o004)


def reachable_python() -> Path | None:
    """An interpreter of this version that every user can run: this venv's own, else the system's."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (os.path.realpath(sys.executable), f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        if Path(candidate).is_file() and _reachable(Path(candidate)):
            said = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
            )
            if said.stdout.strip() == str(sys.version_info[:2]):
                return Path(candidate)
    return None


def agentd_bin() -> Path:
    """A bin folder any user can run agentd from: a venv whose python is `reachable_python` and whose
    site-packages are this one's (the same agentd and the same dependencies: one ABI). Built once per
    checkout under /tmp, as the units' agentd is installed system-wide (docs/install-and-deploy.md, "Deploy on a
    VM")."""
    python = reachable_python()
    assert python is not None
    site = next(p for p in sys.path if p.endswith("site-packages"))
    tag = hashlib.sha256(f"{python}:{site}".encode()).hexdigest()[:12]
    root = Path(f"/tmp/agentd-privsep-venv-{tag}")
    if (root / "bin" / "agentd").exists():
        return root / "bin"
    building = Path(tempfile.mkdtemp(prefix="agentd-privsep-venv-", dir="/tmp"))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (building / "bin").mkdir()
    (building / "lib" / version / "site-packages").mkdir(parents=True)
    for name in ("python", "python3", version):
        (building / "bin" / name).symlink_to(python)
    (building / "pyvenv.cfg").write_text(f"home = {python.parent}\ninclude-system-site-packages = false\n")
    (building / "lib" / version / "site-packages" / "_agentd_tests.pth").write_text(
        f"import site; site.addsitedir({site!r})\n"
    )
    script = building / "bin" / "agentd"
    script.write_text(f"#!{root}/bin/python\nimport sys\nfrom agentd.cli import main\nsys.exit(main())\n")
    for path in [building, *building.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o755)
    try:
        building.rename(root)
    except OSError:  # another worker built it first
        shutil.rmtree(building, ignore_errors=True)
    return root / "bin"


def require() -> None:
    """Skip (or, with AGENTD_REQUIRE_PRIVSEP=1, fail) when real users cannot be made here."""
    reason = missing()
    if reason is None:
        return
    if os.environ.get("AGENTD_REQUIRE_PRIVSEP"):
        pytest.fail(f"AGENTD_REQUIRE_PRIVSEP is set but {reason}")
    pytest.skip(f"boundary tests with real users: {reason}")


def cgroup2_mount() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        if " - cgroup2 " in line:
            return Path(line.split()[4])
    return None


@dataclass
class PrivAgent:
    """One agent's users, folders, config and delegated cgroup."""

    base: Path
    service: str
    run: str
    sensors: str
    cgroup: Path
    config_path: Path | None = None  # another config than the one priv_agent wrote (the chaos harness's)
    bin: Path | None = None  # the agentd the services and the operator run: agentd_bin()'s unless set

    @property
    def agentd(self) -> Path:
        return (self.bin or agentd_bin()) / "agentd"

    @property
    def config(self) -> Path:
        return self.config_path or self.base / "etc" / "agent.toml"

    def own(self, path: Path, mode: int = 0o600) -> None:
        """A file only the service user may read (an env_file)."""
        svc = pwd.getpwnam(self.service)
        os.chown(path, svc.pw_uid, svc.pw_gid)
        os.chmod(path, mode)

    def readable(self, root: Path) -> None:
        """A folder every user may read (config, sensors, schemas), as /etc/agentd is."""
        for path in [root, *root.rglob("*")]:
            if not path.is_symlink() and path.name != "secrets.env":
                os.chmod(path, 0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)

    @property
    def state_dir(self) -> Path:
        return self.base / "state"

    @property
    def run_area(self) -> Path:
        return self.base / "run"

    @property
    def workspace(self) -> Path:
        return self.run_area / "workspace"

    @property
    def sensor_home(self) -> Path:
        """The sensor user's home, as units/agentd.sysusers sets it: each sensor's folder is made there."""
        return self.run_area / "sensors"

    @property
    def env_file(self) -> Path:
        return self.base / "etc" / "secrets.env"

    @property
    def sensors_dir(self) -> Path:
        return self.base / "etc" / "no-sensors"

    def processes_of(self, name: str) -> list[int]:
        """The living processes of a user (zombies aside)."""
        uid, found = self.uid(name), []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with suppress(OSError):
                    status = (entry / "status").read_text()
                    real = int(status.split("Uid:", 1)[1].split()[0])
                    if real == uid and "State:\tZ" not in status:
                        found.append(int(entry.name))
        return found

    def uid(self, name: str) -> int:
        return pwd.getpwnam(name).pw_uid

    def as_service(self, *args: str, timeout: float = 120, delegated: bool = True) -> subprocess.CompletedProcess[str]:
        """`agentd --config … ARGS` as the service user with the units' capabilities, in its delegated
        cgroup (as the dispatcher's unit runs it) or in none it may write (as the sensors' unit does)."""
        return subprocess.run(
            self.service_argv(*args, delegated=delegated),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
            check=False,
        )

    def service_argv(self, *args: str, delegated: bool = True) -> list[str]:
        return self.service_command([str(self.agentd), "--config", str(self.config), *args], delegated=delegated)

    def service_command(self, argv: list[str], delegated: bool = True) -> list[str]:
        """`argv` as the service user with the units' capabilities, as `service_argv` runs agentd."""
        setpriv = [
            "setpriv",
            f"--reuid={self.service}",
            f"--regid={self.service}",
            "--init-groups",  # as systemd's User= does: the run user's group among them
            f"--inh-caps=-all,{CAPS}",
            f"--ambient-caps=-all,{CAPS}",
            f"--bounding-set=-all,{CAPS}",
            "--no-new-privs",
        ]
        command = " ".join(_quote(a) for a in [*setpriv, *argv])
        cgroups = [self.cgroup, *self.v1_cgroups()] if delegated else []
        enter = "".join(f"echo $$ > {cgroup}/cgroup.procs && " for cgroup in cgroups)
        return ["sh", "-c", f"{enter}exec {command}"]

    def v1_cgroups(self) -> list[Path]:
        """The service's cgroups in the v1 hierarchies of the controllers agentd limits (pids, memory), as
        systemd makes a unit's on a hybrid host (this VM) and hands them over with Delegate=yes."""
        return [root / self.cgroup.name for root in V1_ROOTS if (root / self.cgroup.name).is_dir()]

    def as_operator(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`agentd` as root, the operator (the state dir's files stay the service user's: agentd never
        creates one there as root that the service could not open)."""
        return subprocess.run(
            [str(self.agentd), "--config", str(self.config), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=self.env(),
            check=False,
        )

    def env(self) -> dict[str, str]:
        return {"PATH": f"{self.agentd.parent}:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _run(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, text=True, timeout=60)


@contextmanager
def initialised_agent(mutate: Any = None) -> Iterator[PrivAgent]:
    """`require()`, then a `priv_agent` whose service user has run `agentd init` (and it exited 0)."""
    from support import ran_ok

    require()
    with priv_agent(mutate) as agent:
        ran_ok(agent.as_service("init"))
        yield agent


@contextmanager
def priv_agent(mutate: Any = None, under: Path = Path("/tmp")) -> Iterator[PrivAgent]:
    """Make the users, folders, config and cgroup (the folders in `under`: the bench's as-deployed row
    puts them on tmpfs); remove them all afterwards."""
    tag = secrets.token_hex(3)
    service, run, sensors = f"agt{tag}", f"agt{tag}-run", f"agt{tag}-sns"
    base = under / f"agentd-privsep-{tag}"
    mount = cgroup2_mount()
    assert mount is not None
    cgroup = mount / f"agentd-privsep-{tag}"
    made_users: list[str] = []
    try:
        system_user = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
        # As units/agentd.sysusers: each user a group of its own, the services' user a member of the run user's.
        _run(*system_user, "--user-group", service)
        made_users.append(service)
        _run(*system_user, "--user-group", run)
        made_users.append(run)
        _run(*system_user, "--user-group", "--home-dir", str(base / "run" / "sensors"), sensors)
        made_users.append(sensors)
        _run("usermod", "--append", "--groups", run, service)
        agent = PrivAgent(base, service, run, sensors, cgroup)
        _lay_out(agent, mutate)
        _delegate(agent)
        yield agent
    finally:
        if cgroup.exists():
            _kill_cgroup(cgroup)
        for root in V1_ROOTS:
            if (root / cgroup.name).exists():
                _kill_cgroup(root / cgroup.name)
        shutil.rmtree(base, ignore_errors=True)
        for user in reversed(made_users):
            subprocess.run(["userdel", user], capture_output=True, check=False)
            subprocess.run(["groupdel", user], capture_output=True, check=False)


def _lay_out(agent: PrivAgent, mutate: Any) -> None:
    """The folders as `agentd install` makes them, and a config naming them."""
    svc, run, sns = pwd.getpwnam(agent.service), pwd.getpwnam(agent.run), pwd.getpwnam(agent.sensors)
    agent.base.mkdir(mode=0o755)
    os.chmod(agent.base, 0o755)
    etc = agent.base / "etc"
    shutil.copytree(REPO / "config", etc)
    for path in [etc, *etc.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
    for folder, owner, group, mode in (  # as agentd/install/__init__.py Layout.folders
        (agent.state_dir, svc.pw_uid, svc.pw_gid, 0o700),
        (agent.run_area, svc.pw_uid, svc.pw_gid, 0o711),
        (agent.run_area / "runs", svc.pw_uid, run.pw_gid, 0o750),
        (agent.workspace, run.pw_uid, run.pw_gid, 0o770),
        (agent.sensor_home, sns.pw_uid, sns.pw_gid, 0o700),
    ):
        folder.mkdir(mode=0o700)
        os.chown(folder, owner, group)
        os.chmod(folder, mode)
    agent.env_file.write_text("SERVICE_SECRET=s3cr3t-of-the-service\n")
    os.chown(agent.env_file, svc.pw_uid, svc.pw_gid)
    os.chmod(agent.env_file, 0o600)
    raw = example_raw()
    raw.pop("policy", None)  # as every test agent (tests/support.py write_config): a test states its own
    (etc / "no-sensors").mkdir(mode=0o755)
    raw["paths"] = {"skills_dir": str(REPO / "skills"), "sensors_dir": str(agent.sensors_dir)}
    raw["metrics"] = {"enabled": False}
    boundary(raw, agent)
    if mutate is not None:
        mutate(raw)
    agent.config.write_text(tomli_w.dumps(raw))
    os.chmod(agent.config, 0o644)
    tomllib.loads(agent.config.read_text())


def boundary(raw: dict[str, Any], agent: PrivAgent) -> None:
    """What makes any test config this agent's, as `agentd install` writes one: its folders, its run
    and sensor users, and two more adapters (`hostile`: an attempt that tries to act as its operator; `scripted`:
    tests/adapters/scripted.py with a short timeout), each given the service's env_file."""
    raw["paths"].update(
        state_dir=str(agent.state_dir), workspace=str(agent.workspace), run_dir=str(agent.run_area / "runs")
    )
    raw["dispatch"]["run_as"] = agent.run
    raw.setdefault("sensors", {})["run_as"] = agent.sensors
    raw["dispatch"]["kill_grace_s"] = 1.0
    for name, script, timeout_ms in (("hostile", "hostile.py", 60_000), ("scripted", "scripted.py", 3_000)):
        if any(a["adapter_id"] == name for a in raw["adapters"]):
            continue  # the config has its own
        raw["adapters"].append(
            {
                "adapter_id": name,
                "kind": "script",
                "command": str(REPO / "tests" / "adapters" / script),
                "timeout_ms": timeout_ms,
                "env_file": str(agent.env_file),
            }
        )
        raw["task_types"].append(
            {
                "task_type": name,
                "payload_schema_id": "agent-runtime/payload.any-object/v1",
                "default_profile_id": "operator",
                "default_adapter_id": name,
                "artifact_roles": ["output"],
            }
        )


V1_ROOTS = [Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/memory")]  # where a hybrid host keeps them


def _delegate(agent: PrivAgent) -> None:
    """Cgroups the service user may manage, as systemd's Delegate=yes makes them for a unit: one in the v2
    hierarchy and, on a hybrid host, one in each v1 hierarchy of the controllers agentd limits."""
    agent.cgroup.mkdir()
    svc = pwd.getpwnam(agent.service)
    for path in (
        agent.cgroup,
        *(agent.cgroup / n for n in ("cgroup.procs", "cgroup.subtree_control", "cgroup.threads")),
    ):
        os.chown(path, svc.pw_uid, svc.pw_gid)
    for root in V1_ROOTS:
        if (root / "cgroup.procs").exists():
            own = root / agent.cgroup.name
            own.mkdir()
            for path in (own, own / "cgroup.procs", own / "tasks"):
                os.chown(path, svc.pw_uid, svc.pw_gid)


def _kill_cgroup(cgroup: Path) -> None:
    for child in sorted(cgroup.rglob("cgroup.procs"), key=lambda p: len(p.parts), reverse=True):
        with suppress(OSError):
            for pid in child.read_text().split():
                with suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
    for child in sorted((p for p in cgroup.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with suppress(OSError):
            child.rmdir()
    for _ in range(100):  # what was killed may take a moment to leave it
        try:
            cgroup.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)
