"""Stored text never reaches a terminal with characters the operator cannot see (issue 23, 9e): bidi
overrides, zero-width and other format characters, line and paragraph separators and every control
character are printed as visible escapes (agentd/edge.py `printable`), and JSON for a terminal carries
them as \\u escapes (the same value for a parser)."""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import examples

from agentd import edge

# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): what a renderer draws as nothing.
DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)  # fmt: skip

IGNORABLE_POINTS = frozenset(point for low, high in DEFAULT_IGNORABLE for point in range(low, high + 1))


def invisible(char: str) -> bool:
    """Whether a character must never be printed as itself: controls, format characters, line and
    paragraph separators, surrogates, and whatever Unicode says renders as nothing."""
    return unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs") or ord(char) in IGNORABLE_POINTS


@functools.cache
def every_invisible() -> list[str]:
    """Every invisible code point (a walk over all 1.1 million: done once, by the worker that needs it,
    never at collection)."""
    return [chr(c) for c in range(0x110000) if invisible(chr(c))]


TRICKS = "\u202e\u2066\u2069\u200b\u200d\ufeff\u2028\u2029\x85\r\x1b[2J\u00ad\U000e0041\ufe0f"
TEXT = st.text(st.one_of(st.characters(), st.sampled_from(TRICKS)))
TEXT_TREES = st.recursive(TEXT, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3))


def test_every_invisible_character_is_printed_as_an_escape() -> None:
    shown = {char: edge.printable(char) for char in every_invisible()}
    raw = [f"U+{ord(c):04X}" for c, text in shown.items() if any(invisible(x) for x in text)]
    assert not raw, f"printed as themselves: {raw[:20]} ({len(raw)} in all)"
    assert edge.printable("\u202e") == "\\u202e" and edge.printable("\U000e0041") == "\\U000e0041"
    assert edge.printable("\x85") == "\\x85" and edge.printable("\r") == "\\x0d"


def test_visible_text_is_left_as_it_is() -> None:
    for text in ("plain", "naïve café", "日本語の文", "emoji 🙂", "שלום", "مرحبا", "a\u00a0b"):
        assert edge.printable(text) == text
    assert edge.printable("a\nb", keep_newlines=True) == "a\nb"


@settings(max_examples=examples(300), deadline=None)
@given(
    st.text(
        st.one_of(
            st.characters(), st.deferred(lambda: st.sampled_from(every_invisible()[:4000])), st.sampled_from(TRICKS)
        )
    ),
    st.booleans(),
)
@example(TRICKS, True)
def test_printable_output_shows_nothing_invisible(text: str, keep_newlines: bool) -> None:
    shown = edge.printable(text, keep_newlines=keep_newlines)
    bad = [c for c in shown if invisible(c) and not (keep_newlines and c == "\n")]
    assert not bad, (text, shown)


@settings(max_examples=examples(300), deadline=None)
@given(TEXT_TREES)
@example(["\u202e", {"k\u2028": "v\u200b"}])
def test_json_for_a_terminal_shows_nothing_invisible_and_parses_the_same(value: object) -> None:
    text = edge.visible_json(json.dumps(value, ensure_ascii=False, indent=2))
    assert not [c for c in text if invisible(c) and c != "\n"], text
    assert json.loads(text) == value


def test_what_the_cli_prints_of_stored_text_shows_nothing_invisible(cli: Any) -> None:
    """Stored text holding a bidi override and a line separator, through every way a command prints it."""
    hidden = "pay\u202egnp.exe\u2028x"
    assert cli("init").code == 0
    assert cli("task", "add", "--type", "example", "--subject", hidden).code == 0
    assert cli("dispatch", "pause", "--reason", hidden).code == 0
    for args in (["task", "show", "1"], ["task", "list"], ["task", "show", "1", "--json"], ["events", "--json"]):
        out = cli(*args).out
        assert not [c for c in out if invisible(c) and c != "\n"], (args, out)
        assert "\\u202e" in out, args
    [paused] = [e for e in cli("events", "--json").json_lines() if e["type"] == "dispatch_paused"]
    assert paused["payload"]["reason"] == hidden  # the same value for a parser
    runtime = cli("events", "--format", "agent-runtime").out
    assert not [c for c in runtime if invisible(c) and c != "\n"] and "\\u202e" in runtime


# --- what a person judges a call by: every blank shown, a cut always said (issue 50, finding 2) ----------

BLANKS = (
    " \t\n\r\x0b\x0c\x1b\x85\u00a0\u1680\u2003\u200a\u200b\u200d\u2028\u202e\u202f\u205f\u2800\u3000\ufeff\U000e0020"
)
BLANKISH = st.text(st.sampled_from(BLANKS))
MARKED = re.compile(r"… \(\+[0-9,]+ chars(?P<note>[^)]*)\)$")


def hidden(char: str) -> bool:
    """A character a person cannot see as itself: invisible, or a space of any kind but the plain one."""
    return invisible(char) or (unicodedata.category(char) == "Zs" and char != " ")


@settings(max_examples=examples(500), deadline=None)
@given(
    st.text(st.one_of(st.characters(), st.sampled_from(BLANKS), st.sampled_from(TRICKS))) | BLANKISH,
    st.integers(0, 700),
    st.integers(0, 10),
)
@example("curl x" + " " * 520 + "; touch hidden_marker", 200, 0)
@example("a" * 60 + "\u2003" * 5, 60, 0)
def test_shown_text_is_whole_or_says_it_was_cut_and_hides_nothing(text: str, limit: int, more: int) -> None:
    """For any text, what `visible_cut` shows is the whole of `visible` (every blank escaped, a run of them
    counted) or a head of it ending with the cut's marker; never a raw control, format or space character
    but the plain space, never a run of spaces, never over the limit."""
    shown, whole = edge.visible_cut(text, limit, more=more), edge.visible(text)
    assert not [c for c in shown + whole if hidden(c)], (text, shown)
    assert " " * (edge.BLANKS_KEPT + 1) not in whole and "\n" not in whole
    assert len(shown) <= max(limit, 60)
    cut = MARKED.search(shown)
    if shown != whole or more:
        assert cut is not None and whole.startswith(shown[: cut.start()]), (text, shown)
        left = int(cut.group()[4:].split(" ")[0].replace(",", ""))
        assert more <= left <= len(text) + more
    assert edge.visible(whole) == whole, "shown twice, the same"


@settings(max_examples=examples(300), deadline=None)
@given(
    st.text(st.sampled_from("curl -s https://x.org/"), max_size=80),
    BLANKISH,
    st.text(st.sampled_from("ab;_/.é日"), min_size=1, max_size=40),
)
@example("curl -s https://docs.example.org/readme", "\u2003\u00a0\u3000\u200b" * 1000, "; touch hidden_marker")
def test_no_padding_of_blanks_pushes_what_follows_out_of_a_summary(head: str, padding: str, tail: str) -> None:
    """However long a run of blanks (of a dozen kinds mixed), it takes a few dozen characters of a line: the
    text after it is still in a 500-character summary."""
    shown = edge.visible_cut(head + padding + tail, 500)
    assert shown == edge.visible(head + padding + tail) and shown.endswith(tail)
