"""What the three harness CLIs (claude-code, codex, hermes-agent) have in common.

Each runs with a scratch HOME (and its own *_HOME) inside the attempt directory, its telemetry
and update traffic off, and its own request timeout and retries set from the adapter's timeout
so a failing provider fails in seconds; agentd's wall-clock kill stays the final bound. Their
outputs differ; `ParsedRun` is what each parser reduces its CLI's output to.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd.adapters.base import AdapterRun, AttemptContext, SubprocessAdapter, Usage
from agentd.adapters.versions import cached_version, cli_version
from agentd.evidence import make_run_dir
from agentd.records import HarnessAdapterConfig, PolicyDenial, TokenPrice
from agentd.runner import ProcessResult

RATE_LIMIT = re.compile(r"\b429\b|rate.?limit|too many requests", re.IGNORECASE)
MIN_REQUEST_TIMEOUT_MS = 5_000


@dataclass(frozen=True)
class ParsedRun:
    """A CLI's own verdict on its run, before agentd's completion gates."""

    finished: bool  # the CLI wrote its final record (False: killed, crashed, or cut off)
    succeeded: bool  # by the CLI's own success signal (is_error, turn.failed, usage.failed)
    final_message: str | None
    failure: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    diagnostics: dict[str, Any] = field(default_factory=dict)
    denials: tuple[PolicyDenial, ...] = ()  # what the CLI's permission policy or sandbox refused


def scratch(ctx: AttemptContext, name: str) -> Path:
    """A folder of the attempt's HOME for the harness's own home (CODEX_HOME, HERMES_HOME)."""
    path = ctx.paths.scratch / name
    make_run_dir(path, ctx.user)
    return path


def request_timeout_ms(adapter: HarnessAdapterConfig) -> int:
    """The CLI's per-request timeout: a third of the attempt's, so a retry still fits."""
    return max(MIN_REQUEST_TIMEOUT_MS, adapter.timeout_ms // 3)


def trusted(adapter: HarnessAdapterConfig) -> bool:
    """The trusted-VM posture, declared on the adapter: never inferred, never in extra_args."""
    return adapter.autonomy is not None and adapter.autonomy.profile == "trusted-vm"


def base_args(adapter: HarnessAdapterConfig) -> list[str]:
    return [*(adapter.autonomy.required_args or [] if adapter.autonomy else []), *(adapter.extra_args or [])]


def to_run(ctx: AttemptContext, result: ProcessResult, parsed: ParsedRun, cli_version: str | None) -> AdapterRun:
    """The AdapterRun every kind produces: the process and the CLI's verdict together."""
    ok = result.ok and parsed.finished and parsed.succeeded
    failure = None
    if not ok:
        failure = (
            result.start_error
            or parsed.failure
            or ("the CLI ended without its final record" if not parsed.finished else result.describe())
        )
    return AdapterRun(
        exit_status="timeout" if result.timed_out else ("ok" if ok else "error"),
        ok=ok,
        failure=failure,
        final_message=parsed.final_message,
        rate_limited=bool(failure and RATE_LIMIT.search(failure)),
        usage=parsed.usage,
        model=parsed.model or ctx.model,
        cli_version=cli_version,
        diagnostics={**parsed.diagnostics, **({"cli_version": cli_version} if cli_version else {})},
        process=result,
        denials=parsed.denials,
    )


def estimate_cost(usage: Usage, price: TokenPrice | None) -> Usage:
    """Price tokens with the adapter's table (for CLIs that report none), marked estimated."""
    if price is None or usage.input_tokens is None or usage.output_tokens is None:
        return usage
    cached = usage.cache_read_tokens or 0
    cached_rate = price.cached_input_per_mtok if price.cached_input_per_mtok is not None else price.input_per_mtok
    cost = (
        (usage.input_tokens - cached) * price.input_per_mtok
        + cached * cached_rate
        + usage.output_tokens * price.output_per_mtok
    ) / 1_000_000
    return Usage(
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        round(cost, 8),
        cost_estimated=True,
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every JSON object line of a JSONL stream; anything else (banners, partial lines) is skipped."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


class HarnessAdapter(SubprocessAdapter):
    """A harness CLI adapter: learns the CLI's version once, for the attempt's evidence."""

    async def prepare(self, ctx: AttemptContext) -> None:
        command = getattr(ctx.adapter, "command", None)
        if command:
            await cli_version(ctx.adapter.kind, command, ctx.paths.scratch, ctx.env.get("PATH", ""), ctx.user)

    @staticmethod
    def version(ctx: AttemptContext) -> str | None:
        command = getattr(ctx.adapter, "command", None)
        return cached_version(command) if command else None
