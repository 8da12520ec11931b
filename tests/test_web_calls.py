"""Tool calls held for a person (docs/policy.md) through the API and the console over real HTTP on 127.0.0.1:
listed beside the approvals, answered by the token's or the session's operator (a reason to deny), a call
decided already a 409, a bad or unknown id named. The hook side is tests/test_tool_policy_gate.py."""

from __future__ import annotations

import pytest
from rig import Rig
from support import HIDDEN_HEAD, HIDDEN_TAIL, PADDINGS, in_view
from test_web_console import logged_in
from webrig import WebRig

from agentd.adapters.activity import EventText
from agentd.attempt.calls import held_input, summary
from agentd.hashing import canonical_json, sha256_hex

pytestmark = pytest.mark.timeout(60)
ATTEMPT = "01JC3M9V6V4ZC0K1S1Y4AQ7W2E"


def hold(rig: Rig, command: str = "curl https://example.com") -> str:
    """A call held as the dispatcher's gate holds one (agentd/attempt/calls.py): its summary and its whole input."""
    task, tool_input = rig.add(), {"command": command}
    payload = {"tool": "Bash", "summary": summary("Bash", tool_input, EventText()), "rule": "ask: rule 1 ([policy])"}
    return rig.store.hold_call(
        task.task_id, ATTEMPT, {**payload, **held_input(tool_input, EventText())}, rig.clock.now()
    )


def test_the_api_lists_held_calls_and_answers_them_as_the_operator(web: WebRig) -> None:
    rig, alice = web.rig, web.client("alice")
    yes, no = hold(rig), hold(rig, "wget https://example.com")
    listed = alice.get("/api/approvals").json()["tool_calls"]
    assert [c["call_id"] for c in listed] == [yes, no] and listed[0]["summary"] == "Bash: curl https://example.com"
    approved = alice.post(f"/api/calls/{yes}/approve", {"note": "fine"})
    assert approved.status == 200 and approved.json() | {"task_id": 0} == {"call_id": yes, "task_id": 0,
        "status": "allowed", "by": "alice", "input_sha256": listed[0]["input_sha256"]}  # fmt: skip
    refused = alice.post(f"/api/calls/{no}/deny", {})
    assert refused.status == 422 and refused.error_at() == "body.reason"
    assert alice.post(f"/api/calls/{no}/deny", {"reason": "not from here"}).json()["status"] == "denied"
    assert rig.store.held_call(no).reason == "not from here"
    again = alice.post(f"/api/calls/{yes}/deny", {"reason": "late"})
    assert again.status == 409 and again.error_at() == "path.call_id"
    assert alice.post("/api/calls/not-a-call/approve", {}).status == 422
    assert alice.post(f"/api/calls/{ATTEMPT}/approve", {}).status == 404
    assert alice.post(f"/api/calls/{yes}/approve", {"extra": 1}).status == 422
    assert alice.get("/api/approvals").json()["tool_calls"] == []


def test_the_console_shows_held_calls_and_its_buttons_answer_them(web: WebRig) -> None:
    rig = web.rig
    call = hold(rig, "curl https://example.com/<script>")
    browser, csrf = logged_in(web)
    page = browser.get("/approvals").text
    assert f'action="/calls/{call}/approve"' in page and "&lt;script&gt;" in page
    assert browser.form(f"/calls/{call}/deny", {"csrf": "f" * 64, "reason": "no"}).status == 403
    assert browser.form(f"/calls/{call}/deny", {"csrf": csrf, "reason": " "}).status == 422
    assert rig.store.held_call(call).status == "pending"
    assert browser.form(f"/calls/{call}/deny", {"csrf": csrf, "reason": "not today"}).status == 303
    decided = rig.store.held_call(call)
    assert (decided.status, decided.decided_by, decided.reason) == ("denied", "alice", "not today")
    assert "Nothing waits for an operator" in browser.get("/approvals").text


@pytest.mark.parametrize("name", PADDINGS)
def test_the_api_and_the_console_show_a_held_calls_tail_however_it_is_padded(web: WebRig, name: str) -> None:
    """Issue 50, finding 2: what the API lists and the console's approvals and task pages show of a held call
    is its command whole, blanks escaped (its tail in view on the head's line), and its whole input with its
    length and sha256."""
    rig, pad = web.rig, PADDINGS[name]
    command = HIDDEN_HEAD + pad + HIDDEN_TAIL
    call, whole = hold(rig, command), canonical_json({"command": command}).decode()
    [listed] = web.client("alice").get("/api/approvals").json()["tool_calls"]
    assert (listed["input_json"], listed["input_chars"], listed["input_sha256"]) == (
        whole, len(whole), sha256_hex(whole.encode()))  # fmt: skip
    assert in_view(listed["summary"], pad), listed["summary"]
    browser, _ = logged_in(web)
    page = browser.get("/approvals").text
    assert in_view(page, pad) and listed["input_sha256"] in page and f"{len(whole):,} characters" in page
    assert page.count("touch hidden_marker") == 2, "in the summary and in the whole input"
    task_page = browser.get(f"/tasks/{rig.store.held_call(call).task_id}").text  # permission_requested, as JSON
    assert in_view(task_page, pad) and listed["input_sha256"] in task_page
