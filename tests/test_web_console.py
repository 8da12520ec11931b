"""The console over real HTTP: login with a token into a session cookie (HttpOnly, SameSite=Strict), a CSRF
token on every POST (missing or forged: 403, nothing done), the pages, deny needing a reason, and the
dry-run count a many-task action shows before it acts."""

from __future__ import annotations

import re
from typing import Any

import pytest
from inprocess import ok
from rig import Rig
from test_web_api import held, last_event
from webrig import Client, WebRig

pytestmark = pytest.mark.timeout(60)
CSRF = re.compile(r'name="csrf" value="([^"]*)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found is not None, "every form carries the CSRF token"
    return found.group(1)


def logged_in(web: WebRig, name: str = "alice") -> tuple[Client, str]:
    """A browser-like client (cookies, no bearer token) after the login form, and its CSRF token."""
    token = web.token(name)
    browser = Client(web.url)
    form = browser.get("/login")
    assert form.status == 200
    answer = browser.form("/login", {"csrf": csrf_of(form.text), "token": token})
    assert (answer.status, answer.headers["location"]) == (303, "/"), answer.text
    overview = browser.get("/")
    assert overview.status == 200 and name in overview.text
    return browser, csrf_of(overview.text)


def test_login_sets_an_httponly_samesite_strict_session(web: WebRig) -> None:
    token = web.token("alice")
    browser = Client(web.url)
    form = browser.get("/login")
    answer = browser.request(
        "POST", "/login", f"csrf={csrf_of(form.text)}&token={token}".encode(),
        {"Content-Type": "application/x-www-form-urlencoded"},
    )  # fmt: skip
    assert answer.status == 303
    [cookie] = [c for c in answer.set_cookies if c.startswith("agentd_session=")]
    assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower() and "Path=/" in cookie
    assert token not in cookie, "the cookie is a signed session, not the token"


def test_a_page_without_a_session_goes_to_the_login(web: WebRig) -> None:
    browser = Client(web.url)
    for path in ("/", "/tasks", "/tasks/1", "/approvals", "/events"):
        answer = browser.get(path)
        assert (answer.status, answer.headers["location"]) == (303, "/login"), path
    forged = Client(web.url, cookies={"agentd_session": "eyJ0IjoiMDEyMzQ1Njc4OWFiIn0.deadbeef"})
    assert forged.get("/").status == 303


def test_a_wrong_token_is_refused_and_counts_as_a_failed_login(web: WebRig) -> None:
    browser = Client(web.url)
    form = browser.get("/login")
    refused = browser.form("/login", {"csrf": csrf_of(form.text), "token": "0123456789ab." + "B" * 43})
    assert refused.status == 401 and "not valid" in refused.text and "agentd_session" not in browser.cookies
    without = browser.form("/login", {"token": web.token()})
    assert without.status == 403 and "agentd_session" not in browser.cookies, "the login form needs its CSRF token"
    for _ in range(web.rig.config.web.login_failures):
        browser.form("/login", {"csrf": csrf_of(form.text), "token": "nope"})
    assert browser.form("/login", {"csrf": csrf_of(form.text), "token": web.token()}).status == 429


def test_every_page_renders_for_a_session(web: WebRig) -> None:
    rig = web.rig
    task = rig.add(subject="<script>alert(1)</script>")
    waiting = held(rig, subject="needs a yes")
    browser, _ = logged_in(web)
    for path in ("/", "/tasks", f"/tasks/{task.task_id}", "/approvals", "/events", f"/events?task_id={task.task_id}",
                 "/tasks?status=pending&type=example"):  # fmt: skip
        answer = browser.get(path)
        assert answer.status == 200, (path, answer.text[:400])
        assert "<script>alert(1)</script>" not in answer.text, "what a task holds is escaped"
        for link in re.findall(r'(?:src|href|action)="([^"]*)"', answer.text):
            assert link.startswith("/"), f"{path} refers to another origin: {link}"
    assert f"task {waiting}" in browser.get("/approvals").text
    assert "&lt;script&gt;" in browser.get(f"/tasks/{task.task_id}").text


def test_a_post_without_or_with_a_forged_csrf_token_is_refused_and_does_nothing(web: WebRig) -> None:
    rig = web.rig
    waiting = held(rig)
    browser, csrf = logged_in(web)
    other, other_csrf = logged_in(web, "bob")
    for fields in ({}, {"csrf": ""}, {"csrf": "f" * 64}, {"csrf": other_csrf}):
        for path in (f"/approvals/{waiting}/approve", "/pause", f"/tasks/{waiting}/cancel"):
            answer = browser.form(path, fields)
            assert answer.status == 403, (path, fields)
    assert rig.store.get_task_or_raise(waiting).awaiting_approval and rig.store.dispatch_pause() is None
    assert other.form("/pause", {"csrf": csrf}).status == 403, "one session's token is no good for another"
    assert browser.form(f"/approvals/{waiting}/approve", {"csrf": csrf}).status == 303
    assert last_event(rig, "approval_resolved").payload["by"] == "alice"


def test_deny_needs_a_reason_and_pause_resume_cancel_retry_act_as_the_operator(web: WebRig) -> None:
    rig = web.rig
    waiting = held(rig)
    browser, csrf = logged_in(web)
    refused = browser.form(f"/approvals/{waiting}/deny", {"csrf": csrf, "reason": "  "})
    assert refused.status == 422 and "reason" in refused.text
    assert rig.store.get_task_or_raise(waiting).awaiting_approval
    assert browser.form(f"/approvals/{waiting}/deny", {"csrf": csrf, "reason": "not now"}).status == 303
    assert rig.store.get_task_or_raise(waiting).status == "operator_canceled"
    assert browser.form("/pause", {"csrf": csrf, "reason": "lunch"}).status == 303
    assert "Paused just now by alice: lunch" in re.sub(r"<[^>]*>", "", browser.get("/").text)
    assert browser.form("/resume", {"csrf": csrf}).status == 303 and rig.store.dispatch_pause() is None
    assert browser.form(f"/tasks/{waiting}/retry", {"csrf": csrf}).status == 303
    assert last_event(rig, "task_requeued").payload["by"] == "alice"
    task = rig.add()
    assert browser.form(f"/tasks/{task.task_id}/cancel", {"csrf": csrf}).status == 303
    assert rig.store.get_task_or_raise(task.task_id).status == "operator_canceled"


def fail_for_good(rig: Rig, count: int, task_type: str) -> list[int]:
    import anyio

    ids = [rig.add(task_type, payload={"outcome": ok(status="permanent_failure", machine_status="failed")}).task_id
           for _ in range(count)]  # fmt: skip
    anyio.run(rig.dispatcher().run_until_idle)
    assert {rig.store.get_task_or_raise(i).status for i in ids} == {"permanent_failure"}
    return ids


def test_retry_all_shows_a_dry_run_count_and_acts_only_on_a_confirmed_unchanged_count(web: WebRig) -> None:
    rig = web.rig
    failed = fail_for_good(rig, 3, "scripted")
    browser, csrf = logged_in(web)
    fields: dict[str, Any] = {"csrf": csrf, "status": "permanent_failure", "type": "scripted"}
    dry = browser.form("/tasks/retry-all", fields)
    assert dry.status == 200 and "Dry run: 3 tasks" in dry.text
    assert {rig.store.get_task_or_raise(i).status for i in failed} == {"permanent_failure"}, "a dry run does nothing"
    stale = browser.form("/tasks/retry-all", fields | {"confirm": "yes", "expected": "2"})
    assert stale.status == 200 and "The count changed" in stale.text
    assert {rig.store.get_task_or_raise(i).status for i in failed} == {"permanent_failure"}
    done = browser.form("/tasks/retry-all", fields | {"confirm": "yes", "expected": "3"})
    assert done.status == 303
    assert {rig.store.get_task_or_raise(i).status for i in failed} == {"pending"}
    assert browser.form("/tasks/retry-all", fields | {"status": "completed"}).status == 422


def test_logging_out_ends_the_session_at_once_and_so_does_revoking_its_token(web: WebRig) -> None:
    """Issue 38: after POST /logout the old cookie still got 200 until session_hours (the session was a
    signed cookie and nothing more); a copy of it kept by anyone went on working."""
    browser, csrf = logged_in(web)
    kept = Client(web.url, cookies=dict(browser.cookies))
    assert kept.get("/").status == 200
    assert browser.form("/logout", {"csrf": csrf}).status == 303
    for path in ("/", "/tasks", "/approvals"):
        answer = kept.get(path)
        assert (answer.status, answer.headers.get("location")) == (303, "/login"), path
    assert kept.get("/api/events/stream").status == 401
    assert kept.form("/pause", {"csrf": csrf}).status == 303 and web.rig.store.dispatch_pause() is None

    other, _ = logged_in(web, "bob")
    web.rig.store.revoke_web_token("bob", "test", web.rig.clock.now())
    assert other.get("/").headers.get("location") == "/login", "a revoked token's sessions end with it"


def test_a_session_ends_when_it_expires(web: WebRig) -> None:
    browser, _ = logged_in(web)
    web.rig.clock.advance(web.rig.config.web.session_hours * 3600 - 1)
    assert browser.get("/").status == 200
    web.rig.clock.advance(2)
    assert browser.get("/").headers.get("location") == "/login"
