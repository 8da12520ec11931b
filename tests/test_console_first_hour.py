"""What a new operator meets in the console (issue 40, finding 7): times said relative to now with the
exact time a hover away, an approval card that shows what the approver judges in words for any
submitter, and one word for one count across the console and the dispatcher's status line."""

from __future__ import annotations

import re

import pytest
from inprocess import ok
from rig import Rig
from test_web_api import held
from test_web_console import logged_in
from webrig import WebRig, serving

from agentd.outlook.status import IdleOutlook, snapshot
from agentd.services.dispatch_view import idle_line

pytestmark = pytest.mark.timeout(60)
PAGES = ("/", "/tasks", "/tasks/1", "/approvals", "/events")
RAW_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)")
TIME = re.compile(r'<time datetime="([^"]+)" title="([^"]+)">([^<]+)</time>')


def visible(html: str) -> str:
    """The page's words as a reader sees them: no tags, no attribute values, and no payloads (data shown as
    the JSON it is, in <code> or <pre>)."""
    words = re.sub(r"<(code|pre)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"<[^>]*>", " ", words)


def test_every_page_says_times_relative_to_now_with_the_exact_time_on_hover(web: WebRig) -> None:
    web.rig.clock.advance(0.123456)  # a time with microseconds, as the clock gives them
    held(web.rig, subject="held")
    web.rig.store.pause_dispatch("alice", "a pause the overview dates", web.rig.clock.now())
    web.rig.clock.advance(192)
    browser, _ = logged_in(web)
    for path in PAGES:
        html = browser.get(path).text
        assert not RAW_TIME.search(visible(html)), f"{path} shows a raw ISO time: {RAW_TIME.search(visible(html))}"
        shown = TIME.findall(html)
        assert shown, f"{path} shows no time"
        for _, exact, words in shown:
            assert "." not in exact and exact.endswith("UTC"), exact
            assert words.endswith(" ago") or words == "just now", words
        assert any(words == "3m12s ago" for _, _, words in shown), f"{path}: {shown}"


def test_an_approval_card_shows_the_payload_and_what_it_waits_for_in_words(web: WebRig) -> None:
    held(web.rig, subject="ship it", payload={"outcome": ok(), "target": "prod-eu-1"})
    browser, _ = logged_in(web)
    html = browser.get("/approvals").text
    card = visible(html)
    assert re.search(r'<pre class="payload">[^<]*prod-eu-1', html), "the approver sees the payload it judges"
    assert "--require-approval" not in card, "words for any submitter, not one CLI flag"
    assert not re.search(r"\bclaim\b", card), "the scope in words, not its code"
    assert "before it runs" in card
    listed = web.client().get("/api/approvals").json()
    assert listed["approvals"][0]["payload"]["target"] == "prod-eu-1"


def test_the_dispatchers_idle_line_counts_with_the_consoles_word(web: WebRig) -> None:
    held(web.rig)
    held(web.rig)
    web.rig.add("example")
    status = snapshot(web.rig.config, web.rig.store, web.rig.clock.now())
    line = idle_line(IdleOutlook(None, status["waiting"]["claimable"], None), web.rig.clock.now())
    count, word = re.fullmatch(r"idle, (\d+) (\w+)", line).groups()  # type: ignore[union-attr]
    assert status["waiting"][word] == int(count) == 1 and status["counts"]["pending"] == 3
    browser, _ = logged_in(web)
    assert f"{word} {count}" in visible(browser.get("/").text)


@pytest.mark.asyncio
async def test_evidence_opens_in_the_console_with_a_way_back_and_the_task_verifies_there(rig: Rig) -> None:
    task_id = await rig.completed_task()
    with serving(rig) as web:
        browser, _ = logged_in(web)
        links = re.findall(rf'href="(/tasks/{task_id}/evidence/[^"]+)"', browser.get(f"/tasks/{task_id}").text)
        assert links, "the task's page links its evidence files into the console"
        for link in links:
            shown = browser.get(link)
            raw = re.search(r'href="(/evidence/[^"]+)" download', shown.text)
            assert shown.status == 200 and f'href="/tasks/{task_id}"' in shown.text and raw, link
            assert browser.get(raw.group(1)).status == 200, "the raw file is a link away"
        verdict = visible(browser.get(f"/tasks/{task_id}/verify").text)
        assert "Clean" in verdict and "finding" not in verdict
        name = links[0].rsplit("/", 1)[1]
        tampered = next((rig.config.paths.state_dir / "attempts" / str(task_id)).iterdir()) / name
        tampered.write_bytes(tampered.read_bytes() + b"an edit after the seal\n")
        verdict = browser.get(f"/tasks/{task_id}/verify").text
        assert 'class="verdict findings"' in verdict and "clean" not in verdict.lower(), verdict
        assert f"{name}</code>: sha256 differs" in verdict, "the finding names the edited file"


@pytest.mark.asyncio
async def test_a_goal_loop_shows_in_the_consoles_workflows_with_each_step(rig: Rig) -> None:
    from test_workflows import run_workflow

    workflow, steps = await run_workflow(rig, {"answers": {"verify": ["continue", "complete"]}})
    with serving(rig) as web:
        browser, _ = logged_in(web)
        assert 'href="/workflows"' in browser.get("/").text, "the console's menu has the workflows"
        listed = browser.get("/workflows").text
        assert f'href="/workflows/{workflow.workflow_id}"' in listed and "goal-loop" in listed
        assert "goal-loop" not in browser.get("/workflows", status="blocked").text
        shown = browser.get(f"/workflows/{workflow.workflow_id}").text
        order = re.findall(r'<li class="step (\w+)"><b>(\w+)</b>\s*<a href="/tasks/(\d+)"', shown)
        assert [(state, int(task)) for _, state, task in order] == [
            (t.workflow_ref.state_id, t.task_id) for t in steps if t.workflow_ref
        ] and len(order) == 5
        assert "→ <em>continue</em>" in shown and "→ <em>complete</em>" in shown
        assert browser.get("/workflows/999").status == 404
        assert browser.get("/workflows", status="nope").status == 422
