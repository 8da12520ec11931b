"""Which identity TOML a command acts on, and the validated config's cached view the fast paths read.

A command that loaded and checked its config the full way (pydantic, every cross-check) leaves a view
of it in the state dir, `config-cache.json` (0600): what the hot commands need, as plain JSON. The next
command uses the view only when nothing that went into it changed: the view is filed under a key, the
SHA-256 of the TOML's bytes, the content (and owner, mode, times) of every file and folder the config
names, every `AGENTD_*` variable, who runs the command, agentd's version and its own source files. It
is never used when stale, when its digest does not match its body, or when it is not a plain 0600 file
of this user's (docs/decisions.md, "Start-up"). Nothing here imports pydantic.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import agentd
from agentd.edge import UnusableFile, read_bounded, read_toml
from agentd.errors import ConfigError, Problem
from agentd.resources import example_config

if TYPE_CHECKING:
    from agentd.config import Config

CONFIG_ENV = "AGENTD_CONFIG"
SYSTEM_CONFIG_DIR = Path("/etc/agentd")
CACHE_NAME = "config-cache.json"
FORMAT = 2  # the view's shape: a change here makes every cached view stale
HASHED_MAX = 1 << 20  # a file up to this size is hashed; a larger one (an interpreter) by its stat only
TREE_MAX = 5000  # a skills or sensors folder with more entries than this is not cached (too slow to key)
_PACKAGE = Path(agentd.__file__).resolve().parent


def resolve_config_path(given: str | None, agent: str | None = None) -> tuple[Path, str | None]:
    """Which identity TOML to load, and a notice when it is the embedded default.

    Order: --config, $AGENTD_CONFIG, /etc/agentd/<agent>.toml, the only TOML in /etc/agentd,
    then the embedded example (only on a machine with no /etc/agentd TOML at all).
    """
    named = [
        (source, Path(value))
        for source, value in (
            ("--config", given),
            (f"${CONFIG_ENV}", os.environ.get(CONFIG_ENV)),
            (f"--agent {agent}", str(SYSTEM_CONFIG_DIR / f"{agent}.toml") if agent else None),
        )
        if value
    ]
    if len({os.path.realpath(path) for _, path in named}) > 1:  # which agent a command acts on is never a guess
        (first, one), (second, other) = named[:2]
        raise ConfigError([Problem(first, "", f"names {one}, but {second} names {other}: give only one")])
    if named:
        return named[0][1], None
    installed = sorted(SYSTEM_CONFIG_DIR.glob("*.toml")) if SYSTEM_CONFIG_DIR.is_dir() else []
    if len(installed) == 1:
        return installed[0], None
    if installed:
        names = ", ".join(p.stem for p in installed)
        raise ConfigError([Problem(str(SYSTEM_CONFIG_DIR), "", f"several agents ({names}); pass --agent or --config")])
    path = example_config()
    return path, f"using the embedded default config {path}; pass --config for a real agent"


# --- the key ------------------------------------------------------------------------------------


def cache_key(config_path: Path, paths: list[str], trees: list[str]) -> str | None:
    """The key of everything a view was built from, as it is now; None if it cannot be known."""
    try:
        toml = read_bounded(config_path)
    except (OSError, UnusableFile):
        return None
    tree_facts = [[tree, list(tree_fingerprint(tree))] for tree in trees]
    if any(entry is None for _, entries in tree_facts for entry in entries):
        return None  # too many files to key: no view
    environ = sorted((name, value) for name, value in os.environ.items() if name.upper().startswith("AGENTD_"))
    overrides = any("__" in name for name, _ in environ)
    facts = {
        "format": FORMAT,
        "agentd": [agentd.__version__, _source_fingerprint()],
        "python": sys.version,
        "config": [str(config_path.absolute()), hashlib.sha256(toml).hexdigest()],
        "environ": environ,
        "cwd": os.getcwd() if overrides else None,  # an override's relative path is the working dir's
        "who": [os.geteuid(), os.getegid(), sorted(os.getgroups())],  # os.access answers differ by user
        "paths": [[path, file_fingerprint(path)] for path in paths],
        "trees": tree_facts,
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def file_fingerprint(path: str) -> list[Any]:
    """What a check of `path` could depend on: its kind, owner and mode; a file's content (a large one,
    an interpreter, by its size, inode and times). A folder's times are left out: the state dir's
    change with every write."""
    try:
        found = os.lstat(path)
    except OSError as exc:
        return ["absent", exc.errno]
    facts: list[Any] = [found.st_mode, found.st_uid, found.st_gid]
    if stat.S_ISLNK(found.st_mode):
        return [*facts, os.readlink(path), file_fingerprint(os.path.realpath(path))]
    if stat.S_ISREG(found.st_mode):
        content = _content_hash(path) if found.st_size <= HASHED_MAX else None
        facts += [found.st_size, content or [found.st_ino, found.st_mtime_ns, found.st_ctime_ns]]
    return facts


def _content_hash(path: str) -> str | None:
    try:
        with open(path, "rb") as file:
            return hashlib.sha256(file.read(HASHED_MAX + 1)).hexdigest()
    except OSError:
        return None


def tree_fingerprint(root: str) -> Iterator[list[Any] | None]:
    """Every entry under a folder the config loads manifests from; a None entry: too many to key."""
    yield ["root", file_fingerprint(root)]
    seen = 0
    for directory, folders, files in os.walk(root):
        folders.sort()
        for name in sorted(files + folders):
            seen += 1
            if seen > TREE_MAX:
                yield None
                return
            path = os.path.join(directory, name)
            yield [os.path.relpath(path, root), file_fingerprint(path)]


@functools.cache
def _source_fingerprint() -> list[Any]:
    """agentd's own modules by size and time: a checkout edited since the view was written (same
    version number, other rules) makes it stale. Read once per process: the code this process runs is
    what it loaded at its start."""
    found = []
    for directory, folders, files in os.walk(_PACKAGE):
        folders[:] = sorted(f for f in folders if f != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            info = os.stat(os.path.join(directory, name))
            found.append([os.path.relpath(os.path.join(directory, name), _PACKAGE), info.st_size, info.st_mtime_ns])
    return found


# --- reading and writing the view ---------------------------------------------------------------


def cache_file(state_dir: Path) -> Path:
    return state_dir / CACHE_NAME


def state_dir_hint(config_path: Path) -> Path | None:
    """Where the config's state dir should be, read from the TOML and the environment without
    validating anything: only to find the view, which must then name this very state dir."""
    path = config_path.absolute()
    try:
        given = read_toml(path)["paths"]["state_dir"]
    except (UnusableFile, KeyError, TypeError):
        return None
    override = [value for name, value in os.environ.items() if name.upper() == "AGENTD_PATHS__STATE_DIR"]
    if override:
        return Path(override[0]).absolute()
    if not isinstance(given, str):
        return None
    return Path(given) if Path(given).is_absolute() else Path(os.path.normpath(path.parent / given))


def read_view(config_path: Path) -> dict[str, Any] | None:
    """The cached view of `config_path` if it is still exactly what a full load would give; else None."""
    state_dir = state_dir_hint(config_path)
    if state_dir is None:
        return None
    cached = _cached(state_dir)
    if cached is None:
        return None
    key, paths, trees, view = cached
    if view.get("config_path") != str(config_path.absolute()) or view.get("state_dir") != str(state_dir):
        return None
    if key is None or cache_key(config_path, paths, trees) != key:
        return None
    return view


def _read_own_file(path: Path) -> str | None:
    """The file's text if it is a regular file (not a link) of this user's that no one else may write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
            return None
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def _cached(state_dir: Path) -> tuple[Any, Any, Any, dict[str, Any]] | None:
    """The view file's key, paths, trees and view, if it is whole (its digest holds) and well formed."""
    text = _read_own_file(cache_file(state_dir))
    if text is None:
        return None
    digest, _, body = text.partition("\n")
    if hashlib.sha256(body.encode()).hexdigest() != digest:
        return None  # torn or edited: never trusted
    try:
        cached = json.loads(body)
        found = cached["key"], cached["paths"], cached["trees"], cached["view"]
    except (ValueError, KeyError, TypeError):
        return None
    return found if isinstance(found[3], dict) else None


