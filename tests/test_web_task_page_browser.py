"""The task page and the events page in a real browser (issue 52; fixtures of tests/test_web_browser.py):
each state's page offers only its verbs, Retry on a completed task is not offered and a forced POST lands
on a page with the navigation, and the events page opens newest first, migrations folded, and pages back."""

from __future__ import annotations

from typing import Any

import pytest
import test_web_browser as rigged
from test_web_browser import in_a_thread, log_in, screenshot
from test_web_task_page import VERBS_OF, WORDS_OF, tasks_in_each_state
from webrig import WebRig

pytestmark = [pytest.mark.process, pytest.mark.timeout(180)]
browser, web, page = rigged.browser, rigged.web, rigged.page  # the fixtures, under their own names


def buttons(shown: Any) -> set[str]:
    names: list[str] = shown.locator("#steer button").evaluate_all("found => found.map(b => b.name)")
    return set(names)


def test_the_task_page_of_each_state_shows_only_its_verbs(page: Any, web: WebRig) -> None:
    from playwright.sync_api import expect

    ids = tasks_in_each_state(web.rig, in_a_thread)
    log_in(page, web)
    for state, task_id in ids.items():
        page.goto(f"/tasks/{task_id}")
        expect(page.locator(".task-state .state")).to_have_text(WORDS_OF[state])
        assert buttons(page) == VERBS_OF[state], state
        if state == "pending":
            expect(page.locator("textarea[name=payload]")).to_have_value(page.locator("pre.payload").inner_text())
            screenshot(page, "console-task-pending")
        if state == "waiting for approval":
            expect(page.locator("#steer button[name=approve]")).to_be_visible()  # buttons, not CLI text
            expect(page.locator(".task-state")).not_to_contain_text("`")
        if state == "failed":
            expect(page.locator(".attempt-outcome")).to_have_text("failed")


def test_retry_is_not_offered_on_a_completed_task_and_a_forced_post_keeps_the_navigation(
    page: Any, web: WebRig
) -> None:
    from playwright.sync_api import expect

    rig = web.rig
    done = tasks_in_each_state(rig, in_a_thread)["completed"]
    log_in(page, web)
    page.goto(f"/tasks/{done}")
    expect(page.locator(".task-state .state")).to_have_text("Completed")
    expect(page.get_by_role("button", name="Retry")).to_have_count(0)
    csrf = page.locator("input[name=csrf]").first.input_value()
    page.evaluate(
        """([action, csrf]) => {
            const form = document.createElement("form");
            form.method = "post";
            form.action = action;
            const field = document.createElement("input");
            field.name = "csrf";
            field.value = csrf;
            form.append(field);
            document.body.append(form);
            form.submit();
        }""",
        [f"/tasks/{done}/retry", csrf],
    )
    expect(page.get_by_role("alert")).to_contain_text(f"Retry does not apply to task {done}: it is completed")
    expect(page.locator("h1")).to_have_text("409")
    page.get_by_role("link", name="Tasks", exact=True).click()  # the navigation is there, and works
    expect(page).to_have_url(f"{web.url}tasks")
    assert rig.store.get_task_or_raise(done).status == "completed"


def test_the_events_page_opens_newest_first_with_migrations_folded_and_pages_back(page: Any, web: WebRig) -> None:
    from playwright.sync_api import expect

    rig = web.rig
    for n in range(110):  # three pages of 50
        rig.add(subject=f"task {n}")
    log_in(page, web)
    page.get_by_role("link", name="Events").click()
    first_rows = page.locator("table.events tbody tr")
    expect(first_rows).to_have_count(50)
    newest = rig.store.last_event_sequence()
    expect(first_rows.first.locator("td").first).to_have_text(str(newest))
    pages = 1
    while page.locator("a.older").count():
        with page.expect_navigation(wait_until="load"):  # count() on a page still loading sees no link
            page.locator("a.older").click()
        pages += 1
        assert pages < 10
    folded = page.locator("tr.folded")
    expect(folded).to_have_count(1)
    expect(folded).to_contain_text("migrations applied")
    screenshot(page, "console-events")  # the oldest page: the agent's start, its migrations one row
    assert page.locator("tr.migration_applied:not(.folded)").count() == 0
    for _ in range(pages - 1):
        with page.expect_navigation(wait_until="load"):
            page.locator("a.newer").first.click()
    expect(page.locator("tr.folded")).to_have_count(0)
    expect(page.locator("table.events tbody tr").first.locator("td").first).to_have_text(str(newest))
    expect(page.locator("a.newer")).to_have_count(0)  # the newest page again: nothing newer
