"""An operator's note or reason is judged by one rule wherever it is given (agentd/edge.py `note_text`): the
CLI's approve --note, deny --reason, dispatch pause --reason and the workflow verbs' --reason, the API's and
the console's note and reason fields. They had three: the CLI took any length and a blank deny reason
(constitution and evidence took 4,000 characters and no blank), the API 2,000 and a blank reason, the
console 2,000 and stripped blanks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rig import Rig
from test_web_api import held
from test_web_console import logged_in
from webrig import WebRig

from agentd.edge import MAX_NOTE_CHARS, Refused, note_text

pytestmark = pytest.mark.timeout(60)

# (the value, whether a deny may give it as its reason)
REASONS = [
    ("the tests fail", True),
    ("  kept as given  ", True),
    ("x" * MAX_NOTE_CHARS, True),
    ("x" * 2_001, True),  # the API and the console refused this; the CLI took it
    ("x" * (MAX_NOTE_CHARS + 1), False),  # the CLI took this, and any length
    ("   ", False),  # blanks are no reason: the CLI and the API took them
    ("\t\n", False),
    ("a\x00b", False),
]


def denied(rig: Rig, task_id: int) -> bool:
    return rig.store.get_task_or_raise(task_id).status == "operator_canceled"


@pytest.mark.parametrize(("reason", "allowed"), REASONS, ids=[f"{r[:12]!r}…{len(r)}" for r, _ in REASONS])
def test_a_deny_reason_is_judged_alike_by_the_cli_the_api_and_the_console(
    web: WebRig, rig_cli: Any, reason: str, allowed: bool
) -> None:
    rig = web.rig
    if "\x00" not in reason:  # an argv cannot hold U+0000
        by_cli = held(rig)
        result = rig_cli(rig, "deny", str(by_cli), "--reason", reason)
        assert (result.code == 0) is allowed and denied(rig, by_cli) is allowed, result.err
        if not allowed:
            assert result.err.startswith("agentd: deny: argument --reason: ") and len(result.err) < 300, result.err
    by_api = held(rig)
    answer = web.client("alice").post(f"/api/approvals/{by_api}/deny", {"reason": reason})
    assert (answer.status == 200) is allowed and denied(rig, by_api) is allowed, answer.text
    if not allowed:
        assert answer.status == 422 and answer.error_at() == "body.reason"
    by_console = held(rig)
    browser, csrf = logged_in(web, "bob")
    answer = browser.form(f"/approvals/{by_console}/deny", {"csrf": csrf, "reason": reason})
    assert denied(rig, by_console) is allowed, answer.text
    if allowed:
        [event] = [e for e in rig.events(by_console) if e.type == "approval_resolved"]
        assert reason in str(event.payload), "kept as given, blanks and all"


@pytest.mark.parametrize(
    "args",
    [
        ("approve", "{task}", "--note", "n" * (MAX_NOTE_CHARS + 1)),
        ("dispatch", "pause", "--reason", "r" * (MAX_NOTE_CHARS + 1)),
        ("workflow", "cancel", "1", "--reason", "r" * (MAX_NOTE_CHARS + 1)),
        ("constitution", "reject", "1", "--reason", " "),
        ("evidence", "accept-rollback", "--reason", "r" * (MAX_NOTE_CHARS + 1)),
    ],
    ids=["approve --note", "pause --reason", "workflow cancel --reason", "constitution reject", "evidence accept"],
)
def test_every_cli_note_takes_the_same_rule_and_writes_nothing_it_refuses(
    rig: Rig, rig_cli: Any, args: tuple[str, ...]
) -> None:
    task = held(rig)
    before = len(rig.events())
    result = rig_cli(rig, *(arg.format(task=task) for arg in args))
    assert result.code == 2 and "argument --" in result.err and "Traceback" not in result.err, result.err
    assert ("characters, expected at most 4000" in result.err) or ("found only blanks" in result.err), result.err
    assert len(rig.events()) == before and rig.store.dispatch_pause() is None


def test_a_pause_reason_from_the_api_takes_what_the_cli_takes(web: WebRig) -> None:
    client = web.client("alice")
    assert client.post("/api/pause", {"reason": "r" * 3_000}).status == 200, "2,000 was the API's limit alone"
    too_long = client.post("/api/pause", {"reason": "r" * (MAX_NOTE_CHARS + 1)})
    assert too_long.status == 422 and too_long.error_at() == "body.reason"
    assert client.post("/api/resume").status == 200
    blank = client.post("/api/pause", {"reason": "  "})
    assert blank.status == 200 and blank.json()["reason"] is None, "blanks are no reason: none is recorded"


@given(st.one_of(st.none(), st.text(max_size=5_000), st.integers(), st.booleans(), st.lists(st.text(), max_size=2)))
def test_any_value_is_a_note_kept_as_given_none_or_one_refusal(value: Any) -> None:
    """The rule at every surface, for anything a JSON body or an argv can bring."""
    try:
        kept = note_text(value, "here")
    except Refused as refused:
        assert str(refused).startswith("here: ")
        return
    assert kept is None or kept == value
    assert (kept is None) == (value is None or (isinstance(value, str) and not value.strip()))
