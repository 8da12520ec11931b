"""`agentd web`'s JSON API over real HTTP on 127.0.0.1 (port 0): every endpoint, its token, its bad input
(a 4xx JSON error naming the field), and that each action is the control verb the CLI uses, `by` the
token's operator."""

from __future__ import annotations

import json
from typing import Any

import pytest
from inprocess import ok
from rig import Rig
from webrig import Client, WebRig

from agentd.records import TaskIntent
from agentd.work.intake import admit_task

pytestmark = pytest.mark.timeout(60)
CONTEXT = {
    "originSurface": "browser",
    "originProductId": "acme-console",
    "dispatchMode": "interactive",
    "initiatedAt": "2026-11-22T09:59:00Z",
}


@pytest.fixture
def alice(web: WebRig) -> Client:
    return web.client("alice")


def held(rig: Rig, **fields: Any) -> int:
    """A task waiting for an operator's approval."""
    intent = TaskIntent.model_validate(
        {"task_type": "scripted", "source": "test", "payload": {"outcome": ok()}, **fields}
    )
    new = admit_task(intent, rig.config, rig.clock.now(), trusted=True, require_approval=True)
    return rig.store.enqueue_task(new, rig.clock.now()).task_id


def last_event(rig: Rig, kind: str) -> Any:
    return [e for e in rig.events() if e.type == kind][-1]


# --- tokens -------------------------------------------------------------------------------------------


def test_every_endpoint_refuses_a_request_without_a_valid_token(web: WebRig) -> None:
    task = web.rig.add()
    anonymous, forged = Client(web.url), Client(web.url, "0123456789ab." + "A" * 43)
    gets = ["/api/status", "/api/tasks", f"/api/tasks/{task.task_id}", "/api/events", "/api/approvals",
            "/api/events/stream"]  # fmt: skip
    posts = ["/api/tasks", f"/api/tasks/{task.task_id}/cancel", f"/api/tasks/{task.task_id}/retry",
             f"/api/approvals/{task.task_id}/approve", f"/api/approvals/{task.task_id}/deny", "/api/pause",
             "/api/resume"]  # fmt: skip
    for path in gets:
        answer = anonymous.get(path)
        assert answer.status == 401, path
        assert answer.error_at() == "header.authorization"
        assert answer.headers["www-authenticate"].startswith("Bearer")
    for path in posts:
        assert anonymous.post(path, {}).status == 401, path
    # A forged token is a failed login: 401 until the address has used up its failures, then 429.
    answers = [forged.get(path).status for path in gets] + [forged.post(path, {}).status for path in posts]
    limit = web.rig.config.web.login_failures
    assert answers == [401] * limit + [429] * (len(answers) - limit)
    assert web.rig.store.get_task_or_raise(task.task_id).status == "pending"
    assert web.rig.store.dispatch_pause() is None


def test_a_revoked_token_is_refused_at_once(web: WebRig) -> None:
    client = web.client("bob")
    assert client.get("/api/status").status == 200
    web.rig.store.revoke_web_token("bob", "test", web.rig.clock.now())
    assert client.get("/api/status").status == 401


def test_failed_logins_are_rate_limited_per_address_then_the_window_passes(web: WebRig) -> None:
    good = web.client("alice")
    wrong = Client(web.url, good.token[:-1] + ("A" if good.token[-1] != "A" else "B"))  # type: ignore[index]
    limit = web.rig.config.web.login_failures
    for _ in range(limit):
        assert wrong.get("/api/status").status == 401
    throttled = wrong.get("/api/status")
    assert throttled.status == 429
    assert 1 <= int(throttled.headers["retry-after"]) <= web.rig.config.web.login_window_s
    assert throttled.error_at() == "client"
    assert good.get("/api/status").status == 429, "while throttled even the right token waits"
    web.rig.clock.advance(web.rig.config.web.login_window_s)
    assert good.get("/api/status").status == 200


