"""CLI input that overflows, poisons or tries to drive the terminal (issue: poison-proof, finding 7).

Every refusal is one line on stderr, exit 2, and nothing written."""

from __future__ import annotations

from typing import Any

import pytest

BIG = "99999999999999999999999"


def refused(cli: Any, *args: str) -> str:
    before = cli("events", "--json").json_lines()
    result = cli(*args)
    assert result.code == 2, (args, result)
    assert "Traceback" not in result.err and len(result.err.strip().splitlines()) == 1, result.err
    assert cli("events", "--json").json_lines() == before, "a refusal writes nothing"
    return str(result.err)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("task", "show", BIG), "expected an id from 1 to 9223372036854775807"),
        (("task", "cancel", BIG), "expected an id"),
        (("task", "retry", BIG), "expected an id"),
        (("task", "show", "-5"), "expected an id"),
        (("workflow", "show", BIG), "expected an id"),
        (("events", "--task", BIG), "expected an id"),
        (("events", "--after", BIG), "expected a whole number"),
        (("events", "--limit", BIG), "expected a whole number"),
        (("cost", "--task", BIG), "expected an id"),
        (("task", "list", "--limit", "-1"), "expected a whole number"),
        (("task", "add", "--type", "example", "--at", "9999-12-31T23:59:59-01:00"), "outside the years 1..9999"),
        (("task", "add", "--type", "example", "--payload", '{"x": NaN}'), "NaN is not a JSON number"),
        (("task", "add", "--type", "example", "--payload", '{"x": 1e999}'), "not a finite number"),
        (("task", "add", "--type", "example", "--payload", f'{{"x": {BIG}}}'), "64-bit integer range"),
        (("task", "add", "--type", "example", "--payload", "[" * 1500 + "]" * 1500), "nested deeper than 64"),
        (
            ("task", "add", "--type", "example", "--payload", '{"note": ' + "[" * 900 + "]" * 900 + "}"),
            "nested deeper than 64",
        ),
        (("task", "add", "--type", "example", "--subject", "x" * 5_000_000), "at most 500"),
        (("task", "add", "--type", "example", "--subject", "bad \udcff bytes"), "not valid Unicode"),
        (("task", "add", "--type", "example", "--delay", "nan"), "--delay"),
        (("task", "add", "--type", "example", "--priority", BIG), "--priority: expected 1"),
        (("schedule", "add", "s1", "--type", "example", "--every", BIG), "--every: expected a duration like"),
        (("workflow", "start", "goal-loop", "k", "--context", '{"a": NaN}'), "NaN"),
        (("task", "add", "--type", "example", "--payload", '{"note": "a", "note": "b"}'), "'note' is written twice"),
        (("workflow", "start", "goal-loop", "k", "--context", '{"a": {"b": 1, "b": 1}}'), "key 'b' is written twice"),
        # Numbers are ASCII digits: Python's int() and float() would read each of these as one.
        (("task", "show", "1_0"), "expected an id from 1"),
        (("task", "show", "\u0661\u0662"), "expected an id from 1"),  # Arabic-Indic 12
        (("task", "show", " 1"), "expected an id from 1"),
        (("events", "--limit", "+5"), "expected a whole number"),
        (("task", "retry", "1", "--attempts", "\u0663"), "expected 1 to"),
        (("task", "add", "--type", "example", "--priority", "\u0661"), "--priority: expected 1 (most urgent)"),
        (("task", "add", "--type", "example", "--priority", "abc"), "--priority: expected 1 (most urgent)"),
        (("task", "add", "--type", "example", "--delay", "1_0m"), "--delay: expected a duration like"),
        (("task", "add", "--type", "example", "--delay", "\u0661m"), "--delay: expected a duration like"),
        (("task", "add", "--type", "example", "--delay", "1e3"), "--delay: expected a duration like"),
        (("schedule", "add", "s1", "--type", "example", "--every", "infinity"), "--every: expected a duration"),
        # A count that fits a float but whose seconds overflow a date: was an OverflowError traceback.
        (("task", "add", "--type", "example", "--delay", "3000000000d"), "--delay: expected a duration like"),
        (("events", "--since", "3000000000d"), "--since: expected a UTC time"),
        (("status", "--watch", "inf"), "--watch: expected a number of seconds above 0"),
    ],
)
def test_overflowing_and_poisoned_input_is_refused_in_one_line(
    initialised: Any, args: tuple[str, ...], expected: str
) -> None:
    assert expected in refused(initialised, *args)


def test_retry_attempts_beyond_the_cap_are_refused(initialised: Any) -> None:
    assert initialised("task", "add", "--type", "example").code == 0
    assert initialised("task", "cancel", "1").code == 0
    assert "--attempts: expected 1 to 100" in refused(initialised, "task", "retry", "1", "--attempts", BIG)


def test_control_characters_are_stored_but_printed_escaped(initialised: Any) -> None:
    subject = "clear\x1b[2J title\x1b]0;owned\x07 bell\x07 nul\x00 del\x7f"
    added = initialised("task", "add", "--type", "example", "--subject", subject)
    assert added.code == 0
    assert initialised("task", "list", "--json").json()[0]["subject"] == subject  # nothing a user gave is lost
    for args in (("task", "list"), ("task", "show", "1"), ("events",)):
        shown = initialised(*args).out
        assert not any(ch in shown for ch in "\x1b\x07\x00\x7f"), (args, shown)
    assert "clear\\x1b[2J title\\x1b]0;owned\\x07" in initialised("task", "list").out
