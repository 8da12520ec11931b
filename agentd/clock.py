"""The one source of time: a Clock to inject, and the UTC timestamp format agentd emits.

Nothing else calls datetime.now() or time.time(); tests advance a FakeClock instead of sleeping.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

from agentd.edge import decimal_number, quoted
from agentd.errors import UnreadableRow


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, never going backwards."""


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when a test says so."""

    def __init__(self, start: datetime | str = "2026-11-22T10:00:00.000000Z") -> None:
        self._now = parse_ts(start) if isinstance(start, str) else start
        self._mono = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        self._mono += seconds
        return self._now


def format_ts(moment: datetime) -> str:
    """`2026-11-22T10:00:00.000000Z`: fixed width, so text order is time order (SQLite relies on it)."""
    if moment.tzinfo is None:
        raise ValueError(f"naive datetime {moment!r}: agentd keeps every time in UTC")
    if moment.utcoffset():
        moment = moment.astimezone(UTC)
    return moment.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_ts(text: str) -> datetime:
    """Parse an ISO-8601 timestamp that carries a zone ('Z' or an offset) into UTC; a time that
    falls outside the years 1..9999 once in UTC is refused (ValueError), never an OverflowError."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not an ISO-8601 timestamp like 2026-11-22T10:00:00Z") from exc
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone; write it in UTC with a trailing Z")
    return to_utc(moment, text)


def stored_ts(text: object) -> datetime:
    """A time column as agentd writes them; UnreadableRow where an edit left anything else (a reader
    never fails with a traceback: docs/reliability.md, "Storage")."""
    try:
        return parse_ts(text)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        raise UnreadableRow(f"a time in the database is not one agentd wrote (found {quoted(text, 60)})") from None


def to_utc(moment: datetime, written: object = None) -> datetime:
    """An aware datetime in UTC; ValueError if it cannot be one (outside the years 1..9999 in UTC)."""
    try:
        return moment.astimezone(UTC)
    except (OverflowError, ValueError):
        raise ValueError(
            f"{written if written is not None else moment.isoformat()!r} is outside the years 1..9999 once in UTC"
        ) from None


def age(seconds: float) -> str:
    """Human duration: 42s, 3m12s, 2h05m, 3d04h."""
    seconds = int(max(seconds, 0))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def relative(moment: datetime, now: datetime) -> str:
    """`3m12s ago`, `in 5m00s`, or `just now` within a second. A view takes its `now` once and says every time
    of a page or a command with it, from the exact moments, never from seconds rounded apart (issue 52: `in
    1h56m` beside `in 1h57m` for one reset)."""
    seconds = (now - moment).total_seconds()
    if abs(seconds) < 1:
        return "just now"
    return f"{age(seconds)} ago" if seconds > 0 else f"in {age(-seconds)}"


def since(moment: datetime, now: datetime) -> str:
    """How long from `moment` to `now`, as `age` says it: `for 6s` in `agentd status` beside another task's."""
    return age((now - moment).total_seconds())


def ago(moment: datetime, now: datetime) -> str:
    """A timestamp for people: `2026-11-23T10:00:00Z (3m12s ago)`, or `(in 5m00s)` for the future."""
    seconds = (now - moment).total_seconds()
    relative = f"{age(seconds)} ago" if seconds >= 0 else f"in {age(-seconds)}"
    return f"{format_ts(moment)[:19]}Z ({relative})"


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_S = 100 * 365 * 86400  # a century: any longer duration is a typo, and a date then overflows


def parse_duration(text: str, bare_unit: str = "s") -> float:
    """`90s`, `15m`, `2h`, `7d` (or a bare number, in `bare_unit`) → seconds; ValueError naming the
    forms accepted. One grammar for every duration an operator types (--delay, --every, --since)."""
    value = text.strip().lower()
    unit = value[-1] if value and value[-1] in DURATION_UNITS else bare_unit
    number = value[:-1] if value and value[-1] in DURATION_UNITS else value
    amount = decimal_number(number)  # ASCII digits and a point: no sign, exponent, "1_0", "inf" or "١"
    seconds = None if amount is None else amount * DURATION_UNITS[unit]
    if seconds is None or seconds > MAX_DURATION_S:  # not a plain number, or beyond a century
        raise ValueError(f"expected a duration like 90s, 15m, 2h or 7d, found {quoted(text)}")
    return seconds


def moment_at(text: str, now: datetime) -> datetime:
    """A point in time an operator typed: an age before `now` (30m, 2h, 7d), a UTC date (its midnight), or
    an ISO-8601 time (UTC unless it names a zone); ValueError naming the forms accepted. One grammar for
    `agentd events --since` and `--until`, and the console's event filters."""
    text = text.strip()
    try:
        return now - timedelta(seconds=parse_duration(text, "s"))
    except ValueError:
        pass
    full = text + "T00:00:00" if len(text) == 10 else text  # a date alone: its midnight, UTC
    try:
        return parse_ts(full if any(c in full[10:] for c in "Zz+-") else full + "Z")
    except (ValueError, OverflowError):
        raise ValueError(
            f"expected a UTC time like 2026-11-23T10:00:00Z or an age like 30m, 2h, 7d, found {quoted(text)}"
        ) from None
