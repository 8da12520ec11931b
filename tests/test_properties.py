"""Property tests of agentd's edges: for any input, the function under test succeeds or refuses the
way it documents (Refused, ConfigError, exit code 2) — never with another exception."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from support import EXAMPLE_CONFIG, REPO, examples

from agentd import edge
from agentd.attempt.outcome import Extracted, extract_outcome
from agentd.cli import main
from agentd.clock import FakeClock
from agentd.config import Config
from agentd.errors import ConfigError
from agentd.services.sensor_runs import parse_output
from agentd.work.validation import load_config

FAST = settings(max_examples=examples(300), deadline=None)
CONTROL_CHARS = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))]
LINE_BREAKS = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]

# --- text and JSON strategies ---------------------------------------------------------------------

SURROGATE = st.integers(0xD800, 0xDFFF).map(chr)
ANY_CHAR = st.one_of(st.characters(), SURROGATE, st.sampled_from(CONTROL_CHARS))
ANY_TEXT = st.one_of(
    st.text(ANY_CHAR, max_size=40),
    st.sampled_from(["", " ", "\udcff", "\ud800", "\x00", "\x1b[31m", "\u2028", "-x", "--", "x" * 5000]),
    st.integers(400, 3000).map(lambda n: "é" * n),
)

JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([edge.INT64_MAX, edge.INT64_MIN, edge.INT64_MAX + 1, edge.INT64_MIN - 1, 10**30]),
    st.floats(),
    ANY_TEXT,
)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=20,
)
TOKENS = st.one_of(
    st.sampled_from(
        [
            "NaN",
            "Infinity",
            "-Infinity",
            '"\\ud800"',
            '"\\udfff"',
            '"\\ud800\\udc00"',
            '"\\u0000"',
            "1e400",
            "-1e400",
            "1e-400",
            "9223372036854775808",
            "-9223372036854775809",
            "\ufeff",
            '"\udcff"',
        ]
    ),
    st.integers(1, 6000).map(lambda n: "9" * n),
    st.integers(1, 5000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 5000).map(lambda n: '{"a":' * n + "1" + "}" * n),
)


def render(value: Any, ensure_ascii: bool = True) -> str:
    return json.dumps(value, allow_nan=True, ensure_ascii=ensure_ascii)


@st.composite
def json_ish(draw: st.DrawFn, values: st.SearchStrategy[Any] = JSON_VALUE) -> str:
    """A rendered JSON value with up to three tokens JSON parsers disagree about spliced in."""
    text = render(draw(values), draw(st.booleans()))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(TOKENS) + text[at:]
    return text


LOADS_INPUT = st.one_of(
    ANY_TEXT,
    st.binary(max_size=60),
    json_ish(),
    json_ish().map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.integers(0, 5000).map(lambda n: "[" * n + "]" * n),
    st.integers(0, 5000).map(lambda n: '{"a":' * n + "null" + "}" * n),
    TOKENS,
)


def storable_json(value: Any) -> bytes:
    """What the store does with a value: JSON text SQLite can hold."""
    return json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")


# --- edge.loads / check_value / check_text / printable --------------------------------------------


@FAST
@given(LOADS_INPUT)
@example("[" * 5000 + "]" * 5000)
@example("9" * 5000)
@example('{"a": NaN}')
@example('["\\ud800"]')
@example(b'"\xed\xa0\x80"')
@example(b"\xff")
@example("\ufeff{}")
def test_loads_returns_storable_json_or_refuses(text: str | bytes) -> None:
    try:
        value = edge.loads(text, "x")
    except edge.Refused:
        return
    edge.check_value(value, "x")
    storable_json(value)


def _nesting(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_nesting(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_nesting(v) for v in value.values()), default=0)
    return 0


STORABLE_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(edge.INT64_MIN, edge.INT64_MAX),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),  # hypothesis leaves lone surrogates out of text by default
)
STORABLE_VALUE = st.recursive(
    STORABLE_LEAF,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


@FAST
@given(STORABLE_VALUE)
@example(json.loads("[" * edge.MAX_DEPTH + "]" * edge.MAX_DEPTH))
@example({"n": edge.INT64_MAX, "m": edge.INT64_MIN, "f": 1.7976931348623157e308, "z": -0.0})
def test_loads_round_trips_every_storable_value(value: Any) -> None:
    assume(_nesting(value) <= edge.MAX_DEPTH)  # containers at depth 0..MAX_DEPTH-1
    assert edge.loads(json.dumps(value), "x") == value
    assert edge.loads(json.dumps(value, ensure_ascii=False).encode(), "x") == value


PY_KEY = st.one_of(
    ANY_TEXT, st.integers(), st.floats(), st.none(), st.booleans(), st.tuples(st.integers()), st.binary(max_size=3)
)
PY_VALUE = st.recursive(
    st.one_of(
        JSON_LEAF,
        st.binary(max_size=5),
        st.complex_numbers(),
        st.decimals(),
        st.datetimes(),
        st.frozensets(st.integers(), max_size=2),
    ),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(PY_KEY, inner, max_size=4),
    max_leaves=20,
)


@FAST
@given(st.one_of(PY_VALUE, JSON_VALUE), ANY_TEXT)
@example([[[[]]]] * 3, "x")
@example({"\ud800": 1}, "x")
def test_check_value_raises_only_refused(value: Any, where: str) -> None:
    with contextlib.suppress(edge.Refused):
        edge.check_value(value, where)


@FAST
@given(PY_VALUE)
@example({(1,): 1})
@example({math.nan: 1})
def test_what_check_value_accepts_json_can_write(value: Any) -> None:
    """edge.py: "Nothing that passes here can make a later write fail." """
    try:
        edge.check_value(value, "x")
    except edge.Refused:
        return
    storable_json(value)


@FAST
@given(ANY_TEXT, ANY_TEXT, st.none() | st.integers(-5, 6000))
def test_check_text_raises_only_refused(text: str, where: str, max_chars: int | None) -> None:
    try:
        assert edge.check_text(text, where, max_chars) is text
    except edge.Refused:
        return
    text.encode("utf-8")
    assert max_chars is None or len(text) <= max_chars


@FAST
@given(ANY_TEXT, st.booleans())
@example("\ud800\x1b[2J\x85\u2028", False)
@example("a\nb\r\n\x00", True)
def test_printable_output_has_no_control_characters_or_surrogates(text: str, keep_newlines: bool) -> None:
    shown = edge.printable(text, keep_newlines=keep_newlines)
    allowed = {"\n"} if keep_newlines else set()
    bad = [c for c in shown if c not in allowed and (c in CONTROL_CHARS or "\ud800" <= c <= "\udfff")]
    assert not bad, (text, shown)
    shown.encode("utf-8")
    assert edge.printable(text) == edge.printable(text, keep_newlines=False)


# --- numbers an operator types ---------------------------------------------------------------------

NUMBER_TEXT = st.one_of(
    st.text(alphabet="0123456789", min_size=1, max_size=120),
    st.from_regex(r"\A[0-9]{0,8}\.?[0-9]{0,8}[smhd]?\Z"),
    st.text(alphabet=st.characters(categories=["Nd", "No"]) | st.sampled_from("0123456789_+-. eE\t"), max_size=30),
    st.sampled_from(["1_0", "+5", " 7", "7 ", "inf", "nan", "1e3", "\u0661\u0662", "\u00b2", "9" * 5000]),
)


@FAST
@given(NUMBER_TEXT)
@example("\u00b2")  # superscript two: str.isdigit() says yes, int() says no
@example("9" * 5000)  # past int()'s 4,300-digit limit
def test_a_number_is_ascii_digits_or_none(text: str) -> None:
    whole, decimal = edge.whole_number(text), edge.decimal_number(text)
    plain = 1 <= len(text) <= 100 and all(c in "0123456789" for c in text)
    assert whole == (int(text) if plain else None)
    if decimal is not None:
        assert (set(text) <= set("0123456789.") and text.count(".") == 1) or plain, text
        assert decimal == float(text)
    elif plain:
        raise AssertionError(f"{text!r} is a plain decimal")


@FAST
@given(NUMBER_TEXT, st.sampled_from(["s", "m"]))
def test_parse_duration_returns_seconds_within_a_century_or_refuses(text: str, bare_unit: str) -> None:
    from agentd.clock import MAX_DURATION_S, parse_duration

    try:
        seconds = parse_duration(text, bare_unit)
    except ValueError as exc:
        assert "expected a duration like 90s" in str(exc)
        return
    assert 0 <= seconds <= MAX_DURATION_S and math.isfinite(seconds)
    assert text.strip().isascii(), text


# --- extract_outcome -------------------------------------------------------------------------------

FIXED_TZ = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
TIMESTAMP_TEXT = st.one_of(
    st.datetimes(timezones=FIXED_TZ).map(datetime.isoformat),
    st.datetimes().map(datetime.isoformat),
    st.sampled_from(
        [
            "2026-01-01T00:00:00Z",
            "9999-12-31T23:59:59-01:00",
            "0001-01-01T00:00:00+05:00",
            "9999-12-31T23:59:59.999999Z",
            "2026-01-01",
            "2026-13-01T00:00:00Z",
            "yesterday",
        ]
    ),
)
SPECIAL_FIELD_VALUES = st.sampled_from(
    [
        "example",
        "goal-loop",
        "plan",
        "operator",
        "script",
        "../x",
        "/etc/passwd",
        "99999999999999999999999",
        "NaN",
        "1e400",
        10**30,
        -1,
        0,
        1e308,
        math.nan,
        math.inf,
        {"delay_minutes": 525_600},
        {"delay_minutes": "1e400"},
        {"workflow_id": "99999999999999999999999", "state_id": "plan", "instance_key": "k"},
        {"required_artifacts": ["../out", "/abs", "ok.txt"]},
        {"note": "hi"},
        {"sleep_s": 1e308},
    ]
)
FIELD_VALUE = st.one_of(JSON_VALUE, TIMESTAMP_TEXT, SPECIAL_FIELD_VALUES)

TASK_FIELDS = [
    "task_type",
    "source",
    "subject",
    "description",
    "priority",
    "requested_profile_id",
    "requested_adapter_id",
    "requested_model",
    "skill_ids",
    "workflow_ref",
    "schedule",
    "available_at",
    "payload",
    "evidence_requirements",
]
OUTCOME_FIELDS = [
    "status",
    "machine_status",
    "operator_summary",
    "raw_output",
    "file_changes",
    "artifact_paths",
    "workflow_signal",
    "follow_up_tasks",
    "external_messages",
]
BASE_TASK = {"task_type": "example", "source": "x", "subject": "s", "payload": {}}


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    """`base` with up to three fields set to odd values, deleted, or added."""
    table = copy.deepcopy(base)
    for _ in range(draw(st.integers(0, 3))):
        field = draw(st.sampled_from(fields) | st.text(max_size=5))
        if draw(st.integers(0, 4)) == 0:
            table.pop(field, None)
        else:
            table[field] = draw(FIELD_VALUE)
    return table


TASK_DICT = mutated(BASE_TASK, TASK_FIELDS)
OUTCOME_DICT = st.builds(
    lambda outcome, tasks: {**outcome, "follow_up_tasks": tasks} if tasks is not None else outcome,
    mutated({"status": "completed", "machine_status": "ok", "operator_summary": "done"}, OUTCOME_FIELDS),
    st.none() | st.lists(TASK_DICT, max_size=2),
)
OUTCOME_TEXT = st.one_of(
    OUTCOME_DICT.map(render), json_ish(OUTCOME_DICT), ANY_TEXT, st.sampled_from(["[]", "null", "{}", "1"])
)


@st.composite
def final_messages(draw: st.DrawFn) -> str:
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        parts.append(draw(ANY_TEXT))
        if draw(st.booleans()):
            fence = draw(st.sampled_from(["```json\n", "```json \r\n", "```json", "```\n"]))
            parts.append(fence + draw(OUTCOME_TEXT) + draw(st.sampled_from(["```", "", "\n```"])))
    return "".join(parts)


@settings(max_examples=examples(300), deadline=None)
@given(st.none() | OUTCOME_TEXT, st.none() | final_messages(), st.none() | ANY_TEXT)
@example('{"status": "completed", "machine_status": "ok", "operator_summary": NaN}', None, None)
@example(None, '```json\n{"status": "completed", "machine_status": "ok", "operator_summary": "\\ud800"}\n```', "")
def test_extract_outcome_never_raises_and_what_it_returns_is_storable(
    result_text: str | None, final_message: str | None, result_problem: str | None
) -> None:
    extracted = extract_outcome(result_text, final_message, result_problem)
    assert isinstance(extracted, Extracted)
    if extracted.outcome is not None:
        json.dumps(extracted.outcome.model_dump(mode="json"), allow_nan=False).encode()
    else:
        assert extracted.problem


# --- sensing.parse_output --------------------------------------------------------------------------


@contextlib.contextmanager
def agent_env(state_dir: Path, workspace: Path) -> Iterator[None]:
    """AGENTD_PATHS__STATE_DIR/WORKSPACE set for the block, the previous values restored after."""
    names = {"AGENTD_PATHS__STATE_DIR": str(state_dir), "AGENTD_PATHS__WORKSPACE": str(workspace)}
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def temp_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="agentd-properties-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def example_config(temp_root: Path) -> Config:
    with agent_env(temp_root / "parse" / "state", temp_root / "parse" / "workspace"):
        return load_config(EXAMPLE_CONFIG)


EVENT_FIELDS = [
    "sensor_id",
    "event_id",
    "observed_at",
    "source_ref",
    "dedupe_key",
    "freshness_deadline",
    "payload",
    "proposed_task",
    "proposed_workflow",
]
BASE_EVENT = {
    "event_id": "e1",
    "observed_at": "2026-01-01T00:00:00Z",
    "source_ref": "x",
    "dedupe_key": "k1",
    "payload": {},
    "proposed_task": BASE_TASK,
}
WORKFLOW_FIELDS = ["template", "instance_key", "state", "context"]
BASE_WORKFLOW = {"template": "goal-loop", "instance_key": "i1", "context": {}}


@st.composite
def event_dicts(draw: st.DrawFn) -> dict[str, Any]:
    event = draw(mutated(BASE_EVENT, EVENT_FIELDS))
    if isinstance(event.get("proposed_task"), dict) and draw(st.booleans()):
        event["proposed_task"] = draw(mutated(event["proposed_task"], TASK_FIELDS))
    if draw(st.booleans()):
        event["proposed_workflow"] = draw(mutated(BASE_WORKFLOW, WORKFLOW_FIELDS))
        if draw(st.booleans()):
            event.pop("proposed_task", None)
    if draw(st.booleans()):
        event["sensor_id"] = draw(st.sampled_from(["inbox", "other", ""]))
    return event


SENSOR_LINE = st.one_of(
    event_dicts().map(render),
    json_ish(event_dicts()),
    ANY_TEXT,
    st.sampled_from(["", "   ", "[]", "null", "{}", "[" * 3000 + "]" * 3000]),
)


@st.composite
def sensor_outputs(draw: st.DrawFn) -> str:
    lines = draw(st.lists(SENSOR_LINE, max_size=6))
    out = ""
    for line in lines:
        out += line + draw(st.sampled_from(LINE_BREAKS))
    return out


NOW = st.one_of(
    st.just(FakeClock().now()),
    st.datetimes(datetime(1970, 1, 1), datetime(2200, 1, 1), timezones=st.just(UTC)),
)
SENSOR_ID = st.sampled_from(["inbox", "heartbeat"]) | st.text(max_size=8)


def _judged_lines(sensor_id: str, text: str, config: Config, now: datetime) -> tuple[list[Any], list[Any]]:
    accepted, rejected = parse_output(sensor_id, text, config, now)
    expected = [n for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    assert sorted([a.line for a in accepted] + [r.line for r in rejected]) == expected
    return accepted, rejected


@settings(max_examples=examples(200), deadline=None)
@given(SENSOR_ID, sensor_outputs(), NOW)
@example("inbox", render({**BASE_EVENT, "sensor_id": "inbox"}) + "\n\n  \n{]\n", FakeClock().now())
def test_parse_output_judges_every_line_once_and_never_raises(
    example_config: Config, sensor_id: str, text: str, now: datetime
) -> None:
    _judged_lines(sensor_id, text, example_config, now)


@settings(max_examples=examples(200), deadline=None)
@given(SENSOR_ID, sensor_outputs(), NOW)
def test_parse_output_rejects_lines_for_a_reason_not_an_internal_error(
    example_config: Config, sensor_id: str, text: str, now: datetime
) -> None:
    """parse_output catches anything one line raises as `internal_error: …`: that is a bug, not a refusal."""
    _accepted, rejected = _judged_lines(sensor_id, text, example_config, now)
    internal = [r.reason for r in rejected if r.reason.startswith("internal_error")]
    assert not internal, internal


# --- config.load_config ----------------------------------------------------------------------------

BASE_RAW = tomllib.loads(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
BASE_RAW["paths"] = {"state_dir": "", "workspace": "", "skills_dir": "", "sensors_dir": ""}  # set per example


def _walk(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, node
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        yield from _walk(child, (*path, key))


LEAF_PATHS = [p for p, v in _walk(BASE_RAW) if p and not isinstance(v, dict | list)]
KEY_PATHS = [p for p, _v in _walk(BASE_RAW) if p and isinstance(p[-1], str)]
TABLE_PATHS = [p for p, v in _walk(BASE_RAW) if isinstance(v, dict)]

TOML_SCALAR = st.one_of(
    st.integers(),
    st.sampled_from([0, -1, 1, 2**63 - 1, -(2**63), 2**63, 10**17, 10**30]),
    st.floats(),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0, 5e-324]),
    st.text(st.one_of(st.characters(), st.sampled_from(CONTROL_CHARS)), max_size=30),
    st.sampled_from(
        ["", "x" * 5000, "SOUL.md", "schemas", "scripts", "/", "..", "\x00", "scripts/\x00", "goal-loop", "claude-like"]
    ),
    st.just(datetime(9999, 12, 31, tzinfo=UTC)),
    st.booleans(),
    st.datetimes(timezones=FIXED_TZ),
    st.datetimes(),
    st.dates(),
    st.times(),
)
TOML_VALUE = st.one_of(
    TOML_SCALAR,
    st.lists(TOML_SCALAR, max_size=3),
    st.dictionaries(st.text(max_size=8), TOML_SCALAR, max_size=3),
)
TOML_KEY = st.text(max_size=12) | st.sampled_from(["extra", "kind", "sandbox", "autonomy", "env", "max_turns"])

SCHEDULE_TASK = st.builds(
    lambda payload, extra: {"task_type": "example", "payload": payload, **extra},
    st.dictionaries(
        st.sampled_from(["note", "write", "fail", "sleep_s"]) | st.text(max_size=5), TOML_VALUE, max_size=3
    ),
    st.dictionaries(
        st.sampled_from(["schedule", "priority", "subject", "available_at", "source", "skill_ids", "task_type"]),
        st.one_of(TOML_VALUE, st.builds(lambda m: {"delay_minutes": m}, st.floats(0, 525_600) | TOML_SCALAR)),
        max_size=2,
    ),
)
SCHEDULE = st.fixed_dictionaries(
    {
        "schedule_id": st.sampled_from(["daily", "s-1"]) | st.text(max_size=8),
        "interval_seconds": st.one_of(st.integers(1, 10**6), st.sampled_from([0, -1, 31_536_000, 10**17]), TOML_SCALAR),
        "task": SCHEDULE_TASK,
    }
)
MUTATION = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(LEAF_PATHS), TOML_VALUE),
    st.tuples(st.just("del"), st.sampled_from(KEY_PATHS)),
    st.tuples(st.just("add"), st.sampled_from(TABLE_PATHS), TOML_KEY, TOML_VALUE),
    st.tuples(st.just("schedule"), SCHEDULE),
)


def _parent(raw: Any, path: tuple[Any, ...]) -> Any:
    node = raw
    for key in path[:-1]:
        if (isinstance(node, dict) and key in node) or (isinstance(node, list) and key < len(node)):
            node = node[key]
        else:
            return None
    return node


def apply_mutation(raw: dict[str, Any], mutation: tuple[Any, ...]) -> None:
    kind = mutation[0]
    if kind == "schedule":
        schedules = raw.setdefault("schedules", [])
        if isinstance(schedules, list):
            schedules.append(copy.deepcopy(mutation[1]))
        return
    if kind == "add":
        table = _parent(raw, (*mutation[1], None))
        if isinstance(table, dict):
            table[mutation[2]] = mutation[3]
        return
    path = mutation[1]
    parent = _parent(raw, path)
    last = path[-1]
    if isinstance(parent, dict) and kind == "del":
        parent.pop(last, None)
    elif isinstance(parent, dict) or (isinstance(parent, list) and isinstance(last, int) and last < len(parent)):
        parent[last] = mutation[2]


@pytest.fixture(scope="module")
def config_folder(temp_root: Path) -> Path:
    """A copy of config/ (SOUL.md, schemas/, scripts/ resolve against it) with an empty sensors folder."""
    folder = temp_root / "config"
    shutil.copytree(REPO / "config", folder)
    (folder / "empty-sensors").mkdir()
    return folder


def write_mutated_config(folder: Path, mutations: list[tuple[Any, ...]]) -> Path:
    raw = copy.deepcopy(BASE_RAW)
    raw["paths"] = {
        "state_dir": str(folder.parent / "state"),
        "workspace": str(folder.parent / "workspace"),
        "skills_dir": str(REPO / "skills"),
        "sensors_dir": str(REPO / "sensors"),
    }
    for mutation in mutations:
        apply_mutation(raw, mutation)
    try:
        text = tomli_w.dumps(raw)
        data = text.encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError):
        assume(False)  # not something a TOML file can say
        raise
    path = folder / "agent.toml"
    path.write_bytes(data)
    return path


def _schedule(task: dict[str, Any], interval: Any = 60) -> tuple[str, dict[str, Any]]:
    return ("schedule", {"schedule_id": "s1", "interval_seconds": interval, "task": task})


REVISED_AT = ("constitution", "revised_at")
FAR_FUTURE = datetime(9999, 12, 31, tzinfo=UTC)


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(MUTATION, min_size=1, max_size=3))
@example([])
@example([("set", ("dispatch", "poll_ceiling_s"), math.nan)])
@example([("set", ("dispatch", "backoff_max_s"), 1e308)])
@example([_schedule({"task_type": "example", "payload": {}}, 10**17)])
@example([_schedule({"task_type": "example", "payload": {"note": math.nan}})])
@example([("set", ("paths", "sensors_dir"), "empty-sensors")])
# inputs that once escaped as other exceptions, pinned:
@example([("set", ("adapters", 0, "adapter_id"), [])])
@example([("set", ("constitution", "revised_at"), date(2000, 1, 1))])  # pydantic would make it a naive midnight
@example([("add", ("payload_schemas",), "", "")])
@example([("set", ("payload_schemas", "example.payload/v1"), "")])
@example([("set", ("payload_schemas", "example.payload/v1"), "\x00")])
@example([("set", ("constitution", "soul_path"), "\x00")])
@example([("set", ("adapters", 0, "command"), "scripts/\x00")])
@example(
    [
        ("set", REVISED_AT, FAR_FUTURE),
        _schedule({"task_type": "example", "payload": {}, "schedule": {"delay_minutes": 525_600}}),
    ]
)
def test_load_config_returns_a_config_or_raises_config_error(
    config_folder: Path, mutations: list[tuple[Any, ...]]
) -> None:
    path = write_mutated_config(config_folder, mutations)
    try:
        config = load_config(path)
    except ConfigError as exc:
        assert exc.exit_code == 2 and exc.problems
        return
    assert isinstance(config, Config)


@pytest.mark.parametrize(
    ("mutation", "problem"),
    [
        (("set", ("dispatch", "poll_ceiling_s"), math.nan), "dispatch.poll_ceiling_s"),
        (("set", ("dispatch", "backoff_max_s"), 1e308), "dispatch.backoff_max_s"),
        (_schedule({"task_type": "example", "payload": {}}, 10**17), "schedules[0].interval_seconds"),
        (_schedule({"task_type": "example", "payload": {"note": math.nan}}), "schedules[0].task"),
        (("set", ("paths", "sensors_dir"), "empty-sensors"), None),
    ],
)
def test_load_config_named_poison_values(config_folder: Path, mutation: tuple[Any, ...], problem: str | None) -> None:
    """Named poison values in the TOML, each refused as a ConfigError at its key."""
    path = write_mutated_config(config_folder, [mutation])
    if problem is None:
        assert load_config(path).sensor_definitions == {}
        return
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert [p.key_path for p in refused.value.problems] == [problem]


# --- the CLI edge: task add -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_agent(temp_root: Path) -> tuple[Path, Path]:
    state, workspace = temp_root / "cli" / "state", temp_root / "cli" / "workspace"
    with agent_env(state, workspace):
        code, _out, err = run_cli(["--config", str(EXAMPLE_CONFIG), "init"])
    assert code == 0, err
    return state, workspace


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)  # argparse's refusals too come back as exit code 2, not SystemExit
    return code, out.getvalue(), err.getvalue()


VALID_PAYLOAD = st.fixed_dictionaries(
    {},
    optional={
        "note": st.text(max_size=50),
        "sleep_s": st.floats(0, 3600),
        "fail": st.sampled_from(["retryable", "permanent", "no-outcome"]),
    },
)
SUBJECT_TEXT = st.one_of(st.text(max_size=40), ANY_TEXT)
PAYLOAD_TEXT = st.one_of(
    VALID_PAYLOAD.map(render),
    ANY_TEXT,
    json_ish(),
    st.dictionaries(st.sampled_from(["note", "write", "fail", "sleep_s"]), JSON_LEAF, max_size=3).map(render),
    st.sampled_from(["{}", '{"note": "hi"}', '{"sleep_s": 1e400}', '{"note": "\\ud800"}', "[]", "{", "-x"]),
)


@settings(max_examples=examples(60), deadline=None)
@given(SUBJECT_TEXT, PAYLOAD_TEXT)
@example("\udcff", "{}")
@example("a\x1b[31m\x00b", '{"note": "\\u0000"}')
@example("x" * 501, "{}")
@example("ok", "{" * 3000)
def test_cli_task_add_exits_0_or_2_and_never_raises(cli_agent: tuple[Path, Path], subject: str, payload: str) -> None:
    argv = ["--config", str(EXAMPLE_CONFIG), "task", "add", "--type", "example", "--subject", subject]
    with agent_env(*cli_agent):
        code, _out, err = run_cli([*argv, "--payload", payload])
    assert isinstance(code, int) and code in (0, 2), (code, err)
    assert "Traceback" not in err


def test_property_inputs_cover_every_config_table() -> None:
    """The loader's mutations reach into every array of tables the example config has."""
    tables = {p[0] for p in LEAF_PATHS}
    assert {"adapters", "profiles", "task_types", "workflows", "payload_schemas", "constitution", "dispatch"} <= tables
    assert any(p[:2] == ("workflows", 0) and "states" in p for p in LEAF_PATHS)


