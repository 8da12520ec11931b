"""The adapters from the operator's side: `agentd adapters [--probe]`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from agentd.cli.common import add_command, config_from, print_json, print_table, wants_json

if TYPE_CHECKING:
    from agentd.records import AdapterConfig


def register(commands: Any) -> None:
    adapters = add_command(
        commands,
        "adapters",
        cmd_adapters,
        "the configured adapters; --probe checks each is runnable without spending tokens",
    )
    adapters.add_argument(
        "--probe", action="store_true", help="binary found and its version, or endpoint reachable (no model call)"
    )


def cmd_adapters(args: argparse.Namespace) -> int:
    config = config_from(args)
    rows = [_describe(a) for a in config.adapters.values()]
    if args.probe:
        import anyio

        from agentd.adapters.probe import probe_adapters

        probes = anyio.run(probe_adapters, config)
        from agentd.adapters.probe import OBSERVABLE

        for row in rows:
            row.update(probes[row["adapter_id"]], observable=OBSERVABLE[row["kind"]])
    if wants_json(args):
        print_json(rows)
    else:
        headers = ["ADAPTER", "KIND", "RUNS", "MODEL", "POSTURE"] + (
            ["PROBE", "VERSION", "OBSERVES"] if args.probe else []
        )
        print_table(
            headers,
            [
                [r["adapter_id"], r["kind"], r["target"], r["model"] or "", r["posture"]]
                + ([r["probe"], r["version"] or "", _observes(r)] if args.probe else [])
                for r in rows
            ],
        )
    return 0 if not args.probe or all(r["ok"] for r in rows) else 1


def _describe(adapter: AdapterConfig) -> dict[str, Any]:
    from agentd.records import OllamaGenerateAdapterConfig

    autonomy = getattr(adapter, "autonomy", None)
    target = adapter.endpoint if isinstance(adapter, OllamaGenerateAdapterConfig) else adapter.command
    return {
        "adapter_id": adapter.adapter_id,
        "kind": adapter.kind,
        "target": target,
        "model": getattr(adapter, "model", None),
        "posture": autonomy.profile if autonomy else "default",
    }


def _observes(row: dict[str, Any]) -> str:
    """What agentd sees of the adapter's attempts (agentd/adapters/probe.py OBSERVABLE): `tools turns usage live`."""
    return " ".join(name for name, seen in row["observable"].items() if seen) or "-"
