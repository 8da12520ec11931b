"""A Debian 12 machine booted with systemd as PID 1, for `make test-system` (docs/testing.md, "The
system test"): a root file system made once by debootstrap and cached as a tarball, unpacked fresh for
each machine, booted by systemd-nspawn with a network of its own (loopback only), driven from outside
with nsenter. Everything it makes lives under .cache/system/ of the checkout: it never touches the
host's network, /tmp or cgroup roots, and `close()` removes what it started.

Needs root, debootstrap, systemd-nspawn (systemd-container), nsenter and a cgroup hierarchy it may
make folders in; `missing()` says which is lacking."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from support import REPO

CACHE = REPO / ".cache" / "system"
SUITE = "bookworm"
# What the machine holds besides minbase: systemd as PID 1, python3 to install agentd's wheel into a venv,
# sudo for the operator's commands, curl for scrapes and the API, and Debian's prometheus.
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-venv",
    "sudo",
    "procps",
    "iproute2",
    "curl",
    "prometheus",
)
HOSTNAME = "agentd-vm"
# Bump to rebuild the cached root file system when `_prepare` changes.
PREPARED = 1
REBOOTED = 133  # systemd-nspawn's exit status when the machine inside asked for a reboot
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def missing() -> str | None:
    """Why no machine can be booted here, or None."""
    if os.geteuid() != 0:
        return "not root: booting a machine with systemd-nspawn needs root"
    for tool, package in (
        ("debootstrap", "debootstrap"),
        ("systemd-nspawn", "systemd-container"),
        ("nsenter", "util-linux"),
    ):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package {package})"
    if not _cgroup_roots():
        return "no writable cgroup hierarchy at /sys/fs/cgroup for the machine's own cgroup"
    return None


def _cgroup_roots() -> list[Path]:
    """Where the machine's own cgroup is made: on a hybrid host (cgroup v1 with a unified hierarchy beside
    it, as on these VMs) one in the name=systemd hierarchy and one in the unified one; on a pure v2 host
    one in /sys/fs/cgroup itself."""
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.procs").exists():
        return [base]
    roots = [base / "systemd", base / "unified"]
    return [root for root in roots if (root / "cgroup.procs").exists()]


def debian_mirror() -> str:
    """The Debian mirror this host's apt uses (its sources), so the machine is built from what the host
    may reach; deb.debian.org where none is named."""
    found = []
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        text = path.read_text(encoding="utf-8", errors="replace")
        for stanza in re.split(r"\n\s*\n", text):
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            if suites and uris and SUITE in suites.group(1).split() and "security" not in uris.group(1):
                found.append(uris.group(1))
    lists = Path("/etc/apt/sources.list")
    if lists.exists():
        for line in lists.read_text(encoding="utf-8", errors="replace").splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                found.append(words[1] if not words[1].startswith("[") else words[2])
    return found[0] if found else "http://deb.debian.org/debian"


def root_tarball(log: Callable[[str], None] = print) -> Path:
    """The machine's root file system as a tarball, made by debootstrap the first time (75–115 s on these
    VMs, ~270 MB packed) and kept in .cache/system/ under a name that changes with the package list."""
    key = hashlib.sha256(json.dumps([SUITE, PACKAGES, PREPARED]).encode()).hexdigest()[:12]
    tarball = CACHE / f"debian-{SUITE}-{key}.tar"
    if tarball.exists():
        return tarball
    build = CACHE / f"build-{os.getpid()}"
    shutil.rmtree(build, ignore_errors=True)
    root = build / "root"
    root.mkdir(parents=True)
    mirror = debian_mirror()
    log(f"debootstrap {SUITE} from {mirror} into {root} (once; then cached as {tarball.name})")
    try:
        with (build / "debootstrap.log").open("wb") as said:
            subprocess.run(
                ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(root), mirror],
                check=True,
                stdout=said,
                stderr=subprocess.STDOUT,
            )
        _prepare(root)
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], check=True)
        partial.rename(tarball)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return tarball


def _prepare(root: Path) -> None:
    """What a VM's image has that debootstrap leaves out: a host name its own /etc/hosts resolves (sudo
    asks), and no package archives."""
    (root / "etc/hostname").write_text(HOSTNAME + "\n")
    (root / "etc/hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {HOSTNAME}\n::1 localhost\n")
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()


@dataclass
class Ran:
    command: str
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> object:
        return json.loads(self.stdout)


class CommandFailed(AssertionError):
    pass


@dataclass
class Machine:
    """One booted machine: `boot()`, `run("…")` as root inside it, `reboot()`, `close()`."""

    name: str
    folder: Path
    boots: int = 0
    process: subprocess.Popen[bytes] | None = None
    pid1: int | None = None
    cgroups: list[Path] = field(default_factory=list)

    @classmethod
    def unpacked(cls, name: str, tarball: Path) -> Machine:
        folder = CACHE / f"{name}-{os.getpid()}"
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "root").mkdir(parents=True)
        subprocess.run(["tar", "--numeric-owner", "-C", str(folder / "root"), "-xf", str(tarball)], check=True)
        return cls(name, folder)

    @property
    def root(self) -> Path:
        """The machine's / as seen from the host (to put files in before a boot, or read them after)."""
        return self.folder / "root"

    def boot(self, timeout: float = 120.0) -> None:
        """Start systemd in the machine and wait until it says it is running (or degraded)."""
        self.cgroups = self.cgroups or self._make_cgroups()
        self.boots += 1
        console = (self.folder / f"console-{self.boots}.log").open("wb")
        argv = ["systemd-nspawn", "-D", str(self.root), f"--machine={self.name}", "--boot", "--private-network"]
        # --keep-unit and --register=no: no host systemd (or its bus) is asked for anything.
        argv += ["--register=no", "--keep-unit", "--link-journal=no", "--console=passive"]
        env = {"PATH": PATH, "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1", "LANG": "C.UTF-8"}
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=self._enter_cgroups,
            start_new_session=True,  # _enter_cgroups runs in the child, before exec
        )
        console.close()
        self.pid1 = _wait(lambda: self._find_pid1(), timeout, "the machine's PID 1")
        state = _wait(lambda: self._system_state(), timeout, "systemd in the machine to finish booting")
        if state not in ("running", "degraded"):
            raise AssertionError(
                f"the machine booted {state}: {self.run('systemctl --failed --no-pager', check=False).stdout}"
            )
        self._real_boot_id()

    def _make_cgroups(self) -> list[Path]:
        """A cgroup of the machine's own in each hierarchy, so systemd-nspawn never moves the test's own
        processes (nor writes to a hierarchy's root)."""
        made = []
        for root in _cgroup_roots():
            path = root / f"agentd-system-{self.name}-{os.getpid()}"
            path.mkdir(exist_ok=True)
            made.append(path)
        return made

    def _enter_cgroups(self) -> None:
        for path in self.cgroups:
            (path / "cgroup.procs").write_text(str(os.getpid()))

    def _find_pid1(self) -> int | None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"systemd-nspawn exited {self.process.returncode}: {self.console()[-2000:]}")
        ours = os.readlink("/proc/self/ns/pid")
        for child in _children(self.process.pid):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{child}/ns/pid") != ours:
                    return child
        return None

    def _system_state(self) -> str | None:
        said = self.run("systemctl is-system-running", check=False, timeout=30)
        state = said.stdout.strip()
        return state if state in ("running", "degraded", "maintenance", "stopping") else None

    def _real_boot_id(self) -> None:
        """systemd-nspawn lays a made-up boot id over /proc/sys/kernel/random/boot_id, which processes it
        starts read while units with ProtectProc= mount a /proc of their own and read the kernel's: lift
        it, so an operator's command and the services agree on the boot as they do on a VM."""
        for _ in range(4):
            if self.run("umount /proc/sys/kernel/random/boot_id", check=False).returncode != 0:
                return

    def run(
        self, command: str, *, check: bool = True, timeout: float = 120.0, stdin: str | None = None, cwd: str = "/root"
    ) -> Ran:
        """`command` through /bin/sh as root inside the machine, from `cwd`, with a clean environment (as
        an operator's root shell would have)."""
        assert self.pid1 is not None, "the machine is not booted"
        argv = ["nsenter", "-t", str(self.pid1), "-m", "-u", "-i", "-n", "-p", "-C", "-r", "-w"]
        argv += ["/usr/bin/env", "-i", f"PATH={PATH}", "HOME=/root", "LANG=C.UTF-8", "USER=root", "LOGNAME=root"]
        argv += ["/bin/sh", "-c", f"cd {cwd} && {command}"]
        # A session of its own: nothing run inside (`kill -STOP 0` in a test that went wrong) can signal the test.
        done = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=timeout, start_new_session=True
        )
        ran = Ran(command, done.returncode, done.stdout, done.stderr)
        if check and done.returncode != 0:
            raise CommandFailed(
                f"{command!r} exited {done.returncode}\nstdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
            )
        return ran

    def wait(self, command: str, what: str, timeout: float, accept: Callable[[Ran], bool] | None = None) -> Ran:
        """Run `command` every half second until it succeeds (or `accept` says so) or `timeout` passes."""
        accept = accept or (lambda ran: ran.returncode == 0)
        last: list[Ran] = []

        def once() -> Ran | None:
            ran = self.run(command, check=False, timeout=max(timeout, 30))
            last[:] = [ran]
            return ran if accept(ran) else None

        try:
            return _wait(once, timeout, what, pause=0.5)
        except AssertionError as error:
            said = last[0] if last else None
            raise AssertionError(f"{error}\nlast: {said}") from None

    def put(self, path: str, text: str, mode: int = 0o644) -> None:
        """Write a file into the machine (as root) through its own shell, so no host path is involved."""
        self.run(f"install -m {mode:o} /dev/stdin {path}", stdin=text)

    def reboot(self, timeout: float = 180.0) -> None:
        """`systemctl reboot` inside; systemd-nspawn exits 133 for it, and the machine is booted again."""
        assert self.process is not None
        self.run("systemctl reboot --no-block")
        code = self.process.wait(timeout=timeout)
        if code != REBOOTED:
            raise AssertionError(f"systemd-nspawn exited {code} on reboot, not {REBOOTED}: {self.console()[-2000:]}")
        self.pid1 = None
        self.boot(timeout)

    def console(self) -> str:
        path = self.folder / f"console-{self.boots}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def journal(self, *units: str, lines: int = 80) -> str:
        which = " ".join(f"-u {unit}" for unit in units)
        return self.run(f"journalctl --no-pager -o short-monotonic -n {lines} {which}", check=False).stdout

    def close(self, keep: bool = False) -> None:
        """Power the machine off (or stop it), remove its cgroups and, unless `keep`, its files."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(Exception):
                self.run("systemctl poweroff --no-block", check=False, timeout=30)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        for path in self.cgroups:
            _remove_cgroup(path)
        if not keep:
            shutil.rmtree(self.folder, ignore_errors=True)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(word) for word in (task / "children").read_text().split()]
    return found


def _remove_cgroup(path: Path) -> None:
    """A cgroup and what the machine's systemd made under it, deepest first; whatever still runs there is
    killed first (only the machine's processes can be in it)."""
    if not path.exists():
        return
    if (path / "cgroup.kill").exists():
        with contextlib.suppress(OSError):
            (path / "cgroup.kill").write_text("1")
    folders = sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
    for folder in [*folders, path]:
        for _ in range(50):
            try:
                folder.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                for pid in (folder / "cgroup.procs").read_text().split() if (folder / "cgroup.procs").exists() else []:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                time.sleep(0.1)


def _wait(condition: Callable[[], object], timeout: float, what: str, pause: float = 0.1) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(pause)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def build_wheelhouse(source: Path, into: Path, python: Sequence[str]) -> Path:
    """agentd's wheel from `source` (a checkout) and every wheel it depends on, in one folder: what the
    docs' offline install takes (docs/install-and-deploy.md, "Deploy on a VM")."""
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run([*python, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(into), str(source)], check=True)
    return into
