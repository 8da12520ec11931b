"""When a provider's limit resets, read from the headers of the answer that said it was reached
(docs/gateway.md, "What it records").

A 429, or an error whose body names a rate or usage limit, may say when to come back: `retry-after`
(seconds, or an HTTP date), Anthropic's `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-reset`
(RFC 3339 times), OpenAI's `x-ratelimit-reset-{requests,tokens}` (durations such as `6m0s`, `20ms`,
`1h2m3.5s`). The reset is the latest of those given; a time already past is now; one further ahead than
MAX_AHEAD is not believed. Pure: a value that does not parse is left out, never raised.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

MAX_AHEAD = timedelta(days=35)  # a month's quota is the longest a provider resets; beyond this is not a reset
MAX_VALUE_CHARS = 64  # a header value longer than this is no time

ANTHROPIC_RESETS = frozenset(
    f"anthropic-ratelimit-{kind}-reset" for kind in ("requests", "tokens", "input-tokens", "output-tokens")
)
OPENAI_RESETS = frozenset({"x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"})
# Error kinds (an error's `type` or `code`) that say a limit was reached, whatever the status.
LIMIT_KINDS = frozenset({"rate_limit_error", "rate_limit_exceeded", "insufficient_quota", "usage_limit_reached"})

_SECONDS = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?")
_DURATION = re.compile(r"(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def reset_time(headers: Iterable[tuple[str, str]], now: datetime) -> datetime | None:
    """The latest reset the headers give (never before `now`), or None when none parses."""
    found = []
    for name, value in headers:
        at = header_reset(name.strip().lower(), value.strip(), now)
        if at is not None and at - now <= MAX_AHEAD:
            found.append(max(at, now))
    return max(found, default=None)


def header_reset(name: str, value: str, now: datetime) -> datetime | None:
    """The time one header says, or None (not a reset header, or a value that is no time)."""
    if len(value) > MAX_VALUE_CHARS:
        return None
    if name == "retry-after":
        return after_seconds(now, float(value)) if _SECONDS.fullmatch(value) else http_date(value)
    if name in ANTHROPIC_RESETS:
        return rfc3339(value)
    if name in OPENAI_RESETS:
        seconds = duration_s(value)
        return None if seconds is None else after_seconds(now, seconds)
    return None


def after_seconds(now: datetime, seconds: float) -> datetime | None:
    if not 0 <= seconds <= MAX_AHEAD.total_seconds():
        return None
    try:
        return now + timedelta(seconds=seconds)
    except OverflowError:  # a `now` near the calendar's end
        return None


def duration_s(value: str) -> float | None:
    """A Go duration (`1h2m3.5s`, `20ms`, `0s`) in seconds, or None."""
    if not _DURATION.fullmatch(value):
        return None
    return sum(float(number) * _UNIT_S[unit] for number, unit in _DURATION_PART.findall(value))


def http_date(value: str) -> datetime | None:
    """An HTTP date (`Wed, 21 Oct 2015 07:28:00 GMT`) as an aware UTC time, or None."""
    try:
        at = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else _utc(at)


def rfc3339(value: str) -> datetime | None:
    """An RFC 3339 time with its offset (`2026-11-22T10:00:30Z`) as an aware UTC time, or None."""
    if len(value) < 20 or value[4:5] != "-" or value[10:11] not in ("T", "t", " "):
        return None
    try:
        at = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        return None
    return None if at.tzinfo is None else _utc(at)


def _utc(at: datetime) -> datetime | None:
    try:
        return at.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 moved across an offset
        return None


def limited(status: int, body: bytes) -> bool:
    """Whether an answer says a limit was reached: a 429, or an error whose `type` or `code` names one."""
    if status == 429:
        return True
    if status < 400 or not body.lstrip().startswith(b"{"):
        return False
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):
        return False
    error = answer.get("error") if isinstance(answer, dict) else None
    kinds = [error.get("type"), error.get("code")] if isinstance(error, dict) else []
    return any(isinstance(kind, str) and kind in LIMIT_KINDS for kind in kinds)