TIMESTAMP_INPUT = st.one_of(
    st.dates(),
    st.datetimes(timezones=st.none() | st.just(UTC) | st.timezones()),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.datetimes(timezones=st.none() | st.just(UTC)).map(lambda moment: moment.isoformat()),
    ANY_TEXT,
)


@FAST
@given(TIMESTAMP_INPUT)
@example(date(2026, 1, 1))
@example(datetime(2026, 1, 1, 12))
def test_a_timestamp_is_utc_or_refused_never_naive(value: Any) -> None:
    """Every record's and section's Timestamp: an aware UTC datetime, or a ValidationError that says
    what was expected (a naive one would raise later, when compared with an aware one)."""
    from pydantic import TypeAdapter, ValidationError

    from agentd.records.base import Timestamp

    try:
        moment = TypeAdapter(Timestamp).validate_python(value)
    except ValidationError as exc:
        assert "time zone" in str(exc) or "timestamp" in str(exc).lower() or "datetime" in str(exc), exc
        return
    assert moment.tzinfo is UTC, (value, moment)


@settings(max_examples=examples(120), deadline=None)
@given(
    depth=st.integers(1, 4000),
    opening=st.sampled_from(["[", "{a = ", "[{a = "]),
    where=st.sampled_from(["agent.toml", "sensor.toml", "skill.toml"]),
)
@example(depth=330, opening="{a = ", where="agent.toml")  # tomllib's own limit, near these
@example(depth=450, opening="[", where="sensor.toml")
def test_any_nesting_in_any_toml_is_a_config_or_a_config_error(
    config_folder: Path, depth: int, opening: str, where: str
) -> None:
    """However deep the arrays and inline tables of the identity TOML or a manifest go, loading
    the config returns a Config or raises ConfigError (never RecursionError)."""
    closing = "".join("]" if mark == "[" else "}" for mark in reversed(opening.replace("{a = ", "{")))
    value = opening * depth + "1" + closing * depth
    root = config_folder.parent
    skills, sensors = root / f"skills-{where}", root / f"sensors-{where}"
    if not skills.exists():
        shutil.copytree(REPO / "skills", skills)
        (sensors / "deep").mkdir(parents=True)
        (sensors / "deep" / "sensor.toml").write_text('command = ["true"]\ndescription = "d"\ninterval_seconds = 60\n')
    target = {"sensor.toml": sensors / "deep" / "sensor.toml", "skill.toml": skills / "example" / "skill.toml"}
    original = {name: path.read_text() for name, path in target.items()}
    raw = tomllib.loads(EXAMPLE_CONFIG.read_text())
    raw["paths"] |= {"skills_dir": str(skills), "sensors_dir": str(sensors), "state_dir": str(root / "state")}
    identity = tomli_w.dumps(raw)
    try:
        if where == "agent.toml":
            identity = f"x = {value}\n" + identity
        else:
            target[where].write_text(f"x = {value}\n" + original[where])
        (config_folder / "deep.toml").write_text(identity)
        with contextlib.suppress(ConfigError):
            load_config(config_folder / "deep.toml")
    finally:
        for name, path in target.items():
            path.write_text(original[name])


