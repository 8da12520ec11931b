"""The adapters from the operator's side: `agentd adapters [--probe]` and `agentd cost`."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import httpx

from agentd.adapters.versions import cli_version
from agentd.cli.common import (
    add_command,
    config_from,
    count,
    print_json,
    print_table,
    record_id,
    store_from,
    wants_json,
)
from agentd.clock import format_ts, parse_ts
from agentd.config import Config, passthrough_environment
from agentd.errors import InputError
from agentd.records import AdapterConfig, OllamaGenerateAdapter, TaskAttempt

PROBE_TIMEOUT_S = 5.0


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
    cost = add_command(commands, "cost", cmd_cost, "cost and tokens per attempt, with totals by adapter and model")
    cost.add_argument("--task", type=record_id, metavar="ID", help="only this task's attempts")
    cost.add_argument("--since", metavar="TIMESTAMP", help="only attempts that ended at or after this UTC time")
    cost.add_argument("--limit", type=count, default=50, help="attempts to list (totals cover them all)")


def cmd_adapters(args: argparse.Namespace) -> int:
    config = config_from(args)
    rows = [_describe(a) for a in config.adapters.values()]
    if args.probe:
        probes = anyio.run(_probe_all, config)
        for row in rows:
            row.update(probes[row["adapter_id"]])
    if wants_json(args):
        print_json(rows)
    else:
        headers = ["ADAPTER", "KIND", "RUNS", "MODEL", "POSTURE"] + (["PROBE", "VERSION"] if args.probe else [])
        print_table(
            headers,
            [
                [r["adapter_id"], r["kind"], r["target"], r["model"] or "", r["posture"]]
                + ([r["probe"], r["version"] or ""] if args.probe else [])
                for r in rows
            ],
        )
    return 0 if not args.probe or all(r["ok"] for r in rows) else 1


def _describe(adapter: AdapterConfig) -> dict[str, Any]:
    autonomy = getattr(adapter, "autonomy", None)
    target = adapter.endpoint if isinstance(adapter, OllamaGenerateAdapter) else adapter.command
    return {
        "adapter_id": adapter.adapter_id,
        "kind": adapter.kind,
        "target": target,
        "model": getattr(adapter, "model", None),
        "posture": autonomy.profile if autonomy else "default",
    }


async def _probe_all(config: Config) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="agentd-probe-") as scratch:
        for adapter in config.adapters.values():
            results[adapter.adapter_id] = await _probe(adapter, Path(scratch))
    return results


async def _probe(adapter: AdapterConfig, scratch: Path) -> dict[str, Any]:
    if isinstance(adapter, OllamaGenerateAdapter):
        return await _probe_endpoint(adapter)
    command = adapter.command
    path = Path(command) if "/" in command else (Path(found) if (found := shutil.which(command)) else None)
    if path is None or not os.access(path, os.X_OK):
        return {"ok": False, "probe": f"not found: {command}", "version": None}
    version = None
    if adapter.kind != "script":
        version = await cli_version(adapter.kind, str(path), scratch, passthrough_environment().get("PATH", ""))
    ok = adapter.kind == "script" or version is not None
    return {"ok": ok, "probe": "found" if ok else "found, but --version failed", "version": version}


async def _probe_endpoint(adapter: OllamaGenerateAdapter) -> dict[str, Any]:
    url = adapter.endpoint.rstrip("/") + "/api/tags"
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=PROBE_TIMEOUT_S) as client:
            response = await client.get(url)
        names = [m.get("name") for m in response.json().get("models", [])] if response.status_code == 200 else []
    except (httpx.HTTPError, ValueError) as exc:
        return {"ok": False, "probe": f"unreachable: {exc}", "version": None}
    if response.status_code != 200:
        return {"ok": False, "probe": f"HTTP {response.status_code} from {url}", "version": None}
    has_model = adapter.model in names or f"{adapter.model}:latest" in names
    return {
        "ok": has_model,
        "probe": "reachable" + ("" if has_model else f"; model {adapter.model!r} not listed"),
        "version": None,
    }


def cmd_cost(args: argparse.Namespace) -> int:
    config = config_from(args)
    try:
        since = parse_ts(args.since) if args.since else None
    except ValueError as exc:
        raise InputError(f"--since: {exc}") from None
    store = store_from(config, readonly=True)
    try:
        attempts = store.attempt_usage(task_id=args.task, since=since, limit=100_000)
    finally:
        store.close()
    totals = _totals(attempts)
    if wants_json(args):
        print_json({"attempts": [_cost_row(a) for a in attempts[: args.limit]], "totals": totals})
        return 0
    print_table(
        ["TASK", "ATTEMPT", "ADAPTER", "MODEL", "IN", "OUT", "CACHE R/W", "COST USD", "ENDED"],
        [_cost_cells(a) for a in attempts[: args.limit]],
    )
    print()
    print_table(
        ["ADAPTER", "MODEL", "ATTEMPTS", "IN", "OUT", "COST USD"],
        [
            (
                t["adapter"],
                t["model"],
                t["attempts"],
                t["input_tokens"],
                t["output_tokens"],
                _usd(t["cost_usd"], t["cost_estimated"]),
            )
            for t in totals
        ],
    )
    return 0


def _cost_row(attempt: TaskAttempt) -> dict[str, Any]:
    return {
        "task_id": attempt.task_id,
        "attempt_id": attempt.attempt_id,
        "adapter_id": attempt.adapter_id,
        "model": attempt.model,
        "ended_at": format_ts(attempt.ended_at) if attempt.ended_at else None,
        **(attempt.usage or {}),
    }


def _cost_cells(attempt: TaskAttempt) -> list[Any]:
    usage = attempt.usage or {}
    cache = f"{usage.get('cache_read_tokens', '')}/{usage.get('cache_write_tokens', '')}" if usage else ""
    return [
        attempt.task_id,
        attempt.attempt_id,
        attempt.adapter_id,
        attempt.model or "",
        usage.get("input_tokens", ""),
        usage.get("output_tokens", ""),
        cache.strip("/"),
        _usd(usage.get("cost_usd"), usage.get("cost_estimated", False)),
        format_ts(attempt.ended_at) if attempt.ended_at else "",
    ]


def _usd(cost: float | None, estimated: bool) -> str:
    if cost is None:
        return "-"
    return f"{cost:.6f}" + (" (est.)" if estimated else "")


def _totals(attempts: list[TaskAttempt]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {"attempts": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": None, "cost_estimated": False}
    )
    for attempt in attempts:
        usage = attempt.usage or {}
        group = groups[(attempt.adapter_id, attempt.model or "")]
        group["attempts"] += 1
        group["input_tokens"] += usage.get("input_tokens") or 0
        group["output_tokens"] += usage.get("output_tokens") or 0
        if usage.get("cost_usd") is not None:
            group["cost_usd"] = (group["cost_usd"] or 0.0) + usage["cost_usd"]
            group["cost_estimated"] |= bool(usage.get("cost_estimated"))
    return [{"adapter": adapter, "model": model, **values} for (adapter, model), values in sorted(groups.items())]
