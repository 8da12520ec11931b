"""What agentd accepts at its edges: values SQLite and JSON can hold, within documented limits.

One validator for every surface that brings data in (CLI arguments, sensor lines, result files, follow-up tasks,
the TOML): NaN and Infinity, lone surrogates, nesting deeper than MAX_DEPTH, integers outside int64 and oversized
text are refused with what was wrong, where, and what was expected. Nothing that passes here can make a later
write fail."""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path, PurePath
from typing import Any

from agentd.errors import InputError

MAX_DEPTH = 64  # nested objects/arrays in any JSON agentd stores (SQLite's own limit is 1000)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_SUBJECT_CHARS = 500
MAX_KEY_CHARS = 512  # a workflow's instance key, a sensor event's dedupe key
MAX_DESCRIPTION_CHARS = 64 * 1024
MAX_NOTE_CHARS = 4000  # an operator's note or reason (note_text)
MAX_PAYLOAD_BYTES = 1024 * 1024  # a task payload or workflow context, as stored JSON
MAX_RESULT_BYTES = 16 * 1024 * 1024  # result.json is read at most this far
MAX_CONFIG_FILE_BYTES = 1024 * 1024  # any file the config names is far smaller; bounds e.g. --config /dev/zero

_SURROGATE = re.compile("[\ud800-\udfff]")


class Refused(InputError, ValueError):
    """A value agentd cannot hold. A ValueError too, so pydantic validators report it as theirs."""


class NotJson(Refused):
    """Text that does not parse as JSON at all; `detail` is the parser's reason."""

    def __init__(self, where: str, detail: str) -> None:
        super().__init__(f"{where}: not JSON ({detail})")
        self.detail = detail


