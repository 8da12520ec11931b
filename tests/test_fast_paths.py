"""The fast paths agree with what they stand in front of, for any input: the compiled schema check
never says yes where jsonschema says no, check_value refuses exactly what its explaining walk refuses
(in its words), the prebuilt JSON encoders write json.dumps's bytes, and a ULID is still 48 bits of
milliseconds then 80 random bits, a sensor line read in one pass is what the careful reading gives, and
a frozen_value is a frozen dataclass."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import operator
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from support import EXAMPLE_CONFIG
from test_properties import ANY_TEXT, BASE_TASK, FAST, JSON_VALUE, PY_VALUE, SENSOR_ID, SENSOR_LINE

from agentd import edge
from agentd.clock import FakeClock
from agentd.config import Config
from agentd.evidence import EVIDENCE_FILES, MANIFEST_SCHEMA
from agentd.hashing import (
    canonical_json,
    canonical_object,
    chain_hash,
    chain_hash_of,
    event_body_text,
    new_ulid,
    random_tails,
)
from agentd.records import NewTask, TaskIntent
from agentd.schema_check import MAX_MESSAGE_CHARS, MAX_NAMED, SchemaCheck, compile_check, well_formed
from agentd.services import sensor_runs
from agentd.store.base import dumps
from agentd.work.intake import admit_task

# --- the compiled schema check -----------------------------------------------------------------

KEYS = ["a", "b", "c"]
SMALL_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-4, 4),
    st.sampled_from([1.0, -0.5, 2.5, 10**20]),
    st.text("ab01", max_size=3),
)
INSTANCE = st.recursive(
    SMALL_LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3),
    max_leaves=10,
)
TYPES = ["object", "array", "string", "integer", "number", "boolean", "null"]
NUMBER = st.one_of(st.integers(-3, 3), st.sampled_from([-0.5, 0.0, 1.5]))
LEAF_SCHEMA = st.one_of(
    st.just(True),
    st.builds(lambda t: {"type": t}, st.sampled_from(TYPES) | st.lists(st.sampled_from(TYPES), min_size=1, max_size=3)),
    st.builds(lambda v: {"const": v}, st.text("ab01", max_size=2)),
    st.builds(lambda vs: {"enum": vs}, st.lists(st.text("ab01", max_size=2), min_size=1, max_size=3)),
    st.builds(lambda p: {"pattern": p}, st.sampled_from(["^a", "1$", "[0-9]", "^$"])),
    st.builds(lambda k, n: {k: n}, st.sampled_from(["minLength", "maxLength"]), st.integers(0, 3)),
    st.builds(
        lambda k, n: {k: n}, st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]), NUMBER
    ),
    st.builds(
        lambda k, n: {k: n},
        st.sampled_from(["minItems", "maxItems", "minProperties", "maxProperties"]),
        st.integers(0, 2),
    ),
    st.just({"format": "date-time", "title": "annotations only", "description": "x"}),
)


def merged(schemas: list[dict[str, Any] | bool]) -> dict[str, Any] | bool:
    out: dict[str, Any] = {}
    for schema in schemas:
        if isinstance(schema, dict):
            out.update(schema)
    return out


SCHEMA = st.recursive(
    LEAF_SCHEMA,
    lambda inner: st.one_of(
        st.builds(
            lambda props, required, extra: {"properties": props, "required": required, "additionalProperties": extra},
            st.dictionaries(st.sampled_from(KEYS), inner, max_size=3),
            st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
            st.booleans() | inner,
        ),
        st.builds(lambda items: {"type": "array", "items": items}, inner),
        st.builds(lambda names: {"propertyNames": names}, inner),
        st.builds(lambda subs: {"anyOf": subs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda subs: {"allOf": subs}, st.lists(inner, min_size=1, max_size=3)),
        st.lists(inner, min_size=2, max_size=3).map(merged),
    ),
    max_leaves=8,
)


@FAST
@given(SCHEMA, INSTANCE)
@example({"type": "integer"}, 1.0)
@example({"type": "integer"}, True)
@example({"type": ["number", "null"]}, False)
@example({"maxLength": 1}, "ab")
@example({"properties": {"a": {"const": "a"}}, "additionalProperties": False}, {"a": "a", "b": 1})
@example({"enum": ["a"]}, True)
@example({"properties": {"a": {"minimum": 1}}}, {"a": True})
def test_the_compiled_check_says_yes_only_where_jsonschema_does(schema: Any, instance: Any) -> None:
    check = compile_check(schema)
    assert check is not None, f"every keyword generated here is in the subset: {schema}"
    if check(instance):
        assert Draft202012Validator(schema).is_valid(instance), (schema, instance)


SHA = "0" * 64
MANIFEST = {
    "spec_version": "agentd-evidence/v1",
    "run_id": "01M84Q9MV6396C92HAPZQVSSG0",
    "runtime_identity": {"agentd_version": "0.1.0", "host": "vm", "agent_id": "demo", "runner_id": "r"},
    "agent_ref": {
        "agent": "demo",
        "profile": "operator",
        "variant_id": "v",
        "variant": {"skills": [{"skill_id": "example", "version": "1"}], "agent_def_version": None},
    },
    "task_ref": {"task_id": 1, "task_type": "noop", "task_type_version": 1, "attempt_number": 1},
    "task_hash": SHA,
    "bundle_hash": None,
    "constitution": {"soul_hash": SHA, "purpose_hash": SHA, "version": "1"},
    "adapter": {"adapter_id": "noop", "kind": "script", "argv": ["/bin/true"], "command_sha256": SHA},
    "model": None,
    "model_pin": None,
    "action_trace": {"steps": 1, "tool_calls": 0, "digest": SHA},
    "budgets": {"timeout_s": 30.0},
    "started_at": "2026-11-23T17:29:40.963930Z",
    "completed_at": "2026-11-23T17:29:40.987961Z",
    "wall_clock_elapsed_s": 0.024,
    "termination_reason": "exited",
    "failure_type": None,
    "exit_status": "ok",
    "side_effects": "possible",
    "redactions": {"count": 0},
    "outcome": {"status": "completed", "machine_status": "ok", "next_status": "completed", "gate_reasons": []},
    "artifacts": [{"role": "output", "path": "out.txt", "sha256": None}],
    "files": {name: {"sha256": SHA, "bytes": 0} for name in EVIDENCE_FILES},
    "artifact_hash": SHA,
}


@st.composite
def tampered(draw: st.DrawFn) -> Any:
    """The manifest with one to three edits anywhere in it: a value replaced, a key removed or added."""
    manifest = copy.deepcopy(MANIFEST)
    for _ in range(draw(st.integers(1, 3))):
        node: Any = manifest
        while True:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = draw(st.sampled_from(keys))
            if isinstance(node[key], dict | list) and node[key] and draw(st.booleans()):
                node = node[key]
                continue
            action = draw(st.sampled_from(["replace", "remove", "add"]))
            if action == "replace":
                node[key] = draw(INSTANCE | JSON_VALUE)
            elif action == "remove":
                del node[key]
            elif isinstance(node, dict):
                node[draw(ANY_TEXT)] = draw(INSTANCE)
            break
    return manifest


def test_a_sealed_manifest_passes_the_compiled_check() -> None:
    check = compile_check(MANIFEST_SCHEMA)
    assert check is not None and check(MANIFEST) and Draft202012Validator(MANIFEST_SCHEMA).is_valid(MANIFEST)


@FAST
@given(tampered())
def test_the_compiled_manifest_check_says_yes_only_where_jsonschema_does(manifest: Any) -> None:
    check = compile_check(MANIFEST_SCHEMA)
    assert check is not None
    if check(manifest):
        assert Draft202012Validator(MANIFEST_SCHEMA).is_valid(manifest)


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/x", "$defs": {"x": {}}},
        {"oneOf": [{}, {}]},
        {"not": {"type": "string"}},
        {"patternProperties": {"^a": {}}},
        {"items": False},
        {"enum": [1, "a"]},
        {"const": 1},
        {"uniqueItems": True},
        {"x-unknown": 1},
        False,
    ],
)
def test_outside_the_subset_there_is_no_fast_yes(schema: Any) -> None:
    assert compile_check(schema) is None


def test_the_example_payload_schema_compiles() -> None:
    schema = json.loads((EXAMPLE_CONFIG.parent / "schemas" / "example.payload.json").read_text())
    check = compile_check(schema)
    assert check is not None and check({"note": "hi"}) and not check({"note": 1}) and not check({"other": 1})


# --- the schema's own check (config load) ---------------------------------------------------------

# Values a keyword of the subset may be given, valid or not: the fast yes must never take a bad one.
ODD_VALUE = st.one_of(
    st.integers(-2, 2),
    st.sampled_from([1.0, -1.5, float("inf"), True, None, "", "a", "[", "(?P<x>", "string", "Object"]),
    st.lists(st.sampled_from(["a", "a", "b", 1, "string", "null"]), max_size=3),
    st.dictionaries(st.sampled_from(KEYS), st.sampled_from([{}, True, 1, "x", {"type": "x"}]), max_size=2),
)
KEYWORDS = [
    "type", "const", "enum", "pattern", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "items", "anyOf", "allOf", "minItems", "maxItems", "minProperties", "maxProperties",
    "properties", "required", "additionalProperties", "propertyNames", "title", "description", "$comment",
    "$defs", "$schema", "$id", "format", "examples", "default", "deprecated", "readOnly", "contentEncoding",
    "x-unknown", "$ref",
]  # fmt: skip
ODD_SCHEMA = st.recursive(
    st.dictionaries(st.sampled_from(KEYWORDS), ODD_VALUE, max_size=3) | st.booleans() | st.integers(0, 1),
    lambda inner: st.one_of(
        st.dictionaries(st.sampled_from(["items", "additionalProperties", "propertyNames"]), inner, max_size=2),
        st.builds(lambda key, subs: {key: subs}, st.sampled_from(["anyOf", "allOf"]), st.lists(inner, max_size=2)),
        st.builds(
            lambda key, subs: {key: subs},
            st.sampled_from(["properties", "$defs"]),
            st.dictionaries(st.sampled_from(KEYS), inner, max_size=2),
        ),
    ),
    max_leaves=6,
)  # fmt: skip


def schema_is_valid(schema: Any) -> bool:
    try:
        Draft202012Validator.check_schema(schema)
    except Exception:  # SchemaError, or what a non-schema makes jsonschema raise
        return False
    return True


@FAST
@given(ODD_SCHEMA)
@example({"minLength": -1})
@example({"type": ["string", "string"]})
@example({"required": ["a", "a"]})
@example({"pattern": "("})
@example({"anyOf": []})
@example({"title": 1})
@example({"minimum": True})
def test_the_schema_fast_yes_never_passes_what_jsonschema_refuses(schema: Any) -> None:
    if well_formed(schema):
        assert schema_is_valid(schema), schema


@FAST
@given(SCHEMA)
def test_every_valid_schema_of_the_subset_is_judged_without_jsonschema(schema: Any) -> None:
    assume(schema_is_valid(schema))  # the strategy may repeat a type name, which the metaschema refuses
    assert well_formed(schema), schema  # the config's usual schemas never load jsonschema


def test_the_example_payload_schemas_are_judged_without_jsonschema() -> None:
    for name in ("example.payload.json", "goal.payload.json"):
        assert well_formed(json.loads((EXAMPLE_CONFIG.parent / "schemas" / name).read_text())), name


# --- check_value, the encoders, ULIDs ------------------------------------------------------------


@FAST
@given(st.one_of(PY_VALUE, JSON_VALUE), ANY_TEXT)
@example(json.loads("[" * edge.MAX_DEPTH + "]" * edge.MAX_DEPTH), "x")
@example(json.loads("[" * (edge.MAX_DEPTH + 1) + "]" * (edge.MAX_DEPTH + 1)), "x")
@example({"a": [{"\ud800": 1}]}, "x")
@example({"a": "\ud800"}, "x")
@example(["ok", "\udfff"], "x")
@example({"a": [math.nan]}, "x")
@example({"a": (1, 2)}, "x")
@example({1: "a"}, "x")
@example({"n": edge.INT64_MAX + 1}, "x")
def test_check_value_refuses_what_its_explaining_walk_refuses_in_its_words(value: Any, where: str) -> None:
    def verdict(check: Any) -> str | None:
        try:
            check(value, where)
        except edge.Refused as exc:
            return str(exc)
        return None

    assert verdict(edge.check_value) == verdict(edge._explain_refusal)


@FAST
@given(JSON_VALUE)
def test_the_prebuilt_encoders_write_json_dumps_bytes(value: Any) -> None:
    def outcome(encode: Callable[[], Any]) -> Any:
        try:
            return encode()
        except ValueError as exc:  # NaN refused, or a lone surrogate UTF-8 cannot hold
            return type(exc)

    options: dict[str, Any] = {"separators": (",", ":"), "ensure_ascii": False, "allow_nan": False}
    assert outcome(lambda: canonical_json(value)) == outcome(
        lambda: json.dumps(value, sort_keys=True, **options).encode()
    )
    assert outcome(lambda: dumps(value)) == outcome(lambda: json.dumps(value, **options))


CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@FAST
@given(st.integers(0, (datetime(9999, 12, 31, tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)))
@example(0)
def test_a_ulid_is_its_milliseconds_then_80_random_bits(millis: int) -> None:
    moment = EPOCH + timedelta(milliseconds=millis)
    ulid = new_ulid(FakeClock(moment))
    assert len(ulid) == 26 and set(ulid) <= set(CROCKFORD)
    value = 0
    for char in ulid:
        value = value * 32 + CROCKFORD.index(char)
    assert value >> 80 == int(moment.timestamp() * 1000) and value < 2**128


@FAST
@given(st.binary(min_size=0, max_size=70))
@example(bytes(range(256)))
def test_random_tails_are_16_characters_of_5_random_bits_each(random: bytes) -> None:
    """Each character of a tail is its byte's low 5 bits (every value of a byte, so each character is
    uniform): 16 bytes make the 80 random bits of one id."""
    tails = random_tails(random)
    assert len(tails) == len(random) // 16 and all(len(tail) == 16 for tail in tails)
    assert "".join(tails) == "".join(CROCKFORD[byte % 32] for byte in random[: len(tails) * 16])


def test_ulids_made_at_once_are_all_different() -> None:
    clock = FakeClock(datetime(2026, 11, 25, tzinfo=UTC))
    made = [new_ulid(clock) for _ in range(2_000)]  # several refills of the pool of tails
    assert len(set(made)) == len(made) and len({ulid[:10] for ulid in made}) == 1


def test_a_forked_child_never_draws_its_parents_next_ulid() -> None:
    """The pool of random tails is the process's own: a child forked with tails left in it draws fresh ones."""
    clock = FakeClock(datetime(2026, 11, 25, tzinfo=UTC))
    new_ulid(clock)  # the pool now holds the parent's next tails
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: its next id, then out without pytest's teardown
        os.write(write, "".join(new_ulid(clock) for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        drawn = pipe.read().decode()
    assert os.waitpid(child, 0)[1] == 0
    children = {drawn[i : i + 26] for i in range(0, len(drawn), 26)}
    assert len(children) == 3 and not children & {new_ulid(clock) for _ in range(3)}


ID_TEXT = st.one_of(st.none(), ANY_TEXT)
ID_NUMBER = st.one_of(st.none(), st.integers(), st.booleans(), st.sampled_from([1.5, -0.0, 10**30]))
BODY = st.fixed_dictionaries(
    {
        "event_id": ANY_TEXT,
        "type": ANY_TEXT,
        "timestamp": ANY_TEXT,
        "sequence": st.integers(),
        "schema_version": st.integers() | st.just(1),
        "task_id": ID_NUMBER,
        "attempt_id": ID_TEXT,
        "workflow_id": ID_NUMBER,
        "schedule_id": ID_TEXT,
        "sensor_id": ID_TEXT,
        "payload": st.one_of(st.just({}), st.dictionaries(ANY_TEXT, JSON_VALUE, max_size=4), JSON_VALUE),
        "refs": st.one_of(st.just({}), st.dictionaries(ANY_TEXT, JSON_VALUE, max_size=3)),
    }
)


@FAST
@given(BODY, st.text("0123456789abcdef", min_size=64, max_size=64))
@example(
    {
        "event_id": "01J",
        "type": "task_enqueued",
        "timestamp": "2026-11-25T00:00:00.000000Z",
        "sequence": 1,
        "schema_version": 1,
        "task_id": 7,
        "attempt_id": None,
        "workflow_id": None,
        "schedule_id": None,
        "sensor_id": "inbox",
        "payload": {"b": 1, "a": [math.nan]},
        "refs": {},
    },
    "0" * 64,
)
def test_the_event_body_writer_writes_canonical_json_bytes(body: dict[str, Any], prev_hash: str) -> None:
    """The append's writer and canonical_json of the body dict (what evidence verify rebuilds and
    hashes) give the same bytes, or fail alike, for any field values."""

    def outcome(encode: Callable[[], Any]) -> Any:
        try:
            return encode()
        except ValueError as exc:  # NaN refused, or a lone surrogate UTF-8 cannot hold
            return type(exc)

    fields = (
        *(body[k] for k in ("event_id", "type", "timestamp", "sequence", "schema_version", "task_id")),
        *(body[k] for k in ("attempt_id", "workflow_id", "schedule_id", "sensor_id", "payload", "refs")),
    )

    def event_body_json(*values: Any) -> bytes:  # as the append writes it (agentd/store/base.py)
        *about, payload, refs = values
        return event_body_text(*about, canonical_object(payload), canonical_object(refs)).encode()

    assert outcome(lambda: event_body_json(*fields)) == outcome(lambda: canonical_json(body))
    written = outcome(lambda: chain_hash_of(prev_hash, event_body_json(*fields)))
    assert written == outcome(lambda: chain_hash(prev_hash, body))


# --- a task admitted ------------------------------------------------------------------------------

INTENTS = [
    {"task_type": "example", "source": "t", "payload": {}},
    {
        "task_type": "example",
        "source": "t",
        "subject": "s",
        "description": "d",
        "priority": 2,
        "payload": {"note": "n"},
    },
    {"task_type": "example", "source": "t", "payload": {}, "schedule": {"delay_minutes": 5}, "skill_ids": ["example"]},
    {"task_type": "example", "source": "t", "payload": {}, "evidence_requirements": {"required_artifacts": ["a"]}},
    {
        "task_type": "example",
        "source": "t",
        "payload": {},
        "workflow_ref": {"workflow_id": 1, "state_id": "s", "instance_key": "k"},
    },
]


@pytest.mark.parametrize("require_approval", [False, True])
@pytest.mark.parametrize("intent", INTENTS)
def test_an_admitted_task_is_the_newtask_its_fields_make(
    config: Config, intent: dict[str, Any], require_approval: bool
) -> None:
    """admit_task builds its NewTask without the dataclass's __init__: every field is there (none
    missing, none extra, no default_factory left unmade) and it equals NewTask(**its fields)."""
    now = datetime(2026, 11, 25, tzinfo=UTC)
    task = admit_task(TaskIntent.model_validate(intent), config, now, trusted=True, require_approval=require_approval)
    fields = dataclasses.fields(NewTask)
    assert all(f.default_factory is dataclasses.MISSING for f in fields)
    assert set(vars(task)) == {f.name for f in fields}
    assert task == NewTask(**{f.name: getattr(task, f.name) for f in fields})
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.subject = "changed"  # type: ignore[misc]


# --- a sensor line in one pass --------------------------------------------------------------------


def read_carefully(sensor_id: str, line: str) -> Any:
    try:
        return sensor_runs._read_carefully(sensor_id, line)
    except sensor_runs._Rejected as exc:
        return f"rejected: {exc}"


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


EVENT = {"event_id": "e", "observed_at": "2026-01-01T00:00:00Z", "source_ref": "x", "dedupe_key": "k", "payload": {}}
STALE = {**EVENT, "freshness_deadline": "2000-01-01T00:00:00Z"}
WORKFLOW_REF = {"workflow_id": 2**70, "state_id": "s", "instance_key": "i"}


@FAST
@given(SENSOR_ID, SENSOR_LINE)
@example("inbox", json.dumps({**EVENT, "payload": {"deep": nested(edge.MAX_DEPTH - 1)}}))  # the line: 64 deep
@example("inbox", json.dumps({**EVENT, "proposed_task": {**BASE_TASK, "payload": {"d": nested(edge.MAX_DEPTH - 2)}}}))
@example("inbox", json.dumps({**STALE, "proposed_task": {**BASE_TASK, "workflow_ref": WORKFLOW_REF}}))
@example("inbox", json.dumps({**STALE, "proposed_task": {**BASE_TASK, "priority": 2**70}}))
@example("inbox", "\xa0" + json.dumps(EVENT))
@example("inbox", json.dumps(EVENT)[:-1] + ', "sensor_id": "other"}')
@example("inbox", json.dumps(EVENT)[:-1] + ', "sensor_id": null}')
@example("inbox", json.dumps(EVENT)[:-1] + ', "sensor_id": "inbox", "sensor_id": "inbox"}')
@example("inbox", json.dumps(EVENT).replace('"x"', '"\\ud800"'))
@example("inbox", json.dumps({**EVENT, "payload": {"n": 2**63}}))
@example("inbox", json.dumps({**EVENT, "payload": {"n": math.inf}}))
@example("inbox", "{}")
@example("inbox", " { } ")
def test_a_line_read_at_once_is_what_the_careful_reading_accepts(sensor_id: str, line: str) -> None:
    at_once = sensor_runs._read_at_once(sensor_id, line)
    if at_once is not None:
        carefully = read_carefully(sensor_id, line)
        assert at_once == carefully, (line, carefully)
        assert at_once.model_fields_set == carefully.model_fields_set


def test_the_benchmark_line_is_read_at_once() -> None:
    line = json.dumps({**EVENT, "proposed_task": {"task_type": "example", "source": "x", "payload": {}}})
    assert sensor_runs._read_at_once("inbox", line) == read_carefully("inbox", line)


# --- frozen_value: a frozen dataclass built with fewer compiled methods ----------------------------

FIELD_VALUE = st.one_of(PY_VALUE, st.floats(allow_nan=True), st.tuples(st.integers(), st.text(max_size=3)))


def sample_class(decorator: Callable[[type], type], *, options: bool = False) -> type:
    """The same class body under either decorator (so both share a qualname)."""

    class Sample:
        first: Any
        second: Any = None
        third: Any = dataclasses.field(default=0, repr=not options, compare=not options)
        fourth: Any = dataclasses.field(default=1, hash=False if options else None)

    return decorator(Sample)


STDLIB_FROZEN = dataclasses.dataclass(frozen=True)


def outcome(operation: Callable[..., Any], *operands: Any) -> tuple[str, Any]:
    """What an operation gave: its value, or the type and text of the error it raised."""
    try:
        return ("value", operation(*operands))
    except Exception as exc:  # the error is the outcome compared
        return ("raised", (type(exc), str(exc)))


@FAST
@given(values=st.lists(FIELD_VALUE, min_size=4, max_size=4), others=st.lists(FIELD_VALUE, min_size=4, max_size=4))
@example(values=[None, None, None, Decimal("sNaN")], others=[None, None, None, 0.0])  # == raises, in both
@example(values=[[], None, None, None], others=[[], None, None, None])  # unhashable, in both
@pytest.mark.parametrize("options", [False, True], ids=["plain fields", "repr, compare and hash options"])
def test_a_frozen_value_behaves_as_a_frozen_dataclass(options: bool, values: list[Any], others: list[Any]) -> None:
    from agentd import frozen_value

    made, reference = sample_class(frozen_value, options=options), sample_class(STDLIB_FROZEN, options=options)
    for first, second in ((values, values), (values, others), (values, [*values[:3], others[3]])):
        a, b = made(*first), made(*second)
        ra, rb = reference(*first), reference(*second)
        # Each operation gives the same value, or raises the same error (a Decimal('sNaN') field makes
        # == raise InvalidOperation, an unhashable field makes hash raise TypeError, in both).
        assert outcome(repr, a) == outcome(repr, ra)
        assert outcome(operator.eq, a, b) == outcome(operator.eq, ra, rb)
        assert outcome(operator.ne, a, b) == outcome(operator.ne, ra, rb)
        assert outcome(hash, a) == outcome(hash, ra)  # both hash the same tuple of fields
        assert (a == ra) is False and a.__eq__(1) is NotImplemented
        assert repr(dataclasses.astuple(a)) == repr(dataclasses.astuple(ra))
    for attempt in (lambda o: setattr(o, "first", 1), lambda o: delattr(o, "first"), lambda o: setattr(o, "new", 1)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            attempt(made(*values))
    assert [f.name for f in dataclasses.fields(made)] == [f.name for f in dataclasses.fields(reference)]
    assert made.__match_args__ == reference.__match_args__ and made.__doc__ == reference.__doc__


def test_a_frozen_value_compiles_half_the_methods_a_frozen_dataclass_does(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from agentd import frozen_value

    compiled: list[str] = []
    real_exec = builtins.exec

    def counting_exec(source: Any, *args: Any) -> None:
        compiled.append(str(source).split("(")[0])
        real_exec(source, *args)

    monkeypatch.setattr(builtins, "exec", counting_exec)
    sample_class(STDLIB_FROZEN)
    by_dataclass, compiled[:] = len(compiled), []
    sample_class(frozen_value)
    monkeypatch.undo()
    assert by_dataclass == 6 and len(compiled) == 3, compiled


def test_a_frozen_value_keeps_the_methods_its_class_defines() -> None:
    from agentd import frozen_value

    @frozen_value
    class Own:
        a: int

        def __repr__(self) -> str:
            return "own"

        def __eq__(self, other: object) -> bool:
            return True

    assert repr(Own(1)) == "own" and Own(1) == Own(2)
    assert type(hash(Own(1))) is int  # __eq__ alone leaves __hash__ None: dataclass adds one, so does this


def test_every_frozen_dataclass_of_agentd_is_a_frozen_value() -> None:
    """A plain `@dataclass(frozen=True)` compiles three methods more at every start (agentd/__init__.py)."""
    from support import REPO

    found = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "agentd").rglob("*.py"))
        if path.name != "__init__.py" or path.parent.name != "agentd"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if line.strip().startswith("@dataclass(") and "frozen=True" in line
    ]
    assert found == [], "use agentd.frozen_value"


def test_a_schema_check_names_the_first_twenty_errors_each_cut_and_counts_the_rest() -> None:
    """What every error line about a schema is built from (a payload, a manifest): jsonschema quotes the
    whole instance in its message, and names every error of a list of thousands."""
    check = SchemaCheck({"type": "array", "items": {"type": "string", "maxLength": 5}})
    named, more = check.named(["x" * 10_000, *range(99)], key=lambda e: list(e.path))
    assert [list(error.path) for error, _ in named] == [[n] for n in range(MAX_NAMED)] and more == 100 - MAX_NAMED
    assert named[0][1].endswith("' is too long (10,014 characters)"), named[0][1]
    assert all(len(message) <= MAX_MESSAGE_CHARS for _, message in named)
    assert named[1][1] == "0 is not of type 'string'"  # short messages are jsonschema's own, whole
    assert check.named(["ok"], key=str) == ([], 0)
