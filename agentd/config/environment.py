"""What a service's own environment gives its children and tells it: the few variables an adapter
inherits, env files (KEY=VALUE) read per attempt, and what systemd put there (notify, watchdog)."""

from __future__ import annotations

import os
from pathlib import Path

from agentd.errors import ConfigError, Problem

PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "TZ")


def passthrough_environment() -> dict[str, str]:
    """The few variables of the service's own environment an adapter inherits (PATH, locale)."""
    return {name: os.environ[name] for name in PASSTHROUGH_ENV if name in os.environ}


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (`#` comments, optional `export `, optional quotes); read per attempt."""
    values = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        if not sep or not key.strip().isidentifier():
            raise ConfigError([Problem(str(path), f"line {number}", "expected KEY=VALUE")])
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def systemd_notify_socket() -> str | None:
    """$NOTIFY_SOCKET when systemd started us with Type=notify; None elsewhere."""
    return os.environ.get("NOTIFY_SOCKET") or None


def systemd_watchdog_interval() -> float | None:
    """Half of $WATCHDOG_USEC in seconds, if systemd asked this process to ping its watchdog."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2_000_000
    except ValueError:
        return None
