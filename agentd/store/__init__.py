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
    from agentd.store.approvals import ApprovalScope
    from agentd.store.archive import ArchiveProgress, ArchiveQueue, QueuedFolder
    from agentd.store.calls import CallDecided, GateEvent, HeldCall
    from agentd.store.control import Pause, StaleApproval
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
    from agentd.store.events import EventCheckpoint
    from agentd.store.facts import CallWait, ResetWait, TaskLink, TaskPause
    from agentd.store.fleet import FleetQueue, Submission
    from agentd.store.fleet_connect import FleetUnavailable
    from agentd.store.fleet_leases import HeldLease, Taken
    from agentd.store.fleet_rows import FleetTask, Lease
    from agentd.store.retention import PrunableEvidence
    from agentd.store.steering import TaskEdit
    from agentd.store.web import Handoff, WebToken
    from agentd.store.workflows import WorkflowCancel

__all__ = [
    "DB_NAME",
    "ApprovalScope",
    "ArchiveProgress",
    "ArchiveQueue",
    "AsyncStore",
    "CallDecided",
    "CallWait",
    "ChainBreak",
    "Ended",
    "EventCheckpoint",
    "FleetQueue",
    "FleetTask",
    "FleetUnavailable",
    "Follow",
    "Followed",
    "GateEvent",
    "Handoff",
    "HeldCall",
    "HeldLease",
    "Lease",
    "Pause",
    "Planner",
    "PrunableEvidence",
    "QueuedFolder",
    "ResetWait",
    "StaleApproval",
    "Store",
    "Submission",
    "Taken",
    "TaskEdit",
    "TaskLink",
    "TaskPause",
    "WebToken",
    "WorkflowCancel",
    "init_state_dir",
    "migrate",
    "open_store",
    "own_state_dir",
]

# The store's record types (and its errors), each from the module that defines it, so that taking one loads
# that module alone, as reaching past the face did, never every verb group (docs/decisions.md, "The Store by who
# uses it (issue 53)"). Outside agentd/store/ a type is imported from here (tests/test_layers.py).
HOMES = {
    "ApprovalScope": "approvals",
    "ArchiveProgress": "archive",
    "ArchiveQueue": "archive",
    "EventCheckpoint": "events",
    "QueuedFolder": "archive",
    "CallDecided": "calls",
    "CallWait": "facts",
    "FleetQueue": "fleet",
    "FleetTask": "fleet_rows",
    "FleetUnavailable": "fleet_connect",
    "GateEvent": "calls",
    "Handoff": "web",
    "HeldCall": "calls",
    "HeldLease": "fleet_leases",
    "Lease": "fleet_rows",
    "Pause": "control",
    "PrunableEvidence": "retention",
    "ResetWait": "facts",
    "StaleApproval": "control",
    "Submission": "fleet",
    "Taken": "fleet_leases",
    "TaskEdit": "steering",
    "TaskLink": "facts",
    "TaskPause": "facts",
    "WebToken": "web",
    "WorkflowCancel": "workflows",
}


def __getattr__(name: str) -> Any:
    """A name of agentd/store/core.py (a record type: of its module in HOMES): imported once, then this
    package's own."""
    if name.startswith("__"):
        raise AttributeError(name)
    home = importlib.import_module(f"agentd.store.{HOMES.get(name, 'core')}")  # not `from … import`: that asks again
    if not hasattr(home, name):
        raise AttributeError(f"module 'agentd.store' has no attribute {name!r}")
    value = getattr(home, name)
    globals()[name] = value
    return value
