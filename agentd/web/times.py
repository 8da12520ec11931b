"""How the console says a time (issue 40): relative to the page's `now` (the service's clock, so a test's
clock is the page's), with the exact UTC second on hover and in the `datetime` attribute for a script."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jinja2 import pass_context
from markupsafe import Markup

from agentd.clock import format_ts, parse_ts, relative


def moment_of(value: datetime | str | None) -> datetime | None:
    """A time given as a datetime or stored text; None for none, or for a value that is no time."""
    if value is None or value == "":
        return None
    try:
        return value if isinstance(value, datetime) else parse_ts(str(value))
    except ValueError:
        return None


@pass_context
def when(context: Any, value: datetime | str | None) -> Markup | str:
    """A time as `<time>`: what the page says of it relative to `now` in the context; nothing for none,
    and a value that is no time as it is (escaped)."""
    if (moment := moment_of(value)) is None:
        return "" if value is None else str(value)
    exact = format_ts(moment)[:19]
    words = relative(moment, context["now"])
    return Markup('<time datetime="{}Z" title="{} UTC">{}</time>').format(exact, exact.replace("T", " "), words)


def exact(value: datetime | str | None) -> str:
    """A time to the second, as `2026-11-22 10:00:00 UTC` (no microseconds); a value that is no time as it is."""
    if (moment := moment_of(value)) is None:
        return "" if value is None else str(value)
    return format_ts(moment)[:19].replace("T", " ") + " UTC"
