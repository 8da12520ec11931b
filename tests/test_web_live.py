"""`agentd web`: the live event stream (Server-Sent Events over real HTTP), the running attempt's activity
and todos in /api/status, and evidence files served read-only, never through a link."""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from inprocess import ok
from rig import Rig
from support import wait_until
from webrig import Client, WebRig, serving

import agentd.store.base as store_base
from agentd.web.views import ACTIVITY_TYPES

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def web(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> Iterator[WebRig]:
    # The live-activity types come from the dispatcher's side (issue 26, "Live activity"); this build's
    # store may not know them yet: the tests append them through its own verb all the same.
    monkeypatch.setattr(store_base, "_EVENT_TYPES", store_base._EVENT_TYPES | set(ACTIVITY_TYPES))
    with serving(rig) as served:
        yield served


class Stream:
    """An open SSE response, read frame by frame (each read waits at most the connection's timeout)."""

    def __init__(self, client: Client, path: str, headers: dict[str, str] | None = None) -> None:
        host, port = client.base.split("//")[1].rstrip("/").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=20)
        sent = {"Authorization": f"Bearer {client.token}"} if client.token else {}
        if client.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
        self.conn.request("GET", path, headers={**sent, **(headers or {})})
        self.reply = self.conn.getresponse()

    def frame(self) -> dict[str, str]:
        fields: dict[str, str] = {}
        while True:
            line = self.reply.readline().decode()
            if line in ("\n", ""):
                if fields or line == "":
                    return fields
                continue
            name, _, value = line.rstrip("\n").partition(": ")
            fields[name] = value

    def event(self) -> dict[str, Any]:
        """The next event frame (retry and keepalive lines skipped)."""
        while True:
            found = self.frame()
            if "data" in found:
                row: dict[str, Any] = json.loads(found["data"])
                assert found["id"] == str(row["sequence"])
                return row

    def rest(self) -> list[dict[str, Any]]:
        """Every event until the stream ends (a read that times out: it never did)."""
        found = []
        while fields := self.frame():
            if "data" in fields:
                found.append(json.loads(fields["data"]))
        return found

    def close(self) -> None:
        self.conn.close()


def append(rig: Rig, kind: str, task_id: int | None = None, attempt_id: str | None = None, **payload: Any) -> int:
    with rig.store.transaction():
        return rig.store._append_event(kind, rig.clock.now(), task_id=task_id, attempt_id=attempt_id, payload=payload)


def running(rig: Rig) -> tuple[int, str]:
    """A task claimed (its attempt open), as the dispatcher leaves it while the adapter runs."""
    task = rig.add("scripted", payload={"outcome": ok()})
    claim = rig.store.claim_next_task(
        rig.clock.now(), "test", rig.dispatcher()._plan, rig.config.paths.state_dir / "attempts"
    )
    assert claim is not None and claim.task.task_id == task.task_id
    return task.task_id, claim.attempt.attempt_id


def test_the_stream_sends_each_event_once_in_order_then_the_new_ones(web: WebRig) -> None:
    rig, client = web.rig, web.client()
    first, second = rig.add(), rig.add()
    stream = Stream(client, "/api/events/stream?after=0")
    try:
        assert stream.reply.status == 200
        assert stream.reply.getheader("content-type", "").startswith("text/event-stream")
        existing = rig.store.last_event_sequence()
        seen = [stream.event() for _ in range(existing)]  # the backlog, from the migrations on
        assert [e["sequence"] for e in seen] == list(range(1, existing + 1))
        appended = append(rig, "tool_started", first.task_id, None, call_id="c1", tool="Bash", summary="ls")
        live = stream.event()
        assert live["type"] == "tool_started", live
        assert (live["sequence"], live["type"], live["payload"]["tool"]) == (appended, "tool_started", "Bash")
    finally:
        stream.close()
    assert second.task_id == first.task_id + 1


def test_a_reconnecting_client_resumes_after_its_last_event_id_and_filters_hold(web: WebRig) -> None:
    rig, client = web.rig, web.client()
    task = rig.add()
    other = rig.add()
    mark = rig.store.last_event_sequence()
    append(rig, "attempt_progress", other.task_id, text="not this one")
    wanted = append(rig, "attempt_progress", task.task_id, text="halfway")
    stream = Stream(client, f"/api/events/stream?task_id={task.task_id}&type=attempt_progress",
                    {"Last-Event-ID": str(mark)})  # fmt: skip
    try:
        found = stream.event()
        assert (found["sequence"], found["payload"]["text"]) == (wanted, "halfway")
    finally:
        stream.close()