def test_token_cli_adds_lists_and_revokes(rig: Rig, rig_cli: Any) -> None:
    added = rig_cli(rig, "web", "token", "add", "carol", "--json")
    assert added.code == 0
    token = added.json()["token"]
    assert added.json()["url"] == f"http://{rig.config.web.listen}/", "what `make run` prints"
    assert rig_cli(rig, "web", "token", "add", "carol").code == 2
    listed = rig_cli(rig, "web", "token", "list", "--json").json()
    assert [(t["name"], t["revoked_at"]) for t in listed] == [("carol", None)]
    assert token.split(".")[1] not in json.dumps(listed), "the secret is never shown again"
    stored = rig.store.web_tokens()[0]
    assert token.split(".")[1] not in stored.secret_sha256
    assert rig_cli(rig, "web", "token", "revoke", "carol").code == 0
    assert rig_cli(rig, "web", "token", "revoke", "carol").code == 2
    assert rig_cli(rig, "web", "token", "add", "bad name").code == 2
    assert rig_cli(rig, "web", "token", "list", "--json").json()[0]["revoked_at"] is not None


# --- reading ------------------------------------------------------------------------------------------


def test_status_tasks_task_events_and_approvals(web: WebRig, alice: Client) -> None:
    rig = web.rig
    first, second = rig.add(), rig.add("flaky")
    waiting = held(rig, subject="needs a yes")
    status = alice.get("/api/status").json()
    assert status["counts"]["pending"] == 3 and status["operator"] == "alice"
    assert [a["task_id"] for a in status["approvals"]] == [waiting]
    listed = alice.get("/api/tasks").json()["tasks"]
    assert [t["task_id"] for t in listed] == [waiting, second.task_id, first.task_id]
    by_type = alice.get("/api/tasks", type="flaky", status="pending").json()["tasks"]
    assert [t["task_id"] for t in by_type] == [second.task_id]
    assert alice.get("/api/tasks", status="completed").json()["tasks"] == []
    shown = alice.get(f"/api/tasks/{first.task_id}").json()
    assert shown["task"]["task_id"] == first.task_id and shown["attempts"] == []
    assert [e["type"] for e in shown["events"]] == ["task_enqueued"]
    events = alice.get("/api/events", after=0, limit=2).json()
    assert [e["sequence"] for e in events["events"]] == [1, 2] and events["next_after"] == 2
    rest = alice.get("/api/events", after=2, task_id=waiting).json()["events"]
    assert {e["task_id"] for e in rest} == {waiting}
    approvals = alice.get("/api/approvals").json()["approvals"]
    assert [(a["task_id"], a["subject"]) for a in approvals] == [(waiting, "needs a yes")]


@pytest.mark.parametrize(
    ("path", "where"),
    [
        ("/api/tasks?status=finished", "query.status"),
        ("/api/tasks?limit=0", "query.limit"),
        ("/api/tasks?limit=many", "query.limit"),
        ("/api/events?after=-1", "query.after"),
        ("/api/events?type=Not%20A%20Type", "query.type"),
        ("/api/events?task_id=x", "query.task_id"),
        ("/api/tasks/abc", "path.task_id"),
        ("/api/tasks/999", "path.task_id"),
        ("/api/events/stream?after=x", "query.after"),
        ("/api/tasks/99999999999999999999999", "path.task_id"),
        ("/api/tasks?limit=" + "9" * 5000, "query.limit"),
        ("/api/events?after=99999999999999999999999", "query.after"),
        ("/api/tasks/-1", "path.task_id"),
        ("/api/tasks/%F0%9F%98%80", "path.task_id"),
        ("/api/tasks?status=%ED%A0%80", "query.status"),
        ("/api/tasks/%D9%A1", "path.task_id"),  # Arabic-Indic one: numbers are ASCII digits
        ("/api/tasks/1_0", "path.task_id"),
        ("/api/events?after=%2B5", "query.after"),
    ],
)
def test_bad_queries_name_the_field(alice: Client, path: str, where: str) -> None:
    answer = alice.get(path)
    assert 400 <= answer.status < 500, answer.text
    error = answer.json()["error"]
    assert error["where"] == where and error["what"]
    assert answer.headers["content-type"].startswith("application/json")


def test_an_unknown_endpoint_is_a_json_404(alice: Client) -> None:
    answer = alice.get("/api/nothing")
    assert answer.status == 404 and answer.error_at() == "path"


# --- submitting ---------------------------------------------------------------------------------------


