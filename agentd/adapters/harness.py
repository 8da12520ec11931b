"""What the three harness CLIs (claude-code, codex, hermes-agent) have in common.

Each runs with a scratch HOME (and its own *_HOME) inside the attempt directory, its telemetry
and update traffic off, and its own request timeout and retries set from the adapter's timeout
so a failing provider fails in seconds; agentd's wall-clock kill stays the final bound. Their
outputs differ; `ParsedRun` is what each parser reduces its CLI's output to.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from agentd import frozen_value
from agentd.adapters.base import AdapterRun, AttemptContext, SubprocessAdapter, Usage
from agentd.adapters.denials import compact
from agentd.adapters.versions import cached_version, cli_version
from agentd.edge import scrub
from agentd.process.files import make_run_dir
from agentd.process.output import ProcessResult
from agentd.records import HarnessAdapterConfig, PolicyDenial, TokenPrice
from agentd.usage import bounded, judge_number, quoted

RATE_LIMIT = re.compile(r"\b429\b|rate.?limit|too many requests", re.IGNORECASE)
MIN_REQUEST_TIMEOUT_MS = 5_000
FACT_MAX_CHARS = 500  # of one value a harness printed, kept in the attempt's diagnostics
FACTS_MAX = 200  # values of one list kept there (tool uses, commands)


@frozen_value
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


def json_lines(text: str) -> tuple[list[dict[str, Any]], int]:
    """Every JSON object line of a JSONL stream, and how many lines that looked like one could not be
    used. Banners and partial lines are skipped; so is a line Python's parser refuses (nested too deep,
    a number too long), whatever it is: nothing a harness prints raises here."""
    found, unusable = [], 0
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
            unusable += 1
            continue
        if isinstance(value, dict):
            found.append(value)
    return found, unusable


def fact(value: Any) -> str | int | float | bool | None:
    """A value a harness printed, as the attempt's diagnostics hold it: a number JSON and SQLite can
    hold, a bool, None, or valid text (at most FACT_MAX_CHARS; anything else as compact JSON)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return scrub(value[:FACT_MAX_CHARS])
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else quoted(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else quoted(value)
    return scrub(compact(value)[:FACT_MAX_CHARS])


def facts(values: Iterable[Any]) -> list[str | int | float | bool | None]:
    """At most FACTS_MAX of them, each a fact."""
    return [fact(value) for value in itertools.islice(values, FACTS_MAX)]


def text_or(value: Any, default: str | None = None) -> str | None:
    """A string the harness printed, or `default` when it printed anything else there."""
    return value if isinstance(value, str) and value else default


def usage_of(
    record: Mapping[str, Any], key: str, names: Mapping[str, str], where: str
) -> tuple[dict[str, tuple[Any, str]], list[str]]:
    """The token counts of `record[key]`, named as agentd names them (`names`: ours → the harness's),
    and the problems with it when it is not an object. Judged by the caller (judge_harness_usage)."""
    found = record.get(key)
    if found is None:
        return {}, []
    if not isinstance(found, Mapping):
        return {}, [f"{where}.{key}: expected an object, found {type(found).__name__}; its tokens are unknown"]
    return {ours: (found.get(theirs), f"{where}.{key}.{theirs}") for ours, theirs in names.items()}, []


def judge_harness_usage(
    reported: Mapping[str, tuple[Any, str]], problems: list[str], *, estimated: bool = False
) -> tuple[Usage, list[str]]:
    """A harness's numbers (ours → (value, where the harness printed it)) through the one judge
    (agentd/usage.py): what is not a number usage may be is unknown, and the problems say where."""
    fields: dict[str, Any] = {}
    problems = list(problems)
    for key, (value, where) in reported.items():
        fields[key], problem = judge_number(value, key)
        if problem is not None:
            problems.append(f"{where}: {problem}; recorded as unknown")
    usage = Usage(**fields, cost_estimated=estimated and fields.get("cost_usd") is not None)
    return usage, bounded(problems)


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
