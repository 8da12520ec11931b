"""When a limit resets, from the headers of the answer that said it was reached (agentd/gateway/resets.py):
each provider's form, the latest of those given, None when none parses, and no value that raises."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

from agentd.gateway.resets import MAX_AHEAD, duration_s, limited, reset_time

NOW = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("headers", "reset"),
    [
        ([("retry-after", "30")], at(30)),
        ([("Retry-After", " 0 ")], NOW),
        ([("retry-after", "1.5")], at(1.5)),
        ([("retry-after", "Sun, 22 Nov 2026 10:02:00 GMT")], at(120)),
        ([("retry-after", "Sun, 22 Nov 2026 09:00:00 GMT")], NOW),  # already past: it resets now
        ([("anthropic-ratelimit-requests-reset", "2026-11-22T10:00:45Z")], at(45)),
        ([("anthropic-ratelimit-tokens-reset", "2026-11-22T11:00:45+01:00")], at(45)),
        ([("anthropic-ratelimit-input-tokens-reset", "2026-11-22T10:01:00.5Z")], at(60.5)),
        ([("anthropic-ratelimit-output-tokens-reset", "2026-11-22T10:00:10z")], at(10)),
        ([("x-ratelimit-reset-requests", "6m0s")], at(360)),
        ([("x-ratelimit-reset-tokens", "1s")], at(1)),
        ([("x-ratelimit-reset-tokens", "20ms")], at(0.02)),
        ([("x-ratelimit-reset-requests", "1h2m3.5s")], at(3723.5)),
        ([("retry-after", "5"), ("x-ratelimit-reset-tokens", "1m"),
          ("anthropic-ratelimit-requests-reset", "2026-11-22T10:00:20Z")], at(60)),
        ([("retry-after", "soon"), ("x-ratelimit-reset-tokens", "7s")], at(7)),
        ([("retry-after", "soon")], None),
        ([("anthropic-ratelimit-requests-reset", "2026-11-22T10:00:45")], None),  # no offset: no time
        ([("anthropic-ratelimit-requests-reset", "1766400000")], None),
        ([("x-ratelimit-reset-requests", "6m0")], None),
        ([("x-ratelimit-reset-requests", "-1s")], None),
        ([("retry-after", "99999999")], None),  # years ahead: not believed
        ([("x-ratelimit-reset-requests", "99999h")], None),
        ([("x-ratelimit-limit-requests", "60"), ("content-type", "application/json")], None),
        ([], None),
    ],
)  # fmt: skip
def test_the_reset_is_the_latest_time_the_headers_give(headers: list[tuple[str, str]], reset: datetime | None) -> None:
    assert reset_time(headers, NOW) == reset


def test_a_go_duration_reads_as_seconds() -> None:
    assert duration_s("1h2m3.5s") == 3723.5
    assert duration_s("1.5m") == 90
    assert duration_s("250us") == pytest.approx(0.00025)
    assert duration_s("") is None and duration_s("s") is None and duration_s("5") is None


@pytest.mark.parametrize(
    ("status", "body", "answer"),
    [
        (429, b"", True),
        (200, b'{"error": {"type": "rate_limit_error"}}', False),
        (400, b'{"error": {"type": "invalid_request_error"}}', False),
        (403, b'{"error": {"type": "insufficient_quota", "message": "quota"}}', True),
        (500, b'{"type": "error", "error": {"type": "rate_limit_error"}}', True),
        (404, b'{"error": {"code": "usage_limit_reached"}}', True),
        (503, b"<html>", False),
        (503, b"{not json", False),
        (400, b'{"error": "rate_limit_error"}', False),
    ],
)
def test_a_limit_is_a_429_or_an_error_naming_one(status: int, body: bytes, answer: bool) -> None:
    assert limited(status, body) is answer


header_names = st.sampled_from(
    [
        "retry-after",
        "anthropic-ratelimit-requests-reset",
        "anthropic-ratelimit-tokens-reset",
        "x-ratelimit-reset-requests",
        "x-ratelimit-reset-tokens",
        "other",
    ]
)
values = st.text(max_size=40) | st.sampled_from(
    ["0", "1e999", "9" * 30, "Mon, 01 Jan 0001 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 -2359",
     "0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59-23:59", "1.5h3m", ".5s", "5.s", "NaNs"]
)  # fmt: skip


@settings(max_examples=examples(400))
@given(headers=st.lists(st.tuples(header_names, values), max_size=6))
def test_any_header_values_never_raise_and_the_reset_is_within_bounds(headers: list[tuple[str, str]]) -> None:
    reset = reset_time(headers, NOW)
    assert reset is None or NOW <= reset <= NOW + MAX_AHEAD
    assert reset_time(list(reversed(headers)), NOW) == reset  # the latest, in whatever order


@settings(max_examples=examples(200))
@given(seconds=st.integers(min_value=0, max_value=int(MAX_AHEAD.total_seconds())))
def test_each_form_of_the_same_reset_gives_the_same_time(seconds: int) -> None:
    hours, rest = divmod(seconds, 3600)
    minutes, rest = divmod(rest, 60)
    stamp = at(seconds).isoformat().replace("+00:00", "Z")
    forms = [("retry-after", str(seconds)), ("x-ratelimit-reset-tokens", f"{hours}h{minutes}m{rest}s"),
             ("anthropic-ratelimit-tokens-reset", stamp)]  # fmt: skip
    for form in forms:
        assert reset_time([form], NOW) == at(seconds), form


@settings(max_examples=examples(200))
@given(status=st.integers(min_value=100, max_value=599), body=st.binary(max_size=200))
def test_any_answer_is_judged_limited_or_not_without_raising(status: int, body: bytes) -> None:
    assert limited(status, body) in (True, False)
