"""TOML text parsed once per process: an agent's TOML and its sensors' and skills' manifests are read
again at every config load (each CLI call in-process, each reload), and most loads see the same text.
And a manifest's problems, in one set of words for both kinds."""

from __future__ import annotations

import copy
import functools
import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from agentd import edge
from agentd.edge import UnusableFile as UnusableFile
from agentd.errors import Problem

M = TypeVar("M", bound=BaseModel)


def read_toml(path: Path) -> dict[str, Any]:
    """edge.read_toml, through the per-process cache: a fresh copy each call (callers may change what
    they get); UnusableFile says why the file cannot be used."""
    return edge.read_toml(path, _fresh_copy)


def _fresh_copy(text: str) -> dict[str, Any]:
    return copy.deepcopy(_parsed(text))


@functools.lru_cache(maxsize=128)
def _parsed(text: str) -> dict[str, Any]:
    return tomllib.loads(text)


def read_manifest(path: Path, model: type[M], **defaults: Any) -> tuple[M | None, list[Problem]]:
    """A sensor's or skill's manifest (`defaults` for keys it may leave out), or None and why not: the
    file unusable, a NUL anywhere in it, or what its model refuses."""
    source = str(path)
    try:
        raw = read_toml(path)
    except UnusableFile as exc:
        return None, [Problem(source, "", str(exc))]
    if nul := nul_problems(source, raw):
        return None, nul
    try:
        return model.model_validate(defaults | raw), []
    except ValidationError as exc:
        return None, manifest_problems(source, exc)


def manifest_problems(source: str, exc: ValidationError) -> list[Problem]:
    """A sensor's or skill's manifest refused by its model: one problem per error, in the words
    agentd's own validators wrote (without pydantic's "Value error, ")."""
    return [
        Problem(source, ".".join(str(part) for part in err["loc"]), err["msg"].removeprefix("Value error, "))
        for err in exc.errors()
    ]


def nul_problems(source: str, raw: Any, key: str = "") -> list[Problem]:
    """A NUL character is never part of a name, a path, a command or an environment: refused wherever
    it is in a TOML file, in a key or in a value."""
    if isinstance(raw, str):
        return [Problem(source, key, "contains a NUL character (\\x00); remove it")] if "\x00" in raw else []
    if isinstance(raw, dict):
        return [
            problem
            for name, value in raw.items()
            for where in [f"{key}.{name}" if key else str(name)]
            for problem in (nul_problems(source, name, where) or nul_problems(source, value, where))
        ]
    if isinstance(raw, list):
        return [
            problem for index, value in enumerate(raw) for problem in nul_problems(source, value, f"{key}[{index}]")
        ]
    return []
