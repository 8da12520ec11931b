"""The records: seed 000's (and agentd's own) shapes in pydantic, read and written by every other package.

May import: nothing but the bottom modules.

Pydantic models of every seed 000 record, each with a versioned schema id.

Field names are the seed's. Where agentd needs more than the seed says, the extra field is
marked "agentd:" in its description and the JSON Schema carries it too.

Lazy (PEP 562): the names below come from agentd/records/catalog.py, imported with pydantic the first time
one is asked for. The event and status words need no model, so the store can check an event's type and
the CLI's fast paths run without pydantic (docs/decisions.md, "Start-up").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentd.records.event_names import AGENTD_EVENT_TYPES as AGENTD_EVENT_TYPES
from agentd.records.event_names import EVENT_TYPES as EVENT_TYPES
from agentd.records.event_names import SEED_EVENT_TYPES as SEED_EVENT_TYPES
from agentd.vocabulary import TASK_STATUSES as TASK_STATUSES
from agentd.vocabulary import TERMINAL_STATUSES as TERMINAL_STATUSES

# The plain values (frozen dataclasses, no pydantic): what the store reads back (agentd/records/stored.py)
# and what it takes and hands over (agentd/records/work.py). Asked for, only their module is imported.
PLAIN: dict[str, tuple[str, ...]] = {
    "agentd.records.stored": (
        "TaskRecord",
        "TaskAttempt",
        "RuntimeEvent",
        "TaskOutcomeRecord",
        "EvidenceRequirementsRecord",
        "WorkflowRefRecord",
        "STORED_RECORDS",
        "record_json",
        "event_json",
        "without_none",
    ),
    "agentd.records.work": (
        "OutboxKind",
        "OutboxStatus",
        "NewTask",
        "AttemptPlan",
        "CompiledBundle",
        "Claim",
        "ArtifactRow",
        "OutboxEntry",
        "PolicyDenial",
        "CredentialGroup",
        "ProviderReset",
        "AttemptEnd",
        "CancelResult",
        "QueueSummary",
        "LockHolder",
        "LockAttempt",
        "RunningAttempt",
        "CostTotal",
        "AdapterSpend",
        "Spend",
        "BudgetHold",
    ),
}

if TYPE_CHECKING:
    from agentd.records.catalog import *  # noqa: F403
    from agentd.records.stored import *  # noqa: F403
    from agentd.records.work import *  # noqa: F403


def __getattr__(name: str) -> Any:
    """A record (or anything else the catalog names): the catalog is imported once, then its names are
    this package's own."""
    if name.startswith("__"):
        raise AttributeError(name)
    for home, names in PLAIN.items():
        if name in names:  # a plain value: its own module, without pydantic
            module = importlib.import_module(home)
            globals().update({key: getattr(module, key) for key in names})
            return getattr(module, name)
    catalog = importlib.import_module("agentd.records.catalog")  # not `from … import`: that asks __getattr__
    globals().update({key: getattr(catalog, key) for key in catalog.__all__})
    if name not in catalog.__all__:
        raise AttributeError(f"module 'agentd.records' has no attribute {name!r}")
    return getattr(catalog, name)


def __dir__() -> list[str]:
    catalog = importlib.import_module("agentd.records.catalog")
    return sorted({*globals(), *catalog.__all__})
