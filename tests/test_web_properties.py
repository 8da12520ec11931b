"""Property tests for what `agentd web` reads at its edge: tokens, session cookies, CSRF tokens and the
query and body values. Whatever arrives, the answer is a value or a refusal naming the field, never an
exception of another kind."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agentd.clock import FakeClock
from agentd.errors import InputError, NotFound
from agentd.web import inputs
from agentd.web.auth import Sessions, new_token, split_token, token_matches
from agentd.web.inputs import BadInput

ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@given(st.text())
def test_split_token_takes_only_the_shape_it_issues(text: str) -> None:
    parts = split_token(text)
    assert parts is None or f"{parts[0]}.{parts[1]}" == text.strip()


@given(st.integers(min_value=0, max_value=3))
def test_a_new_token_splits_back_and_matches_only_its_own_secret(_: int) -> None:
    token_id, hashed, whole = new_token()
    parts = split_token(whole)
    assert parts is not None and parts[0] == token_id
    from agentd.store.web import WebToken

    stored = WebToken(token_id, "alice", hashed, FakeClock().now(), "test", None, None)
    assert token_matches(stored, parts[1])
    assert not token_matches(stored, parts[1][:-1] + ("A" if parts[1][-1] != "A" else "B"))
    assert not token_matches(None, parts[1])


@given(st.text(max_size=300))
def test_a_cookie_not_issued_here_is_no_session(cookie: str) -> None:
    sessions = Sessions(FakeClock(), 1.0, key=b"k" * 32)
    assert sessions.read(cookie) is None


@given(st.integers(min_value=0, max_value=200), st.characters(codec="ascii"))
def test_an_issued_cookie_reads_back_and_any_change_to_it_is_refused(position: int, char: str) -> None:
    clock = FakeClock()
    sessions = Sessions(clock, 1.0, key=b"k" * 32)
    cookie = sessions.issue("0123456789ab")
    session = sessions.read(cookie)
    assert session is not None and session.token_id == "0123456789ab"
    assert sessions.csrf_ok(session, sessions.csrf(session))
    index = position % len(cookie)
    changed = cookie[:index] + char + cookie[index + 1 :]
    if changed != cookie:
        assert sessions.read(changed) is None
    assert Sessions(clock, 1.0, key=b"o" * 32).read(cookie) is None, "another process's key: no session"
    clock.advance(3601)
    assert sessions.read(cookie) is None, "expired"


@given(ANY_JSON, st.integers(min_value=-5, max_value=5), st.integers(min_value=0, max_value=10))
def test_integer_is_in_range_or_refused_naming_the_field(value: Any, low: int, span: int) -> None:
    try:
        found = inputs.integer(value, "query.limit", low=low, high=low + span, default=None)
    except BadInput as exc:
        assert exc.where == "query.limit" and exc.status == 422
        return
    assert low <= found <= low + span and not isinstance(found, bool)


@given(ANY_JSON)
def test_text_choice_boolean_and_event_type_answer_a_value_or_a_refusal(value: Any) -> None:
    for check in (
        lambda: inputs.optional_text(value, "body.note"),
        lambda: inputs.choice(value, "query.status", ("pending", "running")),
        lambda: inputs.boolean(value, "body.require_approval"),
        lambda: inputs.event_type(value, "query.type"),
    ):
        try:
            check()
        except BadInput as exc:
            assert exc.where in ("body.note", "query.status", "body.require_approval", "query.type")


@given(st.text(max_size=200), st.booleans())
def test_an_input_error_becomes_a_refusal_under_its_prefix(message: str, missing: bool) -> None:
    error = NotFound(message) if missing else InputError(message)
    found = inputs.from_input_error(error, "body")
    assert found.where == "body" or found.where.startswith("body.")
    assert found.status == (404 if missing else 422)
