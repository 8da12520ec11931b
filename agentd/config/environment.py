"""The environment, both ways: the `AGENTD_<SECTION>__<KEY>` overrides laid over the identity TOML;
what a service's own environment gives its children (the few variables an adapter inherits, env files
of KEY=VALUE read per attempt); and what systemd put there (notify, watchdog)."""

from __future__ import annotations

import json
import logging
import os
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from agentd.config.settings import ENV_PREFIX, Settings, section_model
from agentd.edge import MAX_DEPTH, UnusableFile, quoted, read_bounded, utf8_text
from agentd.errors import ConfigError, Problem

logger = logging.getLogger(__name__)

PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "TZ")


def environment_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], list[Problem]]:
    """What `environ` lays over the file (`overlay`): `AGENTD_<SECTION>__<KEY>` one key of a section,
    `AGENTD_<SECTION>` a whole table or list as JSON (its __KEY variables still win). Names are
    case-insensitive. A key that holds a table, list or dict takes JSON (an optional one keeps text
    that is not JSON, for validation to refuse); any other key takes the text, which validation reads
    as the key's type. The same rules pydantic-settings applied, without its import cost."""
    whole: dict[str, Any] = {}
    keys: dict[str, dict[str, Any]] = {}
    problems: list[Problem] = []
    for name, text in environ.items():
        if not name.upper().startswith(ENV_PREFIX):
            continue
        section, nested, key = name[len(ENV_PREFIX) :].lower().partition("__")
        target = _env_target(section, key if nested else None)
        if target is None:
            continue  # not the config's (AGENTD_TASK_ID, …), or a key environment_problems names
        try:
            value = _env_value(target.annotation, text)
        except ValueError as exc:
            expected = f"JSON nested at most {MAX_DEPTH} levels deep" if isinstance(exc, _TooDeep) else "JSON"
            found = f"expected {expected}, found {quoted(text)}"
            problems.append(Problem(name, f"{section}.{key}" if nested else section, found))
            continue
        if nested:
            keys.setdefault(section, {})[key] = value
        else:
            whole[section] = value
    for section, values in keys.items():
        table = whole.get(section, {})
        if isinstance(table, dict):  # a whole list, or a scalar, is taken as it is (validation refuses it)
            whole[section] = overlay(table, values)
    return whole, problems


def _env_target(section: str, key: str | None) -> FieldInfo | None:
    """The field a variable sets: a whole section (key None), or one key of a section's table."""
    if key is None:
        return Settings.model_fields.get(section)
    model = section_model(section)
    return model.model_fields.get(key) if model is not None else None


class _TooDeep(ValueError):
    """JSON nested deeper than json.loads recurses."""


def _env_value(annotation: Any, text: str) -> Any:
    """The text as JSON where the key holds a table, list or dict; ValueError if it must be and is
    not. An optional one (`X | None`) keeps text that is not JSON."""
    kinds = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    kinds = tuple(get_args(kind)[0] if get_origin(kind) is Annotated else kind for kind in kinds)
    if not text or not any(_is_structured(kind) for kind in kinds):
        return text
    try:
        return json.loads(text)
    except RecursionError:
        raise _TooDeep from None
    except ValueError:
        if len(kinds) == 1:
            raise
        return text


def _is_structured(kind: Any) -> bool:
    if isinstance(kind, type) and issubclass(kind, BaseModel | list | dict | tuple | set | frozenset):
        return True
    return get_origin(kind) in (list, dict, tuple, set, frozenset)


def overlay(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `over` laid on it: tables merged key by key, anything else replaced."""
    merged = dict(base)
    for key, value in over.items():
        below = merged.get(key)
        merged[key] = overlay(below, value) if isinstance(below, dict) and isinstance(value, dict) else value
    return merged


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


def read_dsn_file(path: Path) -> str:
    """The fleet's connection string from its file (one line; read again at every connect, so a rotated
    password needs no restart). UnusableFile saying why for a file that is missing, unreadable, not
    UTF-8, too large or empty."""
    try:
        text = utf8_text(read_bounded(path)).strip()
    except OSError as exc:
        raise UnusableFile(f"cannot read {path} ({exc.strerror or exc})") from None
    except UnusableFile as exc:
        raise UnusableFile(f"{path}: {exc}") from None
    if not text:
        raise UnusableFile(f"{path} is empty")
    return text


def secret_file_problems(source: str, key: str, path: Path, *, env_pairs: bool = True) -> list[Problem]:
    """A file of secrets the config names (an env_file, the fleet's dsn_file): there, a regular file
    only its owner can read and, for an env_file, KEY=VALUE lines agentd can read as it will per attempt."""
    if not os.path.isfile(path):  # False, not an OSError, for a name too long or a loop of links
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
        interval = int(usec) / 2_000_000
    except ValueError:
        interval = 0.0
    if interval > 0:
        return interval
    logger.warning(
        "WATCHDOG_USEC=%s is not a positive number of microseconds; the watchdog is not pinged", quoted(usec)
    )
    return None


ARCHIVE_CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def read_archive_credentials(path: Path) -> dict[str, str]:
    """[archive] credentials_file's key pair (and session token, if any), read at every connect
    (docs/backup-and-archive.md, "Archive").

    :raises ConfigError: the file is unusable (others can read it, it is not KEY=VALUE lines, a key is missing).
    :raises OSError: it cannot be read."""
    problems = secret_file_problems(str(path), "", path)
    if problems:
        raise ConfigError(problems)
    values = read_env_file(path)
    missing = [key for key in ARCHIVE_CREDENTIAL_KEYS if not values.get(key)]
    if missing:
        raise ConfigError([Problem(str(path), "", f"expected {' and '.join(missing)}=… line(s), found none")])
    return {k: v for k, v in values.items() if k in (*ARCHIVE_CREDENTIAL_KEYS, "AWS_SESSION_TOKEN")}
