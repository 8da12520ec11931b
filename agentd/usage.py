"""What an attempt cost, judged wherever a number comes in or is read back (docs/adapters.md, "Usage and cost").

Every count is a whole number from 0 to int64, every cost a finite number from 0 to MAX_COST_USD.
A number that is not is unknown (None), and the judge says why; the rest of the report stands. The
same rule reads stored rows back, so a row written before it (or edited since) is never believed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from agentd import frozen_value


@frozen_value
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost_usd: float | None = None
    cost_estimated: bool = False


TOKEN_KINDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
USAGE_KEYS = (*TOKEN_KINDS, "cost_usd")
MAX_COST_USD = 1_000_000.0  # one attempt's cost above this is not believed: recorded as unknown
MAX_TOKENS = 2**63 - 1  # what SQLite's INTEGER holds
MAX_PROBLEMS = 20  # usage_problems kept per attempt; the count of the rest is the last one
QUOTED_CHARS = 60  # of a value a problem quotes: a number may be thousands of digits


def judge_usage(reported: Any, where: str) -> tuple[Usage, list[str]]:
    """Usage numbers as an adapter or a script reported them, judged at the edge. Anything a number
    cannot be is unknown (None), and the list says why; the rest of the report stands."""
    if reported is None:
        return Usage(), []
    if not isinstance(reported, Mapping):
        return Usage(), [f"{where}: expected an object, found {type(reported).__name__}"]
    problems = [
        f"{where}.{str(key)[:QUOTED_CHARS]}: unknown key (expected one of {', '.join(USAGE_KEYS)})"
        for key in reported
        if key not in USAGE_KEYS
    ]
    fields: dict[str, Any] = {}
    for key in USAGE_KEYS:
        judged, problem = judge_number(reported.get(key), key)
        if problem is not None:
            problems.append(f"{where}.{key}: {problem}; recorded as unknown")
        fields[key] = judged
    return Usage(**fields), problems


def rejudged(usage: Usage, where: str) -> tuple[Usage, list[str]]:
    """A Usage whatever built it, judged again: the numbers an adapter put in it may be anything."""
    judged, problems = judge_usage({key: getattr(usage, key) for key in USAGE_KEYS}, where)
    estimated = usage.cost_estimated is True and judged.cost_usd is not None
    return Usage(**{key: getattr(judged, key) for key in USAGE_KEYS}, cost_estimated=estimated), problems


def judge_number(value: Any, key: str) -> tuple[int | float | None, str | None]:
    """One reported number as `key` may hold it: (the number, None), (None, None) when there is none,
    or (None, why not)."""
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, f"expected a number, found {type(value).__name__}"
    if not math.isfinite(value) or value < 0:
        return None, f"expected a finite number of at least 0, found {quoted(value)}"
    if key == "cost_usd":
        if value > MAX_COST_USD:
            return None, f"expected at most {MAX_COST_USD:g}, found {quoted(value)}"
        return float(value), None
    if isinstance(value, float) and not value.is_integer():
        return None, f"expected a whole number, found {quoted(value)}"
    if value > MAX_TOKENS:
        return None, f"expected at most {MAX_TOKENS}, found {quoted(value)}"
    return int(value), None


def believed(value: Any, key: str) -> int | float | None:
    """A stored or counted number as `key` may hold it, else None: for readers, which never fail."""
    return judge_number(value, key)[0]


def stored_usage(row: Mapping[str, Any], estimated: Any) -> dict[str, Any] | None:
    """An attempt's usage as its row holds it, believed only where it is a number usage may be: what
    an older agentd (or an edit) stored outside that is unknown, never a failure."""
    found = {key: number for key in USAGE_KEYS if (number := believed(row.get(key), key)) is not None}
    if "cost_usd" in found:
        found["cost_estimated"] = estimated == 1
    return found or None


def bounded(problems: list[str]) -> list[str]:
    """At most MAX_PROBLEMS of them, the last saying how many more there were."""
    if len(problems) <= MAX_PROBLEMS:
        return problems
    return [*problems[: MAX_PROBLEMS - 1], f"… and {len(problems) - MAX_PROBLEMS + 1} more"]


def quoted(value: Any) -> str:
    """A value as a problem quotes it: its repr, cut short."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        return f"<{type(value).__name__}>"
    return text if len(text) <= QUOTED_CHARS else text[: QUOTED_CHARS - 1] + "…"
