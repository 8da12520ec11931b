"""TOML text parsed once per process: an agent's TOML and its sensors' and skills' manifests are read
again at every config load (each CLI call in-process, each reload), and most loads see the same text."""

from __future__ import annotations

import copy
import functools
import tomllib
from pathlib import Path
from typing import Any

from agentd import edge
from agentd.edge import UnusableFile as UnusableFile


def read_toml(path: Path) -> dict[str, Any]:
    """edge.read_toml, through the per-process cache: a fresh copy each call (callers may change what
    they get); UnusableFile says why the file cannot be used."""
    return edge.read_toml(path, _fresh_copy)


def _fresh_copy(text: str) -> dict[str, Any]:
    return copy.deepcopy(_parsed(text))


@functools.lru_cache(maxsize=128)
def _parsed(text: str) -> dict[str, Any]:
    return tomllib.loads(text)
