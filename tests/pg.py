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


@dataclass(frozen=True)
class Bouncer:
    home: Path  # its socket's folder
    pid: int

    def through(self, dsn: str) -> str:
        """A database's DSN, through the bouncer (libpq: a later key overrides an earlier one)."""
        return f"{dsn} host={self.home} port=6432"


# What agentd's `options` would set (agentd/store/fleet_connect.py BOUNDED), set by PgBouncer on each server connection.
SESSION = "SET statement_timeout = 15000; SET lock_timeout = 5000; SET idle_in_transaction_session_timeout = 30000"


def bouncer_bin() -> Path | None:
    found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").is_file() else None)
    return Path(found) if found else None


@contextmanager
def bouncer(running: Cluster, pool_size: int, max_clients: int = 2_000) -> Iterator[Bouncer]:
    """PgBouncer (Debian's package) in front of `running`, transaction pooling: at most `pool_size` server
    connections per database, whatever the number of clients. Unix socket only (port 6432 names its socket
    file, beside the server's 5432), no TCP.

    The session settings agentd sends as the startup parameter `options` (agentd/store/fleet_connect.py) are
    not passed on by PgBouncer: it is told to ignore that parameter and sets them on each server connection
    itself (`connect_query`), as a deployment would (docs/fleet.md, "Scale, as measured")."""
    binary = bouncer_bin()
    assert binary is not None, "pgbouncer is not installed (apt-get install pgbouncer)"
    home = running.root / f"bouncer-{secrets.token_hex(4)}"
    home.mkdir(mode=0o700)
    owner = pwd.getpwnam("postgres")
    os.chown(home, owner.pw_uid, owner.pw_gid)
    (home / "pgb.ini").write_text(
        "\n".join(
            [
                "[databases]",
                f"* = host={running.socket_dir} port=5432 user=postgres connect_query='{SESSION}'",
                "[pgbouncer]",
                "listen_port = 6432",
                f"unix_socket_dir = {home}",
                "auth_type = any",
                "pool_mode = transaction",
                f"default_pool_size = {pool_size}",
                f"max_client_conn = {max_clients}",
                "ignore_startup_parameters = options",
                f"logfile = {home / 'pgbouncer.log'}",
                "",
            ]
        ),
        encoding="utf-8",
    )
    log = open(home.with_suffix(".out"), "ab")  # noqa: SIM115
    process = subprocess.Popen(
        ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", str(binary), str(home / "pgb.ini")],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    try:
        for _ in range(200):
            if (home / ".s.PGSQL.6432").exists():
                break
            if process.poll() is not None:
                raise RuntimeError(home.with_suffix(".out").read_text()[-2000:])
            subprocess.run(["sleep", "0.05"], check=False)
        yield Bouncer(home, process.pid)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)


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
