"""A JSON Schema (2020-12) subset compiled once into one plain Python predicate: the fast yes.

`compile_check(schema)` returns a function that says True only where jsonschema's
Draft202012Validator finds no error, or None when the schema uses a keyword outside the subset.
Callers ask it first and run jsonschema only when it says no (or is None): jsonschema then
names the errors, so every message and every verdict stays jsonschema's. The predicate may be
stricter than jsonschema (an integer written 1.0, an enum of numbers), never looser; the property
tests hold it to that.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from agentd.edge import cut

Check = Callable[[Any], bool]
MAX_NAMED = 20  # errors named per instance; the rest are counted
MAX_MESSAGE_CHARS = 300

# Keywords Draft202012Validator does not assert without a format checker, or that only matter to
# a `$ref`, which the subset refuses: their presence changes no verdict.
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "$defs", "title", "description", "default", "examples", "format"}
    | {"deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding"}
)
_TYPES: dict[str, Check] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: type(v) is int,  # jsonschema also takes 1.0: that one goes to jsonschema
    "number": lambda v: type(v) is int or type(v) is float,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_NOT_NUMBERS = (str, dict, list, bool, type(None))  # what a bound on numbers lets through untouched


class _Unsupported(Exception):
    pass


class SchemaCheck:
    """One schema's judge: the compiled fast yes first; jsonschema (imported, and its validator built,
    only the first time the fast yes is not a yes) to name every error."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self.fast = compile_check(schema)
        self._validator: Any = None

    def named(self, instance: Any, key: Callable[[Any], Any]) -> tuple[list[tuple[Any, str]], int]:
        """The first MAX_NAMED errors in `key` order, each with its message cut to MAX_MESSAGE_CHARS
        (jsonschema quotes the whole instance: a 400 kB string, 20,000 extra keys), and how many more
        there were. What every error line about a schema says, so none is megabytes long."""
        errors = sorted(self.errors(instance), key=key)
        return [(e, cut(e.message, MAX_MESSAGE_CHARS)) for e in errors[:MAX_NAMED]], max(len(errors) - MAX_NAMED, 0)

    def errors(self, instance: Any) -> list[Any]:
        """jsonschema's ValidationErrors for `instance`, unsorted; [] at once when the fast yes says yes."""
        if self.fast is not None and self.fast(instance):
            return []
        if self._validator is None:
            from jsonschema import Draft202012Validator  # not at import: the CLI starts without it

            self._validator = Draft202012Validator(self.schema)
        return list(self._validator.iter_errors(instance))


def schema_problem(schema: Any) -> str | None:
    """Why `Draft202012Validator.check_schema` refuses the schema, or None; a schema `well_formed`
    vouches for never imports jsonschema."""
    if well_formed(schema):
        return None
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return str(exc.message)
    return None


def compile_check(schema: Any) -> Check | None:
    """The schema's fast yes, or None if it uses anything outside the subset."""
    try:
        return _compile(schema)
    except _Unsupported:
        return None


def _compile(schema: Any) -> Check:
    if schema is True:
        return lambda _v: True
    if not isinstance(schema, dict):
        raise _Unsupported  # false schemas: jsonschema says no, and names why
    if (fused := _fused(schema)) is not None:
        return fused
    checks = [_object(schema)] if any(name in schema for name in _OBJECT_KEYWORDS) else []
    for name, value in schema.items():
        if name in _ANNOTATIONS or name in _OBJECT_KEYWORDS:
            continue
        compiler = _COMPILERS.get(name)
        if compiler is None:
            raise _Unsupported
        checks.append(compiler(value))
    if len(checks) == 1:
        return checks[0]

    def every(value: Any) -> bool:
        for check in checks:  # noqa: SIM110 (all() would build a generator per call: this is the hot path)
            if not check(value):
                return False
        return True

    return every