def write_view(config: Config) -> None:
    """Leave the view of a config that was just loaded in full, for the next command. Best effort: a
    state dir that does not exist yet, cannot be written or is another user's simply has no view."""
    from agentd.cli.fast.view import named_paths, view_of  # pydantic is loaded already: this is the full path

    state_dir = config.paths.state_dir
    if not _own_folder(state_dir) or config.fleet.dsn_file is not None:  # a fleet's psycopg is not in the key
        return
    paths, trees = named_paths(config)
    key = cache_key(config.path, paths, trees)
    if key is None:
        return
    if (cached := _cached(state_dir)) is not None and cached[0] == key:
        return  # the view there is this one already: the key covers everything it is made from
    body = json.dumps({"key": key, "paths": paths, "trees": trees, "view": view_of(config)}, sort_keys=True)
    _write_private(cache_file(state_dir), hashlib.sha256(body.encode()).hexdigest() + "\n" + body)


def _own_folder(state_dir: Path) -> bool:
    """A folder of the user running the command. Another user's (root's, an operator running a command
    as root in the services' state dir) gets no view: one it wrote would be a file there the services
    cannot open, and keyed to its writer, of no use to them (docs/decisions.md, "Start-up")."""
    try:
        found = os.stat(state_dir)
    except OSError:
        return False
    return stat.S_ISDIR(found.st_mode) and found.st_uid == os.geteuid()


def _write_private(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(OSError):
        os.unlink(temporary)  # left by a process of this pid that died mid-write: O_EXCL would refuse it
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
