"""`agentd version`: agentd's version and the specifications it implements (seed 001 §9.3: a runtime claiming
TraceCore compliance names its spec version on its CLI; docs/determinism.md)."""

from __future__ import annotations

import argparse
from typing import Any

from agentd import __version__
from agentd.cli.common import add_command, print_json, wants_json


def register(commands: Any) -> None:
    add_command(commands, "version", cmd_version, "agentd's version and the specs it implements (TraceCore, its own)")


def specs() -> dict[str, Any]:
    """Each spec by name: TraceCore's, and the versions of agentd's own evidence and event formats."""
    from agentd.evidence.layout import EVIDENCE_SPEC
    from agentd.evidence.tracecore import SPEC_VERSION
    from agentd.outlook.agent_runtime import SCHEMA_VERSION
    from agentd.store.base import EVENT_SCHEMA_VERSION

    return {
        "tracecore": SPEC_VERSION,
        "evidence_manifest": EVIDENCE_SPEC,
        "agent_runtime_events": SCHEMA_VERSION,
        "event_schema_version": EVENT_SCHEMA_VERSION,
    }


def cmd_version(args: argparse.Namespace) -> int:
    named = specs()
    if wants_json(args):
        print_json({"agentd": __version__, "specs": named})
        return 0
    print(f"agentd {__version__}")
    for name, value in named.items():
        print(f"{name}: {value}")
    return 0
