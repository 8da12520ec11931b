"""A console that lives (issue 52) over real HTTP: a running attempt's progress as a share done (a property
test of its parser) and its live fragment, what the page's script asks first (/live/state), the flash an
action leaves, the favicon, a console page for a bearer token, the new-task form (judged as `agentd task
add` judges it, the form kept with the error) and retry/cancel of a selection, confirmed first."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from urllib.parse import urlencode

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from inprocess import ok
from test_web_api import held
from test_web_console import csrf_of, logged_in
from test_web_live import append, running
from webrig import Client, WebRig

from agentd.web.charts import charts_view
from agentd.web.live import progress_fraction

pytestmark = pytest.mark.timeout(60)


# --- the progress a line says ----------------------------------------------------------------------


@given(st.integers(0, 10**9), st.integers(1, 10**9), st.text(alphabet="abc .:-", max_size=20))
def test_n_of_m_and_n_slash_m_are_that_share(done: int, whole: int, words: str) -> None:
    words = words.strip(" .")
    if done > whole:
        assert progress_fraction(f"{words} {done} of {whole}") is None, "more than all of it: no bar"
        return
    assert progress_fraction(f"{words} {done} of {whole} pages") == done / whole
    assert progress_fraction(f"step {done}/{whole}") == done / whole


@given(st.decimals(0, 100, places=2, allow_nan=False, allow_infinity=False))
def test_a_percent_is_that_share_and_wins_over_a_count(percent: object) -> None:
    assert progress_fraction(f"3 of 10 files, {percent}% of the bytes") == pytest.approx(float(str(percent)) / 100)


@given(st.text(max_size=200))
def test_any_line_says_a_share_from_0_to_1_or_none(text: str) -> None:
    found = progress_fraction(text)
    assert found is None or 0.0 <= found <= 1.0


@pytest.mark.parametrize("text", ["", "warming up", "0 of 0", "5 of 3", "150%", "v1.2/3", "1.5 of 3"])
def test_a_line_without_a_share_draws_no_bar(text: str) -> None:
    assert progress_fraction(text) is None


# --- the live fragment, the state, the empty headings ------------------------------------------------------


def test_the_running_attempts_fragment_has_its_bar_and_lines_newest_first(web: WebRig) -> None:
    rig = web.rig
    task_id, attempt_id = running(rig)
    browser, _ = logged_in(web)
    assert "no progress line yet" in browser.get(f"/tasks/{task_id}/live").text
    for line in ("fetched 1 of 4 pages", "fetched 3 of 4 pages"):
        append(rig, "attempt_progress", task_id, attempt_id, text=line)
    append(rig, "tool_started", task_id, attempt_id, call_id="c1", tool="Bash", summary="<i>curl</i>")
    fragment = browser.get(f"/tasks/{task_id}/live")
    assert fragment.status == 200
    assert 'max="100" value="75.0"' in fragment.text
    lines = re.findall(r"<li>(fetched [^<]*) <small>", fragment.text)
    assert lines == ["fetched 3 of 4 pages", "fetched 1 of 4 pages"], "the newest first"
    assert "&lt;i&gt;curl&lt;/i&gt;" in fragment.text, "what an attempt reports is text, never HTML"
    overview = browser.get("/").text
    assert 'value="75.0"' in overview and "75%" in overview
    other = rig.add().task_id
    assert browser.get(f"/tasks/{other}/live").text.strip() == "", "nothing runs: nothing shown"


def test_empty_activity_and_todos_say_none_yet(web: WebRig) -> None:
    running(web.rig)
    browser, _ = logged_in(web)
    overview = browser.get("/").text
    assert "none yet: tool calls" in overview and "none yet: the agent has not written a todo list" in overview


def test_live_state_says_where_the_stream_is_and_what_waits(web: WebRig) -> None:
    browser, _ = logged_in(web)
    held(web.rig, subject="one")
    state = browser.get("/live/state").json()
    assert state == {"last_sequence": web.rig.store.last_event_sequence(), "waiting": 1}
    assert Client(web.url).get("/live/state").status == 303, "no session: the login"


# --- favicon, bearer, flash ------------------------------------------------------------------------------


def test_the_favicon_is_served(web: WebRig) -> None:
    answer = Client(web.url).get("/favicon.ico")
    assert answer.status == 200 and answer.headers["content-type"].startswith("image/svg+xml")


def test_a_console_page_answers_a_valid_bearer_token(web: WebRig) -> None:
    client = web.client("carol")
    for path in ("/", "/tasks", "/approvals", "/charts", "/tasks/new"):
        answer = client.get(path)
        assert answer.status == 200, (path, answer.status)
        assert "carol" in answer.text
    wrong = Client(web.url, token="0123456789ab." + "C" * 43).get("/tasks")
    assert wrong.status == 401


def test_an_action_says_what_it_did_once(web: WebRig) -> None:
    waiting = held(web.rig, subject="ship it")
    browser, csrf = logged_in(web)
    acted = browser.form(f"/approvals/{waiting}/approve", {"csrf": csrf})
    assert acted.status == 303
    shown = browser.get("/approvals").text
    assert f'<p class="flash" role="status">Approved task {waiting}.</p>' in shown
    assert 'class="flash"' not in browser.get("/approvals").text, "said once"


# --- the new-task form ------------------------------------------------------------------------------------


def test_a_new_task_from_the_form_is_added_as_task_add_would(web: WebRig) -> None:
    browser, csrf = logged_in(web)
    form = browser.get("/tasks/new")
    assert form.status == 200 and 'name="payload"' in form.text and '<option value="scripted"' in form.text
    answer = browser.form(
        "/tasks/new", {"csrf": csrf, "task_type": "scripted", "subject": "from the form", "priority": "3",
                       "payload": '{"outcome": {"status": "completed"}}'}
    )  # fmt: skip
    assert answer.status == 303
    task_id = int(answer.headers["location"].rsplit("/", 1)[1])
    task = web.rig.store.get_task_or_raise(task_id)
    assert (task.task_type, task.subject, task.priority, task.source) == ("scripted", "from the form", 3, "web:alice")
    assert f"Added task {task_id} (scripted)." in browser.get(f"/tasks/{task_id}").text


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"task_type": "nope", "payload": "{}"}, "task_type"),
        ({"task_type": "scripted", "payload": "{not json"}, "body.payload: not JSON"),
        ({"task_type": "scripted", "payload": "[1, 2]"}, "body.payload: found list"),
        ({"task_type": "scripted", "payload": "{}", "priority": "11"}, "body.priority"),
    ],
)
def test_a_refused_new_task_keeps_the_form_and_writes_nothing(web: WebRig, fields: dict[str, str], said: str) -> None:
    browser, csrf = logged_in(web)
    before = web.rig.store.last_event_sequence()
    answer = browser.form("/tasks/new", {"csrf": csrf, "subject": "keep me", "priority": "", **fields})
    assert answer.status == 422
    assert said in html.unescape(answer.text)
    assert 'value="keep me"' in answer.text and html.escape(fields["payload"], quote=False) in answer.text
    assert '<a href="/tasks">Tasks</a>' in answer.text, "the navigation stays"
    assert web.rig.store.last_event_sequence() == before, "nothing written"


def test_the_new_task_form_needs_its_csrf_token(web: WebRig) -> None:
    browser, _ = logged_in(web)
    before = web.rig.store.last_event_sequence()
    assert browser.form("/tasks/new", {"csrf": "forged", "task_type": "scripted", "payload": "{}"}).status == 403
    assert web.rig.store.last_event_sequence() == before


# --- retry and cancel a selection ----------------------------------------------------------------------


def bulk(browser: Client, csrf: str, verb: str, ids: list[int], **more: str) -> tuple[int, str]:
    body = urlencode([("csrf", csrf), ("verb", verb), *(("task", str(i)) for i in ids), *more.items()])
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    answer = browser.request("POST", "/tasks/bulk", body.encode(), form)
    return answer.status, answer.text


def test_cancel_a_selection_confirms_then_acts_on_each(web: WebRig) -> None:
    rig = web.rig
    ids = [rig.add(subject=f"t{n}").task_id for n in range(3)]
    browser, csrf = logged_in(web)
    assert 'name="task" value="' in browser.get("/tasks").text, "each row can be ticked"
    status, confirm = bulk(browser, csrf, "cancel", ids[:2])
    assert status == 200 and "Cancel 2 tasks?" in confirm
    assert [rig.store.get_task_or_raise(i).status for i in ids] == ["pending"] * 3, "the confirmation changed nothing"
    status, _ = bulk(browser, csrf_of(confirm), "cancel", ids[:2], confirm="yes")
    assert status == 303
    assert [rig.store.get_task_or_raise(i).status for i in ids] == ["operator_canceled"] * 2 + ["pending"]
    assert f"Cancel: 2 of 2 tasks ({ids[0]}, {ids[1]})." in browser.get("/tasks").text


def test_retry_a_selection_retries_each_it_can_and_names_the_rest(web: WebRig) -> None:
    rig = web.rig
    failed = rig.add("scripted", payload={"outcome": {"status": "permanent_failure", "machine_status": "failed",
                                                       "operator_summary": "no"}}).task_id  # fmt: skip
    done = rig.add("scripted", payload={"outcome": ok()}).task_id
    anyio.run(rig.dispatcher().run_until_idle)
    browser, csrf = logged_in(web)
    status, _ = bulk(browser, csrf, "retry", [failed, done], confirm="yes")
    assert status == 303
    assert rig.store.get_task_or_raise(failed).status == "pending"
    assert rig.store.get_task_or_raise(done).status == "completed"
    said = html.unescape(browser.get("/tasks").text)
    assert f"Retry: 1 of 2 tasks ({failed}); refused: task {done}:" in said


def test_a_selection_of_nothing_or_a_forged_form_does_nothing(web: WebRig) -> None:
    task_id = web.rig.add().task_id
    browser, csrf = logged_in(web)
    assert bulk(browser, csrf, "cancel", [])[0] == 422
    assert bulk(browser, csrf, "explode", [task_id], confirm="yes")[0] == 422
    assert bulk(browser, "forged", "cancel", [task_id], confirm="yes")[0] == 403
    assert web.rig.store.get_task_or_raise(task_id).status == "pending"


# --- the last hour by minute ----------------------------------------------------------------------------


def test_the_last_hour_is_charted_by_minute_beside_the_hours(web: WebRig) -> None:
    """A first hour is one point on the hourly charts; by the minute it is a shape (issue 52)."""
    rig = web.rig
    start = rig.clock.now()
    rig.add("scripted", payload={"outcome": ok()})
    rig.clock.advance(5 * 60)
    anyio.run(rig.dispatcher().run_until_idle)  # completed at +5m
    rig.add("scripted", payload={"outcome": {"status": "permanent_failure", "machine_status": "failed",
                                              "operator_summary": "no"}})  # fmt: skip
    rig.clock.advance(10 * 60)
    anyio.run(rig.dispatcher().run_until_idle)  # failed at +15m
    rig.clock.advance(20 * 60)
    view = charts_view(rig.store, rig.clock.now())
    minutes = view["outcomes_minutes"]
    assert (len(minutes["labels"]), minutes["window"]) == (60, "60 minutes")
    at = {label: (minutes["series"]["completed"][i], minutes["series"]["failed"][i]) for i, label in
          enumerate(minutes["labels"])}  # fmt: skip
    plus = lambda m: (start + timedelta(minutes=m)).strftime("%H:%M")  # noqa: E731
    assert (at[plus(5)], at[plus(15)], sum(map(sum, at.values()))) == ((1, 0), (0, 1), 2)
    queue = view["queue_minutes"]
    waiting = dict(zip(queue["labels"], queue["waiting"], strict=True))
    assert [waiting[plus(m)] for m in (1, 4, 5, 6, 14, 15, 16)] == [1, 1, 1, 1, 1, 0, 0]  # A, then B from +5
    assert queue["labels"][-1] == "now" and len(queue["labels"]) == 60
    assert view["outcomes"]["labels"] == charts_view(rig.store, rig.clock.now())["outcomes"]["labels"]
    browser, _ = logged_in(web)
    page = browser.get("/charts").text
    assert 'id="queue-minutes"' in page and 'id="outcomes-minutes"' in page and 'id="outcomes"' in page
    api = web.client().get("/api/charts").json()
    assert api["outcomes_minutes"]["series"] == minutes["series"]


def test_a_steering_act_says_what_it_did_on_the_task_page(web: WebRig) -> None:
    task_id = web.rig.add(subject="steer me").task_id
    browser, csrf = logged_in(web)
    acted = browser.form(f"/tasks/{task_id}/pause", {"csrf": csrf, "reason": "after lunch", "confirm": "yes"})
    assert (acted.status, acted.headers["location"]) == (303, f"/tasks/{task_id}")
    shown = html.unescape(browser.get(f"/tasks/{task_id}").text)
    assert f"Done. Task {task_id} will not be claimed until resumed." in shown
    assert 'id="live-attempt" data-live-src="/tasks/' in shown, "the task page has its live part"


def test_a_payload_with_a_key_twice_is_refused_as_task_add_refuses_it(web: WebRig) -> None:
    browser, csrf = logged_in(web)
    fields = {"csrf": csrf, "task_type": "scripted", "subject": "", "priority": "", "payload": '{"a": 1, "a": 2}'}
    answer = browser.form("/tasks/new", fields)
    assert answer.status == 422 and "body.payload: the key &#39;a&#39; is written twice" in answer.text