def _fused(schema: dict[str, Any]) -> Check | None:
    """One closure for the commonest leaves (a string with a pattern or a least length, an integer with a
    least value) instead of one per keyword and a loop over them: a sealed manifest holds ~40 of them."""
    keywords = {name: value for name, value in schema.items() if name not in _ANNOTATIONS}
    kind = keywords.pop("type", None)
    if kind == "string" and keywords.keys() == {"pattern"} and isinstance(keywords["pattern"], str):
        search = re.compile(keywords["pattern"]).search
        return lambda v: isinstance(v, str) and search(v) is not None
    if kind == "string" and keywords.keys() == {"minLength"} and type(keywords["minLength"]) is int:
        least = keywords["minLength"]
        return lambda v: isinstance(v, str) and len(v) >= least
    if kind == "integer" and keywords.keys() == {"minimum"} and type(keywords["minimum"]) is int:
        lowest = keywords["minimum"]
        return lambda v: type(v) is int and v >= lowest
    return None


_OBJECT_KEYWORDS = frozenset({"properties", "required", "additionalProperties", "propertyNames"})


def _object(schema: dict[str, Any]) -> Check:
    """properties, required, additionalProperties and propertyNames: one pass over the object."""
    properties, required = schema.get("properties", {}), schema.get("required", [])
    if "patternProperties" in schema or not isinstance(properties, dict) or not isinstance(required, list):
        raise _Unsupported
    known = {key: _compile(sub) for key, sub in properties.items()}
    additional = schema.get("additionalProperties", True)
    closed = additional is False
    extra = None if closed else _compile(additional)
    names = _compile(schema["propertyNames"]) if "propertyNames" in schema else None

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        for key in required:
            if key not in value:
                return False
        for key, item in value.items():
            if names is not None and not names(key):
                return False
            sub = known.get(key)
            if sub is not None:
                if not sub(item):
                    return False
            elif closed or (extra is not None and not extra(item)):
                return False
        return True

    return check


def _type(value: Any) -> Check:
    names = value if isinstance(value, list) else [value]
    if not names or not all(isinstance(n, str) and n in _TYPES for n in names):
        raise _Unsupported
    checks = [_TYPES[n] for n in names]
    return checks[0] if len(checks) == 1 else lambda v: any(check(v) for check in checks)


def _const(value: Any) -> Check:
    if not isinstance(value, str):
        raise _Unsupported  # jsonschema's equality (1 == 1.0, True != 1) is kept to jsonschema
    return lambda v: isinstance(v, str) and v == value


def _enum(value: Any) -> Check:
    if not isinstance(value, list) or not all(isinstance(each, str) for each in value):
        raise _Unsupported
    allowed = frozenset(value)
    return lambda v: isinstance(v, str) and v in allowed


def _pattern(value: Any) -> Check:
    if not isinstance(value, str):
        raise _Unsupported
    search = re.compile(value).search  # jsonschema: re.search(pattern, instance)
    return lambda v: not isinstance(v, str) or search(v) is not None


def _length(at_least: bool) -> Callable[[Any], Check]:
    def compiler(value: Any) -> Check:
        if type(value) is not int:
            raise _Unsupported
        if at_least:
            return lambda v: not isinstance(v, str) or len(v) >= value
        return lambda v: not isinstance(v, str) or len(v) <= value

    return compiler


def _bound(holds: Callable[[Any, Any], bool]) -> Callable[[Any], Check]:
    def compiler(limit: Any) -> Check:
        if type(limit) not in (int, float) or not math.isfinite(limit):
            raise _Unsupported

        def check(v: Any) -> bool:
            if type(v) is int or type(v) is float:
                return holds(v, limit)
            return isinstance(v, _NOT_NUMBERS)  # another kind of number: jsonschema decides

        return check

    return compiler


def _items(value: Any) -> Check:
    sub = _compile(value)
    return lambda v: not isinstance(v, list) or all(sub(item) for item in v)


def _any_of(value: Any) -> Check:
    if not isinstance(value, list) or not value:
        raise _Unsupported
    subs = [_compile(each) for each in value]
    return lambda v: any(sub(v) for sub in subs)


def _all_of(value: Any) -> Check:
    if not isinstance(value, list) or not value:
        raise _Unsupported
    subs = [_compile(each) for each in value]
    return lambda v: all(sub(v) for sub in subs)


