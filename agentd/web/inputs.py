"""What a request brings, judged at the edge: a JSON body, a form, query values. Bad input becomes a
`BadInput` naming the field (what was wrong, where, what was expected), answered as 4xx JSON
(docs/web.md, "Errors"); an InputError from the layers below (the same words `agentd` prints) is named
by the field it starts with."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

from pydantic import ValidationError
from starlette.requests import Request

from agentd import edge
from agentd.edge import Refused
from agentd.errors import InputError, NotFound

MAX_BODY_BYTES = 256 * 1024  # a task's payload included; more is refused before it is parsed
EVENT_TYPE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
FIELD_FIRST = re.compile(r"^(?P<field>--?[a-z][a-z0-9_.-]*|[a-z][a-z0-9_.\[\]]*): (?P<rest>.+)$", re.DOTALL)


class BadInput(Exception):
    """A request agentd refuses: `status` (400, 404, 409, 413, 415, 422), what was wrong, the field
    (`where`: `body`, `body.priority`, `query.limit`, `path.task_id`, …) and what was expected."""

    def __init__(self, status: int, what: str, where: str, expected: str | None = None) -> None:
        super().__init__(what)
        self.status, self.what, self.where, self.expected = status, what, where, expected

    def as_json(self) -> dict[str, Any]:
        return {"error": {"what": self.what, "where": self.where, "expected": self.expected}}


def from_input_error(exc: InputError, prefix: str = "body") -> BadInput:
    """The store's and the control plane's InputError, which starts with the field it is about
    (`task_type: unknown …`, `--attempts: expected …`): 404 for what does not exist, else 422."""
    status = 404 if isinstance(exc, NotFound) else 422
    found = FIELD_FIRST.match(str(exc))
    if found is None:
        return BadInput(status, str(exc), prefix)
    field = found["field"].lstrip("-").replace("-", "_")
    return BadInput(status, found["rest"], f"{prefix}.{field}")


def from_validation(exc: ValidationError, prefix: str = "body") -> BadInput:
    """A pydantic refusal: its first error, at its field."""
    first = exc.errors()[0]
    where = ".".join([prefix, *(str(part) for part in first["loc"])])
    return BadInput(422, first["msg"], where, _expected(first))


def _expected(error: Any) -> str | None:
    context = error.get("ctx") or {}
    if "expected" in context:
        return str(context["expected"])
    if "pattern" in context:
        return f"text matching {context['pattern']}"
    return {"missing": "a value", "extra_forbidden": "no such field"}.get(error["type"])


async def body_bytes(request: Request) -> bytes:
    """The body, refused past MAX_BODY_BYTES however it is sent (a Content-Length or chunks)."""
    declared = request.headers.get("content-length", "")
    size = edge.whole_number(declared)
    if size is not None and size > MAX_BODY_BYTES:
        raise BadInput(413, f"the body is {declared} bytes", "body", f"at most {MAX_BODY_BYTES} bytes")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_BODY_BYTES:
            raise BadInput(413, "the body is too large", "body", f"at most {MAX_BODY_BYTES} bytes")
    return bytes(data)


async def json_object(request: Request) -> dict[str, Any]:
    """The body as a JSON object (an empty body is `{}`)."""
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    data = await body_bytes(request)
    if not data.strip():
        return {}
    if kind != "application/json":
        raise BadInput(415, f"the body is {kind}", "body", "application/json")
    try:  # as every edge reads JSON: NaN, nesting past 64 levels, integers past int64 refused in words
        value = edge.loads(data, "body")
    except Refused as exc:  # NotJson is one
        raise BadInput(400, str(exc).removeprefix("body: "), "body", "a JSON object") from None
    if not isinstance(value, dict):
        raise BadInput(422, f"a JSON {type(value).__name__}", "body", "a JSON object")
    return value


async def form(request: Request) -> dict[str, str]:
    """An urlencoded form (the console's), each field once; a repeated field keeps its last value."""
    return dict(await form_pairs(request))


async def form_pairs(request: Request) -> list[tuple[str, str]]:
    """An urlencoded form's fields in order, a repeated one (a list's ticked boxes) each time."""
    data = await body_bytes(request)
    try:
        return parse_qsl(data.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadInput(400, f"not a form: {exc}", "body", "application/x-www-form-urlencoded") from None


def note(value: Any, where: str, *, required: bool = False) -> str | None:
    """An operator's note or reason, by the rule the CLI uses too (edge.note_text): a 422 naming `where`."""
    try:
        return edge.note_text(value, where, required=required)
    except edge.Refused as exc:
        expected = f"text of at most {edge.MAX_NOTE_CHARS} characters" + (", not blank" if required else "")
        raise BadInput(422, str(exc).removeprefix(f"{where}: "), where, expected) from None


def optional_text(value: Any, where: str, *, max_chars: int = 2000) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > max_chars or "\x00" in value:
        raise BadInput(422, f"found {type(value).__name__} {str(value)[:40]!r}", where, f"text of at most {max_chars}")
    return value


def integer(value: Any, where: str, *, low: int, high: int, default: int | None = None) -> int:
    """An integer from low to high; from a query string's text too. None/absent takes `default`."""
    if value is None or value == "":
        if default is None:
            raise BadInput(422, "missing", where, f"an integer from {low} to {high}")
        return default
    if isinstance(value, str) and (number := edge.whole_number(value)) is not None:
        value = number  # ASCII digits only, as every number agentd reads from text (docs/decisions.md, Numbers)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadInput(422, f"found {str(value)[:40]!r}", where, f"an integer from {low} to {high}")
    return value


def choice(value: Any, where: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise BadInput(422, f"found {str(value)[:60]!r}", where, f"one of {', '.join(allowed)}")
    return str(value)


def refuse_unknown(body: dict[str, Any], known: tuple[str, ...], prefix: str = "body") -> None:
    """A field this endpoint does not take is an error, not silently dropped (a typo would be lost)."""
    for name in body:
        if name not in known:
            raise BadInput(422, f"unknown field {name[:60]!r}", f"{prefix}.{name[:60]}", f"one of {', '.join(known)}")


def boolean(value: Any, where: str) -> bool:
    """true/false; absent is false. A string or a number is refused (`"false"` would read as true)."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadInput(422, f"found {str(value)[:40]!r}", where, "true or false")
    return value


def event_type(value: Any, where: str) -> str:
    """An event type's shape (a type this build does not know yet may still be asked for)."""
    if not isinstance(value, str) or not EVENT_TYPE.fullmatch(value):
        raise BadInput(422, f"found {str(value)[:60]!r}", where, "an event type (lower_case_words)")
    return value
