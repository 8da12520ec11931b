"""Is each configured adapter runnable? Its binary and `--version`, or its endpoint and model —
without a model call (no tokens spent). `agentd adapters --probe`."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agentd.adapters.versions import cli_version
from agentd.config import Config
from agentd.config.environment import passthrough_environment
from agentd.process.http import client
from agentd.records import AdapterConfig, OllamaGenerateAdapterConfig

PROBE_TIMEOUT_S = 5.0
# What agentd sees of an attempt of each kind (docs/adapters.md): its tool calls, its model turns, its usage, and
# whether it shows them while it runs (docs/live.md). hermes -z prints only its final text: its tool calls and
# turns come from its session snapshots when it ends (agentd/adapters/hermes_session.py), never live;
# ollama-generate has no tools, and one turn.
OBSERVABLE: dict[str, dict[str, bool]] = {
    "claude-code": {"tools": True, "turns": True, "usage": True, "live": True},
    "codex": {"tools": True, "turns": True, "usage": True, "live": True},
    "hermes-agent": {"tools": True, "turns": True, "usage": True, "live": False},
    "ollama-generate": {"tools": False, "turns": True, "usage": True, "live": False},
    "script": {"tools": False, "turns": False, "usage": True, "live": True},
}


async def probe_adapters(config: Config) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="agentd-probe-") as scratch:
        for adapter in config.adapters.values():
            results[adapter.adapter_id] = await _probe(adapter, Path(scratch))
    return results


async def _probe(adapter: AdapterConfig, scratch: Path) -> dict[str, Any]:
    if isinstance(adapter, OllamaGenerateAdapterConfig):
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


async def _probe_endpoint(adapter: OllamaGenerateAdapterConfig) -> dict[str, Any]:
    import httpx  # only a probe of an endpoint loads it (agentd/process/http.py)

    url = adapter.endpoint.rstrip("/") + "/api/tags"
    try:
        async with client(PROBE_TIMEOUT_S) as http:
            response = await http.get(url)
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