ENV_NAMES = st.sampled_from(
    [
        *("AGENTD_ADAPTERS", "AGENTD_WALLETS", "AGENTD_DISPATCH", "AGENTD_PAYLOAD_SCHEMAS", "AGENTD_WEB"),
        *("AGENTD_DISPATCH__POLL_CEILING_S", "AGENTD_AGENT__DISPLAY_NAME", "AGENTD_PATHS__STATE_DIR"),
        *("AGENTD_METRICS__DISPATCH_LISTEN", "AGENTD_NOT_A_SECTION", "AGENTD_DISPATCH__NOT_A_KEY"),
    ]
)
ENV_TEXT = st.one_of(
    ANY_TEXT.filter(lambda text: "\x00" not in text),
    st.integers(1, 60_000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 60_000).map(lambda n: '{"a":' * n + "1" + "}" * n),
    JSON_VALUE.map(json.dumps),
)


@FAST
@given(st.dictionaries(ENV_NAMES, ENV_TEXT, min_size=1, max_size=3))
def test_environment_overrides_give_values_or_problems_whatever_the_text(environ: dict[str, str]) -> None:
    """Any text in any AGENTD_ variable: values to lay over the file, or problems, each line short."""
    from agentd.config.environment import environment_overrides

    values, problems = environment_overrides(environ)
    assert isinstance(values, dict)
    assert all(problem.source in environ and len(problem.message) < 400 for problem in problems), problems


@FAST
@given(st.one_of(ANY_TEXT, st.lists(ANY_TEXT, max_size=4)))
@example("echo 'open")
@example("echo \\")
@example([""])
def test_a_command_is_an_argv_to_run_or_refused_in_words(command: str | list[str]) -> None:
    """A sensor's or a skill's command: a non-empty argv whose program is named, or ValueError (which
    pydantic reports as the manifest's problem), never an IndexError later."""
    from agentd.records.base import command_argv

    try:
        argv = command_argv(command)
    except ValueError as exc:
        assert str(exc).startswith(("expected an argv", "cannot split")), exc
        return
    assert argv and argv[0]