def test_submission_is_judged_as_task_add_and_keeps_the_dispatch_context(web: WebRig, alice: Client) -> None:
    answer = alice.post(
        "/api/tasks",
        {
            "task_type": "example",
            "subject": "from a browser",
            "payload": {},
            "priority": 2,
            "dispatch_context": CONTEXT,
        },
    )
    assert answer.status == 201, answer.text
    task = answer.json()["task"]
    assert (task["subject"], task["priority"], task["source"]) == ("from a browser", 2, "web:alice")
    enqueued = last_event(web.rig, "task_enqueued")
    assert enqueued.payload["by"] == "alice" and enqueued.payload["dispatch_context"] == CONTEXT
    shown = alice.get(f"/api/tasks/{task['task_id']}").json()
    assert shown["dispatch_context"] == CONTEXT
    gated = alice.post("/api/tasks", {"task_type": "example", "payload": {}, "require_approval": True}).json()
    assert gated["task"]["awaiting_approval"] is True


@pytest.mark.parametrize(
    ("body", "status", "where"),
    [
        ({"payload": {}}, 422, "body.task_type"),
        ({"task_type": "no-such-type", "payload": {}}, 422, "body.task_type"),
        ({"task_type": "example"}, 422, "body.payload"),
        ({"task_type": "example", "payload": [1]}, 422, "body.payload"),
        ({"task_type": "example", "payload": {}, "priority": "high"}, 422, "body.priority"),
        ({"task_type": "example", "payload": {}, "priority": "1"}, 422, "body.priority"),  # was priority 1
        ({"task_type": "example", "payload": {}, "priority": True}, 422, "body.priority"),  # was priority 1
        ({"task_type": "example", "payload": {}, "schedule": {"delay_minutes": "5"}}, 422,
         "body.schedule.delay_minutes"),
        ({"task_type": "example", "payload": {}, "colour": "red"}, 422, "body.colour"),
        ({"task_type": "example", "payload": {}, "source": "sensor:x"}, 422, "body.source"),
        ({"task_type": "example", "payload": {}, "require_approval": "yes"}, 422, "body.require_approval"),
        ({"task_type": "example", "payload": {}, "dispatch_context": {"originSurface": "fax"}}, 422,
         "body.dispatch_context.originSurface"),
        ({"task_type": "example", "payload": {}, "dispatch_context": dict(CONTEXT, dispatchMode=None)}, 422,
         "body.dispatch_context.dispatchMode"),
    ],
)  # fmt: skip
def test_bad_submissions_are_refused_naming_the_field_and_nothing_is_written(
    web: WebRig, alice: Client, body: dict[str, Any], status: int, where: str
) -> None:
    before = web.rig.store.last_event_sequence()
    answer = alice.post("/api/tasks", body)
    assert answer.status == status, answer.text
    error = answer.json()["error"]
    assert error["where"] == where, error
    assert web.rig.store.list_tasks() == [] and web.rig.store.last_event_sequence() == before


