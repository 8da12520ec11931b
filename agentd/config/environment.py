"""What a service's own environment gives its children and tells it: the few variables an adapter
inherits, env files (KEY=VALUE) read per attempt, and what systemd put there (notify, watchdog)."""

from __future__ import annotations

import os
from pathlib import Path

from agentd.edge import UnusableFile, read_bounded, utf8_text
from agentd.errors import ConfigError, Problem

PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "TZ")


def passthrough_environment() -> dict[str, str]:
    """The few variables of the service's own environment an adapter inherits (PATH, locale)."""
    return {name: os.environ[name] for name in PASSTHROUGH_ENV if name in os.environ}


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (`#` comments, optional `export `, optional quotes); read per attempt.

    :raises OSError: it cannot be read (each caller says which file and what it was doing).
    :raises ConfigError: anything else that makes it unusable: not UTF-8, too large, a line not KEY=VALUE.
    """
    try:
        text = utf8_text(read_bounded(path))
    except UnusableFile as exc:
        raise ConfigError([Problem(str(path), "", str(exc))]) from None
    values = {}
    for number, line in enumerate(text.splitlines(), start=1):
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


def secret_file_problems(source: str, key: str, path: Path, *, env_pairs: bool = True) -> list[Problem]:
    """A file of secrets the config names (an env_file, the fleet's dsn_file): there, a regular file
    only its owner can read and, for an env_file, KEY=VALUE lines agentd can read as it will per attempt."""
    if not path.is_file():
        return [Problem(source, key, f"expected a file, found none at {path}")]
    if path.stat().st_mode & 0o077:
        return [Problem(source, key, f"{path} holds secrets but others can read it; chmod 600 it")]
    if not env_pairs:
        return []
    try:
        read_env_file(path)
    except OSError as exc:
        return [Problem(source, key, f"cannot read {path}: {exc.strerror or exc}")]
    except ConfigError as exc:  # each names the file, and the line or why
        return exc.problems
    return []


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
