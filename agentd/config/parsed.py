"""TOML text parsed once per process: an agent's TOML and its sensors' and skills' manifests are read
again at every config load (each CLI call in-process, each reload), and most loads see the same text."""

from __future__ import annotations

import copy
import functools
import tomllib
from typing import Any


def parse_toml(text: str) -> dict[str, Any]:
    """`tomllib.loads(text)`, a fresh copy each call (callers may change what they get); raises
    tomllib.TOMLDecodeError as it does."""
    return copy.deepcopy(_parsed(text))


@functools.lru_cache(maxsize=128)
def _parsed(text: str) -> dict[str, Any]:
    return tomllib.loads(text)
