"""The one SQLite file per agent (and a fleet's PostgreSQL): every SQL statement agentd runs.

May import: records, config, gateway, process.

`Store` is synchronous (the CLI uses it directly); `AsyncStore` runs a Store verb on a worker
thread, one hop per verb, so a whole transaction never yields to the event loop half-done.

Lazy (PEP 562): `Store`, `open_store` and the rest come from agentd/store/core.py, which loads every
verb group (and the records) the first time one is asked for; agentd/store/plain.py reads and writes
rows without them, for the CLI's fast paths (docs/decisions.md, "Start-up"), and agentd/store/facts.py reads
what a task's state is made of, for every path (docs/decisions.md, "One state for every view (issue 52)").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentd.store.core import (
        DB_NAME,
        AsyncStore,
        ChainBreak,
        Ended,
        Follow,
        Followed,
        Planner,
        Store,
        init_state_dir,
        migrate,
        open_store,
        own_state_dir,
    )

__all__ = [
    "DB_NAME",
    "AsyncStore",
    "ChainBreak",
    "Ended",
    "Follow",
    "Followed",
    "Planner",
    "Store",
    "init_state_dir",
    "migrate",
    "open_store",
    "own_state_dir",
]


def __getattr__(name: str) -> Any:
    """A name of agentd/store/core.py: imported once, then this package's own."""
    if name.startswith("__"):
        raise AttributeError(name)
    core = importlib.import_module("agentd.store.core")  # not `from … import`: that asks __getattr__ again
    if not hasattr(core, name):
        raise AttributeError(f"module 'agentd.store' has no attribute {name!r}")
    value = getattr(core, name)
    globals()[name] = value
    return value