def test_status_shows_the_running_attempts_activity_and_latest_todos(web: WebRig) -> None:
    rig, client = web.rig, web.client()
    task_id, attempt_id = running(rig)
    todo = {"todoId": "t1", "sessionId": "s", "text": "write tests", "status": "open",
            "createdAt": "2026-11-22T10:00:00Z", "updatedAt": "2026-11-22T10:00:00Z"}  # fmt: skip
    append(rig, "todos_updated", task_id, attempt_id, todos=[todo])
    append(rig, "tool_started", task_id, attempt_id, call_id="c1", tool="Bash", summary="pytest -q")
    append(rig, "todos_updated", task_id, attempt_id, todos=[todo | {"status": "done"}])
    append(rig, "tool_finished", task_id, attempt_id, call_id="c1", tool="Bash", ok=True, summary="3 passed")
    status = client.get("/api/status").json()
    [shown] = status["running"]
    assert shown["attempt_id"] == attempt_id
    assert [e["type"] for e in shown["recent_activity"]] == [
        "todos_updated",
        "tool_started",
        "todos_updated",
        "tool_finished",
    ]
    assert [t["status"] for t in shown["todos"]] == ["done"]


def test_evidence_files_are_listed_and_served_read_only_never_through_a_link(web: WebRig, tmp_path: Any) -> None:
    rig, client = web.rig, web.client()
    task = rig.add("scripted", payload={"outcome": ok(), "stdout": "hello evidence"})
    anyio.run(rig.dispatcher().run_until_idle)
    [attempt] = client.get(f"/api/tasks/{task.task_id}").json()["attempts"]
    links = {link["name"]: link["href"] for link in attempt["evidence"]}
    assert "manifest.json" in links and "stdout.log" in links, sorted(links)
    served = client.get(links["stdout.log"])
    assert served.status == 200 and served.text == "hello evidence\n"
    assert served.headers["content-type"].startswith("text/plain")
    assert "sandbox" in served.headers["content-security-policy"]
    secret = tmp_path / "secret.txt"
    secret.write_text("not evidence")
    folder = rig.config.paths.state_dir / "attempts" / str(task.task_id) / attempt["attempt_id"]
    os.symlink(secret, folder / "linked.txt")
    again = client.get(f"/api/tasks/{task.task_id}").json()["attempts"][0]["evidence"]
    assert "linked.txt" not in {link["name"] for link in again}
    base = links["stdout.log"].rsplit("/", 1)[0]
    for name in ("linked.txt", "..%2F..%2Fagentd.db", "missing.txt"):
        refused = client.get(f"{base}/{name}")
        assert refused.status in (404, 422), name
        assert b"not evidence" not in refused.body
    anonymous = Client(web.url).get(links["stdout.log"])  # a browser without a session: to the login page
    assert (anonymous.status, anonymous.headers["location"], anonymous.body) == (303, "/login", b"")


@pytest.mark.parametrize("before", [65534, 65535], ids=["cut after two bytes", "cut after its first byte"])
def test_a_long_text_log_whose_64_kib_cut_splits_a_character_is_still_text(before: int) -> None:
    """The check decoded the first 64 KiB as whole UTF-8: a three-byte character at the cut made a long
    log of any script but Latin a download (application/octet-stream) instead of a page of text."""
    from agentd.web.api import looks_textual

    data = b"a" * before + "€".encode() * 10
    assert looks_textual(data)
    assert not looks_textual(b"a" * before + b"\xff" + b"a" * 10), "the control: bytes that are no UTF-8 at all"
    assert not looks_textual(b"\xe2\x82"), "a file that ends cut short is not text"


