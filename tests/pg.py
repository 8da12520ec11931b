"""A real PostgreSQL for the fleet tests: Debian's server binaries, a cluster made by `initdb` as the
`postgres` user (initdb refuses root) in a temp dir, listening only on a unix socket there (no TCP
port at all, so it collides with nothing). One cluster per test session and worker; each test gets a
database of its own.

Skips by name where PostgreSQL is not installed (or the tests do not run as root, which they need to
act as `postgres`), unless AGENTD_REQUIRE_POSTGRES=1 (CI) makes that a failure."""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SERVER_BINS = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)  # the newest first


def postgres_bin() -> Path | None:
    for folder in SERVER_BINS:
        if Path(folder, "initdb").is_file() and Path(folder, "postgres").is_file():
            return Path(folder)
    return None


def why_not() -> str | None:
    """Why a PostgreSQL cannot be started here, or None."""
    if postgres_bin() is None:
        return "PostgreSQL's server is not installed (apt-get install postgresql)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "there is no postgres user to run initdb as"
    if os.geteuid() != 0:
        return "not root: the tests start PostgreSQL as the postgres user"
    return None


def require() -> None:
    """Skip the test by name (fail under AGENTD_REQUIRE_POSTGRES=1) where no PostgreSQL can run."""
    from support import missing  # here, not at the top: bench/ imports this module without pytest's path

    reason = why_not()
    if reason is not None:
        missing("POSTGRES", f"a real PostgreSQL for the fleet tests: {reason}")


@dataclass
class Cluster:
    root: Path
    socket_dir: Path
    process: subprocess.Popen[bytes] | None = None
    durable: bool = False  # a deployment's fsync=on (the bench's fleet row); the tests' is off, for speed
    max_connections: int = 200  # the fleet at scale (bench/fleet_scale.py) wants one per simulated agent

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.socket_dir} dbname={dbname} user=postgres"

    def as_postgres(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            check=check,
        )

    def start(self) -> None:
        """The server, in the foreground of its own process (the test stops and starts it at will)."""
        binaries = postgres_bin()
        assert binaries is not None
        log = open(self.root / "server.log", "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                "setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--",
                str(binaries / "postgres"), "-D", str(self.root / "data"), "-k", str(self.socket_dir),
                "-c", "listen_addresses=", "-c", f"fsync={'on' if self.durable else 'off'}",
                "-c", "synchronous_commit=on", "-c", f"max_connections={self.max_connections}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        for _ in range(300):
            ready = subprocess.run(
                [str(binaries / "pg_isready"), "-h", str(self.socket_dir), "-q"], capture_output=True, check=False
            )
            if ready.returncode == 0:
                return
            if self.process.poll() is not None:
                raise RuntimeError((self.root / "server.log").read_text()[-2000:])
            subprocess.run(["sleep", "0.05"], check=False)
        raise RuntimeError("PostgreSQL did not become ready within 15 s")

    def stop(self) -> None:
        """A fast shutdown (SIGINT: what `pg_ctl stop -m fast` sends): clients are cut off."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout=60)
        self.process = None

    def new_database(self) -> str:
        name = f"t{secrets.token_hex(6)}"
        binaries = postgres_bin()
        assert binaries is not None
        self.as_postgres(str(binaries / "createdb"), "-h", str(self.socket_dir), name)
        return self.dsn(name)


@contextmanager
def cluster(durable: bool = False, max_connections: int = 200) -> Iterator[Cluster]:
    """initdb a fresh cluster in a temp dir and run it until the block ends; `durable`: with a
    deployment's commit settings (fsync=on, synchronous_commit=on), as the bench's fleet row wants;
    `max_connections`: more for the fleet at scale's agents with a connection each."""
    binaries = postgres_bin()
    assert binaries is not None
    root = Path(f"/tmp/agentd-pg-{secrets.token_hex(4)}")
    root.mkdir(mode=0o700)
    sockets = root / "sockets"
    sockets.mkdir()
    owner = pwd.getpwnam("postgres")
    for path in (root, sockets):
        os.chown(path, owner.pw_uid, owner.pw_gid)
    found = Cluster(root, sockets, durable=durable, max_connections=max_connections)
    try:
        initdb = str(binaries / "initdb")
        found.as_postgres(initdb, "-D", str(root / "data"), "--auth=trust", "-U", "postgres", "-E", "UTF8")
        found.start()
        yield found
    finally:
        found.stop()
        shutil.rmtree(root, ignore_errors=True)
