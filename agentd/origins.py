"""Seed 003 §7's dispatch context words, free of every dependency: the CLI offers them as choices before
it loads a record (agentd/records/fleet.py builds the record from them)."""

from __future__ import annotations

from typing import Literal, get_args

OriginSurface = Literal["browser", "mobile", "desktop", "web", "product-api", "cli"]  # seed 003 §7, and `cli`
DispatchMode = Literal["interactive", "queued", "scheduled", "remote"]
SURFACES: tuple[str, ...] = get_args(OriginSurface)
MODES: tuple[str, ...] = get_args(DispatchMode)
