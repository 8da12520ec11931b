"""The task page over real HTTP (docs/web.md, "A task's page"): one state in words, a button for each verb
that applies to that state only, a forced POST of another refused on a page that keeps the navigation,
the payload editor checked on the server, each attempt's outcome, pretty JSON, the outputs viewable."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from urllib.parse import urlencode

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from inprocess import ok
from rig import Rig
from test_web_api import held
from test_web_console import logged_in
from test_web_live import running
from webrig import Answer, Client, WebRig

from agentd import control
from agentd.control import steering
from agentd.web.task_page import STATE_WORDS, attempt_outcome, state_words, verbs_for, with_code

pytestmark = pytest.mark.timeout(60)
BUTTON = re.compile(r'<button type="submit" name="([a-z]+)"')
NAV = "<nav>"

# Each state of the page, and the verbs (button names) its page offers: only those.
VERBS_OF = {
    "completed": set(),
    "failed": {"retry"},
    "running": {"pause", "cancel"},
    "pending": {"pause", "cancel", "edit", "link", "complete", "fail"},
    "waiting for approval": {"approve", "deny", "pause", "cancel", "edit", "link"},
    "canceled": {"retry"},
    "paused": {"resume", "cancel", "edit", "link", "complete", "fail"},
}
WORDS_OF = {
    "completed": "Completed",
    "failed": "Failed",
    "running": "Starting",  # claimed, its adapter not started: taskstate.py says preparing
    "pending": "Waiting to run",
    "waiting for approval": "Waiting for approval",
    "canceled": "Canceled",
    "paused": "Paused",
}
FAILED = {"status": "permanent_failure", "machine_status": "failed", "operator_summary": "it could not"}


def drain_here(rig: Rig) -> None:
    anyio.run(rig.dispatcher().run_until_idle)


def tasks_in_each_state(rig: Rig, drain: Callable[[Rig], None] = drain_here) -> dict[str, int]:
    """One task in each state VERBS_OF names: the ended ones run first (the dispatcher would claim the
    others), then one left claimed, then the waiting ones."""
    done = rig.add("scripted", subject="write the report", payload={"outcome": ok(), "stdout": "written"}).task_id
    failed = rig.add("scripted", subject="a task that fails", payload={"outcome": FAILED}).task_id
    drain(rig)
    found = {"completed": done, "failed": failed, "running": running(rig)[0]}
    found["pending"] = rig.add("scripted", subject="later", payload={"outcome": ok(), "n": 1}).task_id
    found["waiting for approval"] = held(rig, subject="deploy")
    found["canceled"] = rig.add("scripted", payload={"outcome": ok()}).task_id
    control.cancel_task(rig.config, rig.store, found["canceled"], rig.clock.now(), by="test")
    found["paused"] = rig.add("scripted", payload={"outcome": ok()}).task_id
    steering.pause_task(rig.config, rig.store, found["paused"], "after lunch", rig.clock.now(), by="test")
    return found


def steer_section(html: str) -> str:
    start = html.index('<section class="steer"')
    return html[start : html.index("</section>", start)]


def test_each_state_shows_its_words_once_and_only_its_verbs(web: WebRig) -> None:
    ids = tasks_in_each_state(web.rig)
    browser, _ = logged_in(web)
    for state, task_id in ids.items():
        page = browser.get(f"/tasks/{task_id}")
        assert page.status == 200, (state, page.text[:300])
        assert set(BUTTON.findall(steer_section(page.text))) == VERBS_OF[state], state
        shown = re.findall(
            r'<span class="state [a-z_]+" data-state="([a-z_]+)" title="[a-z_]+">([^<]*)</span>', page.text
        )
        assert [words for _, words in shown] == [WORDS_OF[state]], (state, shown)
        assert "`" not in page.text.split("<h2>Events</h2>")[0], f"{state}: CLI text in backticks on the page"
        assert not re.search(r"\d\d:\d\d:\d\d\.\d{6}", page.text.split("<h2>Events</h2>")[0]), state


def test_a_forced_post_of_a_verb_that_does_not_apply_gets_a_page_with_the_navigation(web: WebRig) -> None:
    rig = web.rig
    ids = tasks_in_each_state(rig)
    browser, csrf = logged_in(web)
    done = ids["completed"]
    refused = browser.form(f"/tasks/{done}/retry", {"csrf": csrf})
    assert refused.status == 409, refused.text[:300]
    assert NAV in refused.text and 'href="/tasks"' in refused.text, "the error page keeps the navigation"
    assert f"Retry does not apply to task {done}: it is completed" in refused.text
    assert rig.store.get_task_or_raise(done).status == "completed", "nothing was done"
    for verb, fields in (("complete", {"reason": "x"}), ("pause", {}), ("edit", {"priority": "3"})):
        answer = browser.form(f"/tasks/{done}/{verb}", {"csrf": csrf, "confirm": "yes", **fields})
        assert answer.status == 409 and NAV in answer.text, verb
    canceled = browser.form(f"/tasks/{ids['failed']}/cancel", {"csrf": csrf})
    assert canceled.status == 409 and "Cancel does not apply" in canceled.text
    assert browser.form(f"/approvals/{ids['pending']}/approve", {"csrf": csrf}).status == 409
    missing = browser.get("/tasks/999999")
    assert missing.status == 404 and NAV in missing.text, "every console error page keeps the navigation"
    anonymous = Client(web.url).form(f"/tasks/{done}/retry", {"csrf": csrf})
    assert anonymous.status in (303, 403) and NAV not in anonymous.text, "no navigation without a session"


def test_the_payload_editor_holds_the_pretty_payload_and_the_server_checks_an_edit(web: WebRig) -> None:
    rig = web.rig
    task_id = rig.add("scripted", payload={"outcome": ok(), "notes": ["a", "b"]}).task_id
    browser, csrf = logged_in(web)
    page = browser.get(f"/tasks/{task_id}")
    editor = re.search(r'<textarea name="payload" rows="(\d+)"[^>]*>([^<]*)</textarea>', page.text)
    assert editor is not None
    assert int(editor.group(1)) >= 10, "sized to the pretty JSON, not two rows"
    assert json.loads(editor.group(2).replace("&#34;", '"')) == rig.store.get_task_or_raise(task_id).payload
    assert '\n  "notes": [' in editor.group(2).replace("&#34;", '"'), "pretty-printed"
    bad = browser.form(f"/tasks/{task_id}/edit", {"csrf": csrf, "payload": "{not json"})
    assert bad.status == 422 and "not JSON" in bad.text and NAV in bad.text
    unchanged = browser.form(f"/tasks/{task_id}/edit", {"csrf": csrf, "payload": editor.group(2).replace("&#34;", '"'),
                                                         "priority": "3"})  # fmt: skip
    assert unchanged.status == 200 and "priority 3" in unchanged.text and "payload" not in steer_what(unchanged.text)
    nothing = browser.form(f"/tasks/{task_id}/edit", {"csrf": csrf, "payload": editor.group(2).replace("&#34;", '"')})
    assert nothing.status == 422 and "nothing to change" in nothing.text
    new = json.dumps({"outcome": ok(), "notes": ["c"]})
    done = browser.form(f"/tasks/{task_id}/edit", {"csrf": csrf, "payload": new, "confirm": "yes"})
    assert done.status == 303
    assert rig.store.get_task_or_raise(task_id).payload["notes"] == ["c"]
    array = browser.form(f"/tasks/{task_id}/edit", {"csrf": csrf, "payload": "[1, 2]", "confirm": "yes"})
    assert array.status == 422 and "a JSON object" in array.text
    assert rig.store.get_task_or_raise(task_id).payload["notes"] == ["c"], "a refused edit changed nothing"


def output(browser: Client, task_id: int, path: str, **more: str) -> Answer:
    return browser.get(f"/tasks/{task_id}/outputs?" + urlencode({"path": path, **more}))


def steer_what(html: str) -> str:
    found = re.search(r'<p class="confirm-what">([^<]*)</p>', html)
    assert found is not None
    return found.group(1)


def test_a_failed_attempt_reads_failed_and_a_delayed_task_its_available_at(web: WebRig) -> None:
    rig = web.rig
    failed = rig.add("scripted", payload={"outcome": FAILED}).task_id
    drain_here(rig)
    later = rig.add("scripted", payload={"outcome": ok()}).task_id
    steering.edit_task(rig.config, rig.store, later, rig.clock.now(), delay_s=7200, by="test")
    browser, _ = logged_in(web)
    page = browser.get(f"/tasks/{failed}")
    outcomes = re.findall(r'<span class="attempt-outcome" title="exit status ([a-z ]+)">([^<]*)</span>', page.text)
    assert outcomes == [("ok", "failed")], "its exit status was ok; the attempt failed"
    assert 'class="available-at"' not in page.text
    waiting = browser.get(f"/tasks/{later}").text
    assert 'class="available-at"' in waiting and "in 2h" in waiting
    assert re.search(r"\(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\)", waiting), "the exact time, to the second"


def test_the_outputs_a_task_names_are_viewable_and_nothing_else(web: WebRig) -> None:
    rig = web.rig
    workspace = rig.config.paths.workspace
    (workspace / "reports").mkdir(parents=True, exist_ok=True)
    (workspace / "reports" / "result.json").write_text('{"verdict": "fine", "checked": [1, 2, 3]}')
    (workspace / "secret.txt").write_text("not an output")
    outcome = ok(artifact_paths=["reports/result.json", "reports/gone.txt"])
    task_id = rig.add("scripted", payload={"outcome": outcome}).task_id
    (workspace / "reports" / "gone.txt").write_text("here while it ran")
    drain_here(rig)
    assert rig.store.get_task_or_raise(task_id).status == "completed"
    browser, _ = logged_in(web)
    page = browser.get(f"/tasks/{task_id}")
    assert "/outputs?path=reports/result.json" in page.text
    shown = output(browser, task_id, "reports/result.json")
    assert shown.status == 200 and NAV in shown.text
    assert "{\n  &#34;verdict&#34;: &#34;fine&#34;" in shown.text, "JSON pretty-printed"
    download = output(browser, task_id, "reports/result.json", download="1")
    assert download.status == 200 and download.body == b'{"verdict": "fine", "checked": [1, 2, 3]}'
    assert download.headers["content-disposition"] == 'attachment; filename="result.json"'
    for path in ("secret.txt", "../secret.txt", "/etc/passwd", "reports/../secret.txt", ""):
        refused = output(browser, task_id, path)
        assert refused.status == 404 and NAV in refused.text, path
    (workspace / "reports" / "gone.txt").unlink()
    os.symlink(workspace / "secret.txt", workspace / "reports" / "gone.txt")
    linked = output(browser, task_id, "reports/gone.txt")
    assert linked.status == 404 and "not an output" not in linked.text, "a link is never followed"


# --- the pure parts ------------------------------------------------------------------------------------


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=30))
def test_every_state_has_words_and_no_underscore(state: str) -> None:
    words = state_words(state)
    assert words and "_" not in words
    if state in STATE_WORDS:
        assert words == STATE_WORDS[state]


TASK_STATUSES = ("pending", "running", "retryable_failure", "completed", "permanent_failure", "blocked",
                 "operator_canceled")  # fmt: skip


@given(st.sampled_from(TASK_STATUSES), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_verbs_never_offer_what_the_store_refuses(
    status: str, paused: bool, approval: bool, workflow: bool, cancel_requested: bool
) -> None:
    task = {"task_id": 1, "status": status, "awaiting_approval": approval,
            "workflow_ref": {"x": 1} if workflow else None,
            "cancel_requested_at": "2026-11-22T10:00:00Z" if cancel_requested else None}  # fmt: skip
    verbs = verbs_for(task, paused, approval)
    assert ("retry" in verbs) == (status in ("permanent_failure", "blocked", "operator_canceled"))
    if status == "completed":
        assert verbs == (("approve", "deny") if approval else ()), "a side-effects approval waits on an ended task"
    assert not ({"pause", "resume"} <= set(verbs)), "one of pause and resume"
    if "complete" in verbs:
        assert status in ("pending", "retryable_failure") and not approval and not workflow
    assert ("approve" in verbs) == ("deny" in verbs) == approval


@given(st.sampled_from(["ok", "error", "timeout"]), st.sampled_from(["none", "retryable", "permanent"]),
       st.sampled_from([None, "completed", "permanent_failure", "retryable_failure"]))  # fmt: skip
def test_an_attempt_outcome_is_never_its_exit_status(exit_status: str, retry_class: str, recorded: str | None) -> None:
    attempt = {"ended_at": "2026-11-22T10:00:00Z", "exit_status": exit_status, "retry_class": retry_class,
               "termination_reason": "exited"}  # fmt: skip
    words = attempt_outcome(attempt, recorded)
    assert words != "ok"
    if recorded == "permanent_failure":
        assert words == "failed"


@given(st.text(max_size=200))
def test_with_code_escapes_all_and_codes_only_backticked_text(text: str) -> None:
    shown = str(with_code(text))
    assert "<" not in shown.replace("<code>", "").replace("</code>", "")
    assert shown.count("<code>") == shown.count("</code>")


def test_an_ended_task_whose_side_effects_wait_offers_approve_and_deny(web: WebRig) -> None:
    """A side-effects approval (docs/operate.md, "Approvals") waits on a task that ended: approving it
    from the task's page or the approvals page is not refused as a verb that does not apply."""
    from agentd.store.approvals import request_approval

    rig = web.rig
    done = rig.add("scripted", payload={"outcome": ok()}).task_id
    drain_here(rig)
    with rig.store.transaction():
        request_approval(rig.store.tx, done, "its follow-ups wait", rig.clock.now(), scope="side_effects")
    browser, csrf = logged_in(web)
    page = browser.get(f"/tasks/{done}").text
    assert set(BUTTON.findall(steer_section(page))) == {"approve", "deny"}
    assert "before its outcome&#39;s side effects apply" in page
    approved = browser.form(f"/approvals/{done}/approve", {"csrf": csrf, "back": "task"})
    assert (approved.status, approved.headers["location"]) == (303, f"/tasks/{done}"), "back to the task's page"
    assert rig.store.pending_approvals() == []
    assert set(BUTTON.findall(steer_section(browser.get(f"/tasks/{done}").text))) == set()


def test_a_json_evidence_file_reads_indented(web: WebRig) -> None:
    rig = web.rig
    done = rig.add("scripted", payload={"outcome": ok()}).task_id
    drain_here(rig)
    attempt = rig.store.attempts_of(done)[0].attempt_id
    browser, _ = logged_in(web)
    shown = browser.get(f"/tasks/{done}/evidence/{attempt}/result.json").text
    assert '<pre class="evidence-file">{\n  &#34;' in shown, "result.json pretty-printed, not one clipped line"


def test_the_confirmations_of_complete_and_fail_say_words(web: WebRig) -> None:
    task_id = web.rig.add().task_id
    browser, csrf = logged_in(web)
    failing = browser.form(f"/tasks/{task_id}/fail", {"csrf": csrf, "reason": "withdrawn"})
    assert steer_what(failing.text) == f"Task {task_id} will end failed, not to be retried: withdrawn"
    assert "permanent_failure" not in failing.text
    completing = browser.form(f"/tasks/{task_id}/complete", {"csrf": csrf, "reason": "done by hand"})
    assert steer_what(completing.text) == f"Task {task_id} will end completed: done by hand"