@pytest.mark.parametrize(
    ("raw", "content_type", "status"),
    [
        (b"{not json", "application/json", 400),
        (b"[1, 2]", "application/json", 422),
        (b'{"task_type": NaN}', "application/json", 400),
        (b"task_type=example", "application/x-www-form-urlencoded", 415),
        (b"\xff\xfe", "application/json", 400),
        (b"{" + b" " * (300 * 1024) + b"}", "application/json", 413),
        (b'{"payload": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "application/json", 400),
        (b'{"payload": {"n": 1' + b"0" * 5000 + b"}}", "application/json", 400),
    ],
)
def test_a_body_that_is_not_a_json_object_is_refused(
    web: WebRig, alice: Client, raw: bytes, content_type: str, status: int
) -> None:
    answer = alice.post("/api/tasks", raw=raw, content_type=content_type)
    assert answer.status == status and answer.error_at() == "body"
    assert web.rig.store.list_tasks() == []


# --- acting -------------------------------------------------------------------------------------------


def test_approve_and_deny_through_control_by_the_operator(web: WebRig, alice: Client) -> None:
    rig = web.rig
    yes, no = held(rig), held(rig)
    approved = alice.post(f"/api/approvals/{yes}/approve", {"note": "fine"})
    assert approved.status == 200, approved.text
    assert approved.json()["task"]["awaiting_approval"] is False
    assert last_event(rig, "approval_resolved").payload | {"approval_id": None} == {
        "approval_id": None, "decision": "approved", "by": "alice", "note": "fine"}  # fmt: skip
    refused = alice.post(f"/api/approvals/{no}/deny", {})
    assert refused.status == 422 and refused.error_at() == "body.reason"
    denied = alice.post(f"/api/approvals/{no}/deny", {"reason": "not today"})
    assert denied.status == 200 and denied.json()["task"]["status"] == "operator_canceled"
    resolved = last_event(rig, "approval_resolved").payload
    assert (resolved["decision"], resolved["by"], resolved["note"]) == ("denied", "alice", "not today")
    again = alice.post(f"/api/approvals/{yes}/approve", {})
    assert 400 <= again.status < 500 and again.error_at().startswith("body")
    assert alice.post("/api/approvals/999/approve", {}).status == 404


def test_cancel_and_retry(web: WebRig, alice: Client) -> None:
    rig = web.rig
    task = rig.add()
    canceled = alice.post(f"/api/tasks/{task.task_id}/cancel")
    assert canceled.status == 200 and canceled.json()["task"]["status"] == "operator_canceled"
    assert last_event(rig, "task_finished").payload["by"] == "alice"
    assert alice.post(f"/api/tasks/{task.task_id}/retry", {"attempts": 0}).error_at() == "body.attempts"
    assert alice.post(f"/api/tasks/{task.task_id}/retry", {"attempts": True}).error_at() == "body.attempts"
    assert alice.post(f"/api/tasks/{task.task_id}/retry", {"tries": 2}).error_at() == "body.tries"
    retried = alice.post(f"/api/tasks/{task.task_id}/retry", {"attempts": 2})
    assert retried.status == 200 and retried.json()["task"]["status"] == "pending"
    assert last_event(rig, "task_requeued").payload["by"] == "alice"
    assert alice.post("/api/tasks/12345/cancel").status == 404


def test_pause_and_resume(web: WebRig, alice: Client) -> None:
    paused = alice.post("/api/pause", {"reason": "maintenance"})
    assert paused.status == 200 and paused.json() == {"paused": True, "changed": True, "by": "alice",
                                                     "reason": "maintenance"}  # fmt: skip
    assert web.rig.store.dispatch_pause() is not None
    assert alice.get("/api/status").json()["paused"]["by"] == "alice"
    assert alice.post("/api/pause", {"reason": 7}).error_at() == "body.reason"
    assert alice.post("/api/resume", {"now": True}).error_at() == "body.now"
    assert alice.post("/api/resume").json() == {"paused": False, "changed": True}
    assert alice.post("/api/resume").json() == {"paused": False, "changed": False}
    assert web.rig.store.dispatch_pause() is None


def test_every_answer_carries_the_security_headers(alice: Client) -> None:
    for answer in (alice.get("/api/status"), alice.get("/api/nothing"), Client(alice.base).get("/api/status")):
        assert "default-src 'self'" in answer.headers["content-security-policy"]
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["cache-control"] == "no-store"


def test_a_row_edited_outside_agentd_is_a_json_500_naming_it(web: WebRig, alice: Client) -> None:
    """Was Starlette's plain-text 500 and a pydantic traceback in the log."""
    import sqlite3
    from contextlib import closing

    task = web.rig.add()
    with closing(sqlite3.connect(web.rig.config.db_path)) as conn:
        conn.execute("UPDATE tasks SET skill_ids = '7' WHERE id = ?", (task.task_id,))
        conn.commit()
    for path in (f"/api/tasks/{task.task_id}", "/api/tasks"):
        answer = alice.get(path)
        assert answer.status == 500 and answer.error_at() == "database", (path, answer.status)
        what = answer.json()["error"]["what"]
        assert f"task {task.task_id} in the database is not a row agentd wrote (skill_ids:" in what, what


def test_ids_and_sequences_take_what_the_cli_takes(alice: Client) -> None:
    """Any id up to 2^63-1, as `agentd task show` takes it: 13 digits and more were refused as if past the
    top of a range ("an integer from 1 to 4611686018427387904") that the parser never reached."""
    assert alice.get("/api/events", after="99999999999999").json()["events"] == []
    missing = alice.get("/api/tasks/99999999999999")
    assert missing.status == 404 and missing.error_at() == "path.task_id"
    past = alice.get("/api/tasks/9223372036854775808")
    assert past.status == 422 and past.json()["error"]["expected"] == "an integer from 1 to 9223372036854775807"