def loads(text: str | bytes, where: str) -> Any:
    """Parse JSON strictly: what json.loads accepts and SQLite could not hold is refused."""
    try:
        value = _parse(text)
    except Refused as exc:
        raise Refused(f"{where}: {exc}") from None
    except RecursionError:
        raise Refused(f"{where}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError as exc:
        raise NotJson(where, f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        at = f"column {exc.colno}" if exc.lineno == 1 else f"line {exc.lineno} column {exc.colno}"
        raise NotJson(where, f"{exc.msg} at {at}") from None
    except ValueError as exc:  # e.g. an integer longer than Python will parse
        raise Refused(f"{where}: not JSON agentd can hold ({exc})") from None
    check_value(value, where)
    return value


def loads_setting_aside(text: str | bytes, where: str, key: str) -> tuple[Any, Any]:
    """`loads`, except that a top-level object's `key` is taken out first and returned as it was
    written (Infinity and NaN included), for a caller that judges it on its own: an adapter's usage
    numbers are judged apart from its outcome, so a bad number cannot cost the outcome."""
    try:
        value = json.loads(text, object_pairs_hook=one_of_each)
    except RecursionError:
        raise Refused(f"{where}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except Refused as exc:
        raise Refused(f"{where}: {exc}") from None
    except ValueError:  # not JSON at all (or too big a number): `loads` says why, in its own words
        return loads(text, where), None
    aside = value.pop(key, None) if isinstance(value, dict) else None
    check_value(value, where)
    return value, aside


def _no_constant(name: str) -> Any:
    raise Refused(f"{name} is not a JSON number; agentd stores finite numbers only")


def one_of_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook for an object whose keys are each written once: with two `"priority"`
    keys, JSON readers disagree on which counts (Python's and most take the last, others the first or
    refuse), so what agentd acted on and what a reviewer's or an auditor's tool reads of the same bytes
    could differ."""
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                twice = f"the key {quoted(key)} is written twice in one object (readers disagree on which counts)"
                raise Refused(twice)
            seen.add(key)
    return found


_DECODER = json.JSONDecoder(parse_constant=_no_constant, object_pairs_hook=one_of_each)


def keys_once(text: str) -> None:
    """Refused (a ValueError) unless `text` is JSON whose every object writes each key once, for a reader
    that parses with a parser of its own (pydantic's keeps the last of two keys): NaN and Infinity, and
    what is not JSON at all, are refused too; the rest of `loads`'s checks are that reader's."""
    _DECODER.decode(text)


def _parse(text: str | bytes) -> Any:
    """json.loads with _no_constant, without building a decoder per call (as json.loads does for
    any keyword): text without a BOM goes straight to the one decoder, the rest as json.loads."""
    if isinstance(text, str) and not text.startswith("\ufeff"):
        return _DECODER.decode(text)
    return json.loads(text, parse_constant=_no_constant, object_pairs_hook=one_of_each)


class UnusableFile(ValueError):
    """A file the config names that agentd cannot use; the text says why (a Problem's words)."""


def read_bounded(path: Path, limit: int = MAX_CONFIG_FILE_BYTES) -> bytes:
    """A config file's bytes (the identity TOML, a manifest, an env_file, SKILL.md, SOUL.md), never
    more than `limit`: OSError as reading raises it; UnusableFile if there is more."""
    with open(path, "rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise UnusableFile(f"cannot read it: over {limit:,} bytes, far more than a config file holds")
    return data


def utf8_text(data: bytes) -> str:
    """`data` as Path.read_text reads a file (UTF-8, universal newlines); UnusableFile if not UTF-8."""
    try:
        return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()
    except UnicodeDecodeError as exc:
        raise UnusableFile(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None


def read_toml(path: Path, parse: Callable[[str], dict[str, Any]] | None = None) -> dict[str, Any]:
    """A TOML file as `parse` (tomllib.loads) reads it; UnusableFile if it cannot be: missing,
    unreadable, not UTF-8, too large, not TOML, or nested deeper than the parser recurses."""
    import tomllib  # only where a TOML is read: the hot commands' fast path reads one, most imports none

    try:
        text = utf8_text(read_bounded(path))
    except FileNotFoundError:
        raise UnusableFile("no such file") from None
    except OSError as exc:
        raise UnusableFile(f"cannot read it: {exc}") from None
    try:
        return (parse or tomllib.loads)(text)
    except tomllib.TOMLDecodeError as exc:
        raise UnusableFile(f"not valid TOML: {exc}") from None
    except RecursionError:  # the parser recurses once per level of arrays and inline tables
        raise UnusableFile(
            f"cannot read it: arrays or inline tables nested too deep (agentd keeps {MAX_DEPTH} levels)"
        ) from None


def check_value(value: Any, where: str) -> None:
    """Refuse NaN/Infinity, lone surrogates (in keys too), non-text keys, integers outside int64 and
    nesting deeper than MAX_DEPTH. No input can exhaust the stack: the walk that names the problem is
    iterative, and the fast one stops at MAX_DEPTH."""
    if not _plainly_storable(value):
        _explain_refusal(value, where)


def _plainly_storable(value: Any, depth: int = 0) -> bool:
    """The common case, fast: True only if `_explain_refusal` finds nothing to refuse (it builds
    every child's path to name where; most values have nothing to name). Recursive, but never
    deeper than MAX_DEPTH: deeper is False at once."""
    kind = type(value)
    if kind is dict:
        if depth >= MAX_DEPTH:
            return False
        for key, child in value.items():
            if type(key) is not str or not (key.isascii() or _SURROGATE.search(key) is None):
                return False
            if type(child) is str:  # the most common child, checked without a call
                if not (child.isascii() or _SURROGATE.search(child) is None):
                    return False
            elif not _plainly_storable(child, depth + 1):
                return False
        return True
    if kind is str:
        return value.isascii() or _SURROGATE.search(value) is None
    if kind is list:
        return depth < MAX_DEPTH and all(_plainly_storable(child, depth + 1) for child in value)
    if kind is int:
        return bool(INT64_MIN <= value <= INT64_MAX)
    if kind is float:
        return math.isfinite(value)
    return value is None or kind is bool  # anything else (subclasses too): the full walk decides


def _explain_refusal(value: Any, where: str) -> None:
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                raise Refused(f"{_abbreviated(path)}: nested deeper than {MAX_DEPTH} levels")
            stack += _children(item, path, depth)
        else:
            _check_scalar(item, path)


def _children(item: dict[Any, Any] | list[Any], path: str, depth: int) -> list[tuple[Any, str, int]]:
    if isinstance(item, list):
        return [(child, f"{path}[{index}]", depth + 1) for index, child in enumerate(item)]
    children = []
    for key, child in item.items():
        if not isinstance(key, str):
            raise Refused(f"{path}: a key must be text, found {type(key).__name__}")
        check_text(key, f"{path}: a key")
        children.append((child, f"{path}.{key}", depth + 1))
    return children


def _check_scalar(item: Any, path: str) -> None:
    if isinstance(item, str):
        check_text(item, path)
    elif isinstance(item, bool) or item is None:
        return
    elif isinstance(item, int):
        if not INT64_MIN <= item <= INT64_MAX:
            raise Refused(f"{path}: {_short(item)} is outside the 64-bit integer range")
    elif isinstance(item, float):
        if not math.isfinite(item):
            raise Refused(f"{path}: {item} is not a finite number")
    else:
        raise Refused(f"{path}: a {type(item).__name__} is not a JSON value")


def check_text(text: str, where: str, max_chars: int | None = None) -> str:
    """Text agentd can store and print: valid Unicode (no lone surrogates) within a length."""
    match = _SURROGATE.search(text)
    if match is not None:
        raise Refused(
            f"{where}: not valid Unicode (a lone surrogate U+{ord(match.group()):04X} at character {match.start()}; "
            "invalid UTF-8 bytes decode to these)"
        )
    if max_chars is not None and len(text) > max_chars:
        raise Refused(f"{where}: {len(text)} characters, expected at most {max_chars}")
    return text


def note_text(value: Any, where: str, *, required: bool = False) -> str | None:
    """An operator's note or reason (approve, deny, pause, a workflow's signal or cancel, a constitution
    decision, an evidence acceptance), judged alike from the CLI, the API and the console: text of at
    most MAX_NOTE_CHARS, no NUL, valid Unicode, kept as given. Nothing, or only blanks, is no note: None,
    or Refused where one is `required` (a deny needs a reason)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise Refused(f"{where}: expected some text, found {'nothing' if not value else 'only blanks'}")
        return None
    if not isinstance(value, str):
        raise Refused(f"{where}: expected text, found {type(value).__name__} {quoted(value, 40)}")
    if "\x00" in value:
        raise Refused(f"{where}: holds the character U+0000, which a note may not")
    return check_text(value, where, MAX_NOTE_CHARS)


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # built once, not per call


def json_kind(value: Any) -> str:
    """What kind of JSON value `value` is, as an error names it: "an array", "a string", "null", …"""
    kinds = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "true/false"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def check_json_size(value: Any, where: str, limit: int = MAX_PAYLOAD_BYTES) -> None:
    text = _COMPACT.encode(value)
    size = len(text) if text.isascii() else len(text.encode())
    if size > limit:
        raise Refused(f"{where}: {size} bytes as JSON, expected at most {limit}")


# At most 100 digits: far past any range agentd takes, and short of int()'s own 4,300-digit limit.
_WHOLE = re.compile(r"[0-9]{1,100}")
_DECIMAL = re.compile(r"(?=.{1,100}$)(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


def whole_number(text: str) -> int | None:
    """`text` as a whole number if it is ASCII digits and nothing else, else None. Python's int()
    also takes "1_000", "+5", " 7 " and other scripts' digits ("١٢" is 12); an operator's argument,
    a port or a folder's name is held to the plain form (docs/decisions.md, Numbers)."""
    return int(text) if _WHOLE.fullmatch(text) else None


def decimal_number(text: str) -> float | None:
    """`text` as a number if it is ASCII digits with at most one decimal point ("90", "0.5", ".5"),
    else None: no sign, exponent, underscore, inf or nan, which float() would take."""
    return float(text) if _DECIMAL.fullmatch(text) else None


def check_id(value: int, where: str) -> int:
    """A database id: 1 up to the largest SQLite integer."""
    if not 1 <= value <= INT64_MAX:
        raise Refused(f"{where}: expected an id from 1 to {INT64_MAX}, found {_short(value)}")
    return value


def scrub(text: str) -> str:
    """Text an adapter reported (not a record it asked us to store): lone surrogates become U+FFFD
    so the report can be kept as evidence instead of refused."""
    return _SURROGATE.sub("\ufffd", text)


def scrub_value(value: Any) -> Any:
    """`scrub` over a JSON-like structure; non-finite floats become None, oversized ints text."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub(str(k)): scrub_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_value(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        return str(value)
    return value


# What a terminal must never be handed as itself: every control character (C0, DEL, C1), Unicode's
# format characters (Cf: bidi embeddings, overrides and isolates, zero-width spaces and joiners, the
# BOM, tag characters), the line and paragraph separators (Zl, Zp) and the rest of what Unicode calls
# Default_Ignorable (drawn as nothing: variation selectors, Hangul fillers, …). Ranges, not a walk over
# unicodedata at import (that costs a tenth of a second per command); tests/test_invisible_text.py
# holds them to unicodedata's categories.
_C0 = "\x00-\x1f"
_INVISIBLE_BUT_C0 = (
    "\x7f-\x9f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160"
    "\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0"
    "\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e0fff"
)
_CONTROL = re.compile(f"[{_C0}{_INVISIBLE_BUT_C0}]")
_CONTROL_BUT_NEWLINE = re.compile(f"(?!\n)[{_C0}{_INVISIBLE_BUT_C0}]")
_IN_JSON = re.compile(f"[{_INVISIBLE_BUT_C0}\ud800-\udfff]")  # json.dumps escapes C0 itself


def _escape(match: re.Match[str]) -> str:
    return _escaped(match.group())


def _escaped(char: str) -> str:
    point = ord(char)
    return f"\\x{point:02x}" if point <= 0xFF else f"\\u{point:04x}" if point <= 0xFFFF else f"\\U{point:08x}"


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """Text safe to print on a terminal or in a log line: control characters (ESC and friends, and
    newlines unless kept) and characters drawn as nothing or that reorder what follows (bidi
    overrides, zero-width characters, U+2028) shown as escapes (`\\x1b`, `\\u202e`), so stored data
    can never drive the operator's terminal or hide from the operator's eyes."""
    pattern = _CONTROL_BUT_NEWLINE if keep_newlines else _CONTROL
    return pattern.sub(_escape, scrub(text))


# What `visible` never shows as itself: every character drawn as blank or as nothing (all whitespace, what
# `printable` escapes, and U+2800, the braille blank, which no category calls a space but fonts draw as one).
_BLANK = f"\\s{_C0}{_INVISIBLE_BUT_C0}\u2800"
_PIECE = re.compile(f"([{_BLANK}]+)|[^{_BLANK}]+")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
BLANKS_KEPT = 4  # a run of at most this many blanks is shown one by one; a longer one as its count
SHOWN_WINDOW_CHARS = 4096  # of a longer text, what `visible_cut` is given: a held call's input whole


def visible(text: str) -> str:
    """`text` on one line with nothing in it drawn as blank but single spaces (docs/policy.md, "Asking a
    person"): every other whitespace, control or invisible character is an escape (`\\n`, `\\x1b`, `\\u2003`),
    and a run of more than BLANKS_KEPT of them is its count and its kinds (`⟨520 × \\x20⟩`), so no padding
    can push what follows out of a line a person reads."""
    return "".join(shown for shown, _, _ in _pieces(scrub(text)))


def visible_cut(text: str, limit: int, *, more: int = 0, note: str = "") -> str:
    """`visible(text)` in at most `limit` characters (at least 60). A longer one, or one `more` characters of
    the whole followed that `text` does not hold, is cut and ends `… (+N chars{note})`: never a cut unsaid."""
    text, limit, pieces, width = scrub(text), max(limit, 60), [], 0
    for piece in _pieces(text):
        pieces.append(piece)
        width += len(piece[0])
        if width > limit:
            break
    else:
        if not more:
            return "".join(shown for shown, _, _ in pieces)
    room, head, used = limit - len(f"… (+{len(text) + more:,} chars{note})"), "", 0
    for shown, size, plain in pieces:
        if len(shown) > room:  # text drawn as itself may be cut inside; an escape or a run's count may not
            cut = shown[: max(0, room)] if plain else ""
            head, used = head + cut, used + len(cut)
            break
        head, room, used = head + shown, room - len(shown), used + size
    return f"{head}… (+{len(text) - used + more:,} chars{note})"


def _pieces(text: str) -> Iterator[tuple[str, int, bool]]:
    """`text` as `visible` shows it, piece by piece: (what is shown, how many characters of `text` it is,
    whether it is text drawn as itself rather than a run of blanks)."""
    for match in _PIECE.finditer(text):
        run = match.group()
        if match.group(1) is None:
            yield run, len(run), True
        elif len(run) <= BLANKS_KEPT:
            yield "".join(" " if char == " " else _blank(char) for char in run), len(run), False
        else:
            yield f"⟨{len(run)} × {' '.join(_blank(char) for char in dict.fromkeys(run))}⟩", len(run), False


def _blank(char: str) -> str:
    return _NAMED.get(char) or _escaped(char)


def json_escape(char: str) -> str:
    """One character as JSON's \\uXXXX escape (a UTF-16 surrogate pair past U+FFFF)."""
    point = ord(char)
    if point <= 0xFFFF:
        return f"\\u{point:04x}"
    point -= 0x10000
    return f"\\u{0xD800 + (point >> 10):04x}\\u{0xDC00 + (point & 0x3FF):04x}"  # JSON's surrogate pair


def _json_escape(match: re.Match[str]) -> str:
    return json_escape(match.group())


def visible_json(text: str) -> str:
    """JSON text (json.dumps with ensure_ascii=False) for a terminal: the characters `printable`
    escapes are written as JSON \\u escapes, so a parser reads the same value and a person sees them.
    Outside strings JSON has only ASCII whitespace, so only string contents change."""
    return _IN_JSON.sub(_json_escape, text)


def quoted(value: Any, limit: int = 120) -> str:
    """`repr(value)` for an error line, cut in the middle past `limit` characters: what a bad input
    looked like, never the whole of a megabyte of it."""
    return cut(repr(value), limit)


def cut(text: str, limit: int) -> str:
    """`text` cut in the middle to at most `limit` characters (at least 60), saying how long it was: a
    message that quotes what it refuses (jsonschema's do, whole) stays readable."""
    if len(text) <= limit:
        return text
    tail = f"…{text[-20:]} ({len(text):,} characters)"
    return text[: max(limit, 60) - len(tail)] + tail


_LONG_RUN = re.compile(r"[^\s'\"]{1001,}")  # far past any path or name a message means to show whole


def cut_long_runs(text: str) -> str:
    """`text` with each run of over 1,000 characters without a space or a quote cut in the middle, with
    its length: an error line that echoes what it refuses stays a line (a path, even a long one, stays)."""
    return _LONG_RUN.sub(lambda run: f"{run[0][:200]}…{run[0][-40:]} ({len(run[0]):,} characters)", text)


def _abbreviated(path: str) -> str:
    return path if len(path) <= 80 else f"{path[:40]}…{path[-30:]}"


def _short(value: int) -> str:
    text = str(value)
    return text if len(text) <= 30 else f"{text[:12]}…({len(text)} digits)"


def resolves_inside(root: Path, relative: str | PurePath) -> bool:
    """Whether `relative` under `root` stays inside `root` once its links are followed. A link loop
    leads nowhere inside: resolve() raises RuntimeError for one on Python 3.11 (OSError on later
    ones), which agentd once recorded as its own crash."""
    try:
        return (root / relative).resolve().is_relative_to(root.resolve())
    except (RuntimeError, OSError):
        return False


# The tail of an adapter's stderr a failed attempt shows (docs/operate.md, "When an attempt fails"): at most
# this many lines of at most this many characters, read from at most this many bytes at the file's end.
TAIL_LINES = 12
TAIL_WIDTH = 300
TAIL_BYTES = 8192


def tail_lines(data: bytes, *, cut: bool) -> list[str]:
    """The last lines of a log's end (`data`; `cut`: the file goes on before it, so its first line is
    a part, dropped unless it is all there is), each printable and cut to its last TAIL_WIDTH characters
    (the cause is at a line's end), blank lines at the end left out."""
    lines = data.decode("utf-8", "replace").splitlines()
    if cut and len(lines) > 1:
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines.pop()
    shown = [printable(line) for line in lines[-TAIL_LINES:]]
    return [line if len(line) <= TAIL_WIDTH else "…" + line[1 - TAIL_WIDTH :] for line in shown]
