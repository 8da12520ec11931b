"""TOML text parsed once per process: an agent's TOML and its sensors' and skills' manifests are read
again at every config load (each CLI call in-process, each reload), and most loads see the same text.
And a manifest's problems, in one set of words for both kinds."""

from __future__ import annotations

import copy
import functools
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentd import edge
from agentd.edge import UnusableFile as UnusableFile
from agentd.errors import Problem


def read_toml(path: Path) -> dict[str, Any]:
    """edge.read_toml, through the per-process cache: a fresh copy each call (callers may change what
    they get); UnusableFile says why the file cannot be used."""
    return edge.read_toml(path, _fresh_copy)


def _fresh_copy(text: str) -> dict[str, Any]:
    return copy.deepcopy(_parsed(text))


@functools.lru_cache(maxsize=128)
def _parsed(text: str) -> dict[str, Any]:
    return tomllib.loads(text)


def manifest_problems(source: str, exc: ValidationError) -> list[Problem]:
    """A sensor's or skill's manifest refused by its model: one problem per error, in the words
    agentd's own validators wrote (without pydantic's "Value error, ")."""
    return [
        Problem(source, ".".join(str(part) for part in err["loc"]), err["msg"].removeprefix("Value error, "))
        for err in exc.errors()
    ]
