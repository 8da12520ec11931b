"""The console in a real browser: Playwright driving Debian's chromium through executable_path (never a
browser Playwright downloads). Without chromium (or playwright) these skip by name, unless
AGENTD_REQUIRE_BROWSER=1 (.ci/run sets it). AGENTD_SCREENSHOTS=DIR saves the docs' screenshots there."""

# ruff: noqa: F811  (web is test_web_live's fixture, imported to be used by name)

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from inprocess import ok
from rig import Rig
from support import missing
from test_web_api import held
from test_web_live import append, running, web  # noqa: F401
from webrig import WebRig

from agentd.web.task_page import STORED_TIME

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]
WAIT_MS = 20_000  # what any one expectation waits at most


def chromium() -> str:
    """Debian's chromium ($AGENTD_CHROMIUM, else on PATH); skipped by name without it."""
    found = os.environ.get("AGENTD_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found or not Path(found).exists():
        missing("BROWSER", "chromium is not installed (apt-get install chromium; .ci/run installs it)")
    return found


@pytest.fixture
def browser() -> Iterator[Any]:
    executable = chromium()
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        missing("BROWSER", "playwright is not installed (the test extra: make .venv/.installed-test)")
    expect.set_options(timeout=WAIT_MS)
    with own_child_watcher(), sync_playwright() as playwright:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []  # chromium's sandbox refuses root
        launched = playwright.chromium.launch(executable_path=executable, args=args)
        try:
            yield launched
        finally:
            launched.close()


@contextmanager
def own_child_watcher() -> Iterator[None]:
    """Playwright starts its driver from an event loop of its own. agentd's runner leaves Python 3.11's
    child watcher attached to the loop of the test before (agentd/process/runner.py), which a new loop
    cannot use: a thread-per-child watcher meanwhile, the runner's back afterwards."""
    if sys.version_info >= (3, 12):
        yield
        return
    before = asyncio.get_child_watcher()
    asyncio.set_child_watcher(asyncio.ThreadedChildWatcher())
    try:
        yield
    finally:
        asyncio.set_child_watcher(before)


@pytest.fixture
def page(browser: Any, web: WebRig) -> Iterator[Any]:
    context = browser.new_context(base_url=web.url.rstrip("/"), viewport={"width": 1280, "height": 860})
    context.set_default_timeout(WAIT_MS)
    opened = context.new_page()
    outside: list[str] = []
    opened.on("request", lambda request: None if request.url.startswith(web.url) else outside.append(request.url))
    yield opened
    context.close()
    assert outside == [], "a console page asked another origin for something"


def log_in(page: Any, web: WebRig, name: str = "alice") -> None:
    page.goto("/login")
    page.fill("input[name=token]", web.token(name))
    page.click("button[type=submit]")
    page.wait_for_url("**/")
    page.get_by_text(name, exact=True).wait_for()


def screenshot(page: Any, name: str) -> None:
    folder = os.environ.get("AGENTD_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def in_a_thread(rig: Rig) -> None:
    """The dispatcher until idle, off this thread (Playwright's sync API keeps an event loop here)."""
    errors: list[BaseException] = []

    def drain() -> None:
        try:
            anyio.run(rig.dispatcher().run_until_idle)
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    worker = threading.Thread(target=drain)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the dispatcher did not go idle within 60 s"
    assert errors == [], errors


def test_refused_without_a_token_and_on_a_forged_csrf_token(page: Any, web: WebRig) -> None:
    from playwright.sync_api import expect

    waiting = held(web.rig, subject="hold me")
    page.goto("/approvals")
    expect(page).to_have_url(f"{web.url}login")
    screenshot(page, "console-login")  # the docs show the form as a newcomer meets it, not refusing
    page.fill("input[name=token]", "0123456789ab." + "C" * 43)
    page.click("button[type=submit]")
    expect(page.get_by_role("alert")).to_contain_text("not valid")
    log_in(page, web)
    page.goto("/approvals")
    page.eval_on_selector_all("input[name=csrf]", "inputs => inputs.forEach(i => i.value = 'forged')")
    page.locator(f"#approval-{waiting} button[name=approve]").click()
    expect(page.get_by_role("alert")).to_contain_text("CSRF")
    assert web.rig.store.get_task_or_raise(waiting).awaiting_approval, "a forged form did nothing"


def test_approve_a_held_task_in_the_console_and_see_it_run(page: Any, web: WebRig) -> None:
    from playwright.sync_api import expect

    rig = web.rig
    waiting = held(rig, subject="deploy the docs", payload={"outcome": ok(), "stdout": "deployed"})
    log_in(page, web)
    page.goto("/approvals")
    expect(page.locator(f"#approval-{waiting}")).to_contain_text("deploy the docs")
    expect(page.locator(f"#approval-{waiting} pre.payload")).to_contain_text('"stdout": "deployed"')
    screenshot(page, "console-approvals")
    page.locator(f"#approval-{waiting} input[name=note]").fill("go ahead")
    page.locator(f"#approval-{waiting} button[name=approve]").click()
    expect(page.get_by_text("Nothing waits for an operator.")).to_be_visible()
    page.goto(f"/tasks/{waiting}")
    expect(page.locator(".task-state .state")).to_have_text("Waiting to run")
    in_a_thread(rig)
    page.reload()
    expect(page.locator(".task-state .state")).to_have_text("Completed")
    page.get_by_role("link", name="stdout.log").click()
    expect(page.locator("pre.evidence-file")).to_contain_text("deployed")  # inside the console
    page.get_by_role("link", name=f"← task {waiting}").click()  # and a way back
    expect(page.locator(".task-state .state")).to_have_text("Completed")
    screenshot(page, "console-task")
    page.get_by_role("link", name="Verify this task's evidence").click()
    expect(page.locator(".verdict.clean")).to_contain_text("Clean")
    screenshot(page, "console-verify")
    assert rig.store.get_task_or_raise(waiting).status == "completed"


def test_watch_live_tool_events_of_a_running_attempt_appear(page: Any, web: WebRig) -> None:
    from playwright.sync_api import expect

    rig = web.rig
    task_id, attempt_id = running(rig)
    rig.add(subject="next in line")
    log_in(page, web)
    activity, todos = page.locator(f"#activity-{attempt_id}"), page.locator(f"#todos-{attempt_id}")
    expect(activity).to_be_attached()
    expect(activity.locator("li")).to_have_count(0)
    append(rig, "tool_started", task_id, attempt_id, call_id="c1", tool="Bash", summary="pytest -q")
    expect(activity.locator("li.tool_started")).to_contain_text("Bash pytest -q")
    todo = {"todoId": "t1", "sessionId": "s1", "text": "make the tests pass", "status": "in-progress",
            "createdAt": "2026-11-22T10:00:00Z", "updatedAt": "2026-11-22T10:00:00Z"}  # fmt: skip
    append(rig, "todos_updated", task_id, attempt_id, todos=[todo])
    expect(todos.locator("li.todo.in-progress")).to_contain_text("make the tests pass")
    append(rig, "tool_finished", task_id, attempt_id, call_id="c1", tool="Bash", ok=True, summary="12 passed")
    append(rig, "model_turn_completed", task_id, attempt_id, turn=3, input_tokens=1200, output_tokens=300)
    append(rig, "attempt_progress", task_id, attempt_id, text="<b>half</b> way")
    expect(activity.locator("li")).to_have_count(5)
    expect(activity.locator("li.attempt_progress")).to_have_text("attempt_progress <b>half</b> way")
    assert activity.locator("li.attempt_progress b").count() == 0, "reported text is shown as text, never as HTML"


def test_a_lost_task_reads_lost_in_the_console_and_a_task_is_paused_through_its_confirmation(
    page: Any, web: WebRig
) -> None:
    """Issue 41: a running task beside a dispatcher that is DOWN read "running" in the console."""
    from playwright.sync_api import expect
    from test_lost_task import dispatcher_gone

    rig = web.rig
    task_id, _ = running(rig)
    said = dispatcher_gone(rig)
    waiting = rig.add(subject="steer me").task_id
    log_in(page, web)
    expect(page.locator("p.lost")).to_contain_text(f"LOST task {task_id}: {said}")
    page.goto(f"/tasks/{task_id}")
    expect(page.locator(".task-state .state")).to_have_text("Lost")
    expect(page.locator(".state-reason")).to_contain_text(STORED_TIME.sub(r"\1 \2 UTC", said))  # to the second
    page.goto(f"/tasks/{waiting}")
    page.locator("#steer input[name=reason]").first.fill("after lunch")
    page.locator("#steer button[name=pause]").click()
    expect(page.locator("p.confirm-what")).to_contain_text(f"Task {waiting} will not be claimed until resumed.")
    assert rig.store.task_pause(waiting) is None, "the confirmation page changed nothing"
    page.locator("button[name=confirm-pause]").click()
    expect(page.locator(".task-state .state")).to_have_text("Paused")
    assert rig.store.task_pause(waiting) is not None


def test_a_goal_loop_in_the_consoles_workflows(page: Any, web: WebRig) -> None:
    from playwright.sync_api import expect

    rig = web.rig
    context = {"answers": {"verify": ["continue", "complete"]}}
    workflow, _ = rig.store.create_workflow("goal-loop", "docs-site", "plan", context, rig.clock.now(), "test")
    in_a_thread(rig)
    log_in(page, web)
    page.get_by_role("link", name="Workflows").click()
    page.get_by_role("link", name=str(workflow.workflow_id), exact=True).click()
    expect(page.locator("h1 .status")).to_have_text("completed")
    expect(page.locator("li.step")).to_have_count(5)
    expect(page.locator("li.step b")).to_have_text(["plan", "execute", "verify", "execute", "verify"])
    screenshot(page, "console-workflow")
    page.get_by_role("link", name="Tasks", exact=True).click()  # docs/web.md's tasks page: the same loop
    expect(page.locator("table.tasks tbody tr td:nth-child(2)")).to_have_text(
        ["verify", "execute", "verify", "execute", "plan"]
    )
    expect(page.locator("table.tasks tbody tr.completed")).to_have_count(5)
    screenshot(page, "console-tasks")


def test_the_charts_and_an_attempts_timeline_draw_under_the_consoles_policy(page: Any, web: WebRig) -> None:
    """/charts draws its three charts (SVG the server wrote: the Content-Security-Policy refuses nothing),
    and a task's page draws its attempt's tool calls on one time axis."""
    from playwright.sync_api import expect
    from test_web_timeline import step, write_trace

    rig = web.rig
    refused: list[str] = []
    page.on(
        "console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None
    )
    for hour, cost in enumerate((0.4, 1.1, 0.7)):
        rig.add("scripted", payload={"outcome": ok(), "usage": {"cost_usd": cost}})
        rig.add("scripted", payload={"outcome": {"status": "permanent_failure", "machine_status": "failed",
                                                 "operator_summary": "no"}})  # fmt: skip
        rig.clock.advance(3600 * (hour + 1))
        in_a_thread(rig)
    rig.add("scripted", payload={"outcome": ok()})
    log_in(page, web)
    page.get_by_role("link", name="Charts").click()
    for chart in ("queue", "outcomes", "cost"):
        drawn = page.locator(f"svg#{chart}")
        expect(drawn).to_be_visible()
        box = drawn.bounding_box()
        assert box is not None and box["width"] > 400 and box["height"] > 100, (chart, box)
    expect(page.locator("svg#outcomes rect.bar")).to_have_count(6)
    expect(page.locator("svg#cost rect.bar")).to_have_count(1)  # one day, one adapter: $2.20
    expect(page.locator("svg#cost title").last).to_have_text("scripted, Nov 22: $2.20")
    screenshot(page, "console-charts")
    task_id = rig.store.tasks_matching(statuses=("completed",), task_type=None, limit=1)[0].task_id
    attempt = rig.store.attempts_of(task_id)[0]
    folder = rig.config.paths.state_dir / "attempts" / str(task_id) / attempt.attempt_id
    write_trace(folder, [step(1, "Read", 0, 2), step(2, "Bash", 2, 14), step(3, "Edit", 14, 15, is_error=True),
                         step(4, "Bash", 15, 31), step(5, "Write", None, 33)])  # fmt: skip
    page.goto(f"/tasks/{task_id}")
    expect(page.locator("svg.timeline rect.step")).to_have_count(4)
    expect(page.locator("svg.timeline polygon.step")).to_have_count(1)
    expect(page.locator("svg.timeline")).to_contain_text("3 Edit error")
    screenshot(page, "console-timeline")
    assert refused == [], refused