def _count(kind: type[list[Any]] | type[dict[str, Any]], at_least: bool) -> Callable[[Any], Check]:
    def compiler(value: Any) -> Check:
        if type(value) is not int:
            raise _Unsupported
        if at_least:
            return lambda v: not isinstance(v, kind) or len(v) >= value
        return lambda v: not isinstance(v, kind) or len(v) <= value

    return compiler


_COMPILERS: dict[str, Callable[[Any], Check]] = {
    "type": _type,
    "const": _const,
    "enum": _enum,
    "pattern": _pattern,
    "minLength": _length(at_least=True),
    "maxLength": _length(at_least=False),
    "minimum": _bound(lambda v, limit: v >= limit),
    "maximum": _bound(lambda v, limit: v <= limit),
    "exclusiveMinimum": _bound(lambda v, limit: v > limit),
    "exclusiveMaximum": _bound(lambda v, limit: v < limit),
    "items": _items,
    "anyOf": _any_of,
    "allOf": _all_of,
    "minItems": _count(list, at_least=True),
    "maxItems": _count(list, at_least=False),
    "minProperties": _count(dict, at_least=True),
    "maxProperties": _count(dict, at_least=False),
}


def well_formed(schema: Any) -> bool:
    """The fast yes of `Draft202012Validator.check_schema`: True only where it finds the schema
    valid, for schemas made of the keywords below; anything else is False and jsonschema decides
    (it also names what is wrong). Stricter than the metaschema where that is simpler, never looser."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    for name, value in schema.items():
        rule = _WELL_FORMED.get(name)
        if rule is None or not rule(value):
            return False
    return True


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _non_negative(value: Any) -> bool:
    return type(value) is int and value >= 0


def _finite(value: Any) -> bool:
    return (type(value) is int or type(value) is float) and math.isfinite(value)


def _type_names(value: Any) -> bool:
    if isinstance(value, str):
        return value in _TYPES
    if not isinstance(value, list) or not value:
        return False
    return all(isinstance(n, str) and n in _TYPES for n in value) and len(set(value)) == len(value)


def _unique_texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value) and len(set(value)) == len(value)


def _schema_map(value: Any) -> bool:
    return isinstance(value, dict) and all(well_formed(sub) for sub in value.values())


def _schema_list(value: Any) -> bool:
    return isinstance(value, list) and len(value) > 0 and all(well_formed(sub) for sub in value)


def _regex(value: Any) -> bool:
    """check_schema asserts the "regex" format: the pattern must compile."""
    if not isinstance(value, str):
        return False
    try:
        re.compile(value)
    except re.error:
        return False
    return True


_WELL_FORMED: dict[str, Callable[[Any], bool]] = {
    "$schema": lambda v: v == "https://json-schema.org/draft/2020-12/schema",  # other URIs: jsonschema
    "$comment": _text,
    "$defs": _schema_map,
    "title": _text,
    "description": _text,
    "default": lambda _v: True,
    "examples": lambda v: isinstance(v, list),
    "format": _text,
    "deprecated": lambda v: isinstance(v, bool),
    "readOnly": lambda v: isinstance(v, bool),
    "writeOnly": lambda v: isinstance(v, bool),
    "contentMediaType": _text,
    "contentEncoding": _text,
    "type": _type_names,
    "const": lambda _v: True,
    "enum": lambda v: isinstance(v, list),
    "pattern": _regex,
    "minLength": _non_negative,
    "maxLength": _non_negative,
    "minItems": _non_negative,
    "maxItems": _non_negative,
    "minProperties": _non_negative,
    "maxProperties": _non_negative,
    "minimum": _finite,
    "maximum": _finite,
    "exclusiveMinimum": _finite,
    "exclusiveMaximum": _finite,
    "items": well_formed,
    "anyOf": _schema_list,
    "allOf": _schema_list,
    "properties": _schema_map,
    "required": _unique_texts,
    "additionalProperties": well_formed,
    "propertyNames": well_formed,
}