def test_a_stream_ends_when_its_token_is_revoked_and_sends_nothing_after(web: WebRig) -> None:
    """Issue 44: after `agentd web token revoke bob`, bob's /api/status got 401 but his open stream went
    on delivering events (his own web_token_revoked, then new tasks) until the service stopped."""
    rig = web.rig
    stream = Stream(web.client("bob"), "/api/events/stream?after=0")
    try:
        backlog = rig.store.last_event_sequence()
        assert [stream.event()["sequence"] for _ in range(backlog)][-1] == backlog
        rig.store.revoke_web_token("bob", "test", rig.clock.now())
        rig.add()
        after = stream.rest()
        assert after == [], [e["type"] for e in after]
    finally:
        stream.close()


def test_a_console_stream_ends_at_logout_and_when_its_session_expires(web: WebRig) -> None:
    from test_web_console import logged_in

    browser, csrf = logged_in(web)
    stream = Stream(browser, "/api/events/stream")
    try:
        assert stream.reply.status == 200 and stream.event()["sequence"] == 1
        assert browser.form("/logout", {"csrf": csrf}).status == 303
        web.rig.add()
        assert [e["type"] for e in stream.rest()][-1:] != ["task_enqueued"], "no event after the logout"
    finally:
        stream.close()
    browser, _ = logged_in(web)
    stream = Stream(browser, f"/api/events/stream?after={web.rig.store.last_event_sequence()}")
    try:
        assert stream.reply.status == 200
        web.rig.clock.advance(web.rig.config.web.session_hours * 3600 + 1)
        web.rig.add()
        assert stream.rest() == [], "nothing after it expired"
    finally:
        stream.close()


def test_streams_are_capped_per_token_and_in_all_and_a_closed_one_frees_its_place(
    rig_factory: Callable[..., Rig],
) -> None:
    """Issue 44: nothing bounded the live streams (1,000 replaying the backlog held /api/status 8-10 s)."""

    def capped(raw: dict[str, Any]) -> None:
        raw["web"] = {"max_streams": 3, "max_streams_per_token": 2}

    with serving(rig_factory(capped)) as web:
        alice, bob, carol = web.client("alice"), web.client("bob"), web.client("carol")
        held = [Stream(alice, "/api/events/stream"), Stream(alice, "/api/events/stream")]
        try:
            assert [s.reply.status for s in held] == [200, 200]
            third = alice.get("/api/events/stream")
            assert third.status == 429 and "max_streams_per_token" in third.text and "retry-after" in third.headers
            held.append(Stream(bob, "/api/events/stream"))
            assert held[-1].reply.status == 200
            refused = carol.get("/api/events/stream")
            assert refused.status == 429 and "max_streams" in refused.text
            assert alice.get("/api/status").status == 200, "the API answers beside them"
            held.pop(0).close()
            wait_until(lambda: web.service._web is not None and web.service._web.streams.open == 2, 10, "one freed")
            held.append(Stream(carol, "/api/events/stream"))
            assert held[-1].reply.status == 200
        finally:
            for each in held:
                each.close()


@pytest.mark.parametrize(
    ("stored", "same_as_the_api"),
    [
        ('{"a": [1, {"b": "\\u00fc \\u2028 \\"q\\""}], "n": null, "f": 1.5}', True),
        ("[1, 2]", True),
        ('{"big": 123456789012345678901234567890}', False),
        ("{not json", True),
    ],
    ids=["as agentd writes", "not an object", "an integer past int64", "not JSON"],
)
def test_a_streamed_event_is_the_event_the_api_reads(web: WebRig, stored: str, same_as_the_api: bool) -> None:
    """The stream's frames are written by SQLite's JSON functions (no parse and dump per event); a payload
    SQLite does not take for a JSON object is read as /api/events reads it (`holdable`)."""
    rig = web.rig
    sequence = append(rig, "tool_started", None, None, call_id="c1", tool="Bash", summary="ls")
    rig.store._conn.execute("UPDATE events SET payload = ? WHERE sequence = ?", (stored, sequence))  # an edit
    stream = Stream(web.client(), f"/api/events/stream?after={sequence - 1}")
    try:
        streamed = stream.event()
    finally:
        stream.close()
    [read] = rig.store.event_rows(after=sequence - 1, limit=1)
    assert streamed["sequence"] == sequence and streamed["type"] == "tool_started"
    if same_as_the_api:
        assert streamed == read
    else:
        assert streamed["payload"]["big"] == 123456789012345678901234567890  # the number as written
