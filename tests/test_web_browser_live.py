"""A console that lives (issue 52), in a real browser (Debian's chromium through Playwright, as
tests/test_web_browser.py drives it): a task added by the CLI shows on the open tasks page and the
overview, an approval shows and the badge counts it, and a running script's progress bar moves, each
without a reload. "Without a reload" is checked by a mark left on the page's window: a reload drops it."""
# ruff: noqa: F811  (browser and page are tests/test_web_browser.py's fixtures, imported to be used by name)

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from rig import Rig
from test_web_api import held
from test_web_browser import browser, log_in, page, screenshot  # noqa: F401 (fixtures)
from webrig import WebRig, serving

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]
LIVE_MS = 2_000  # the promise: what an event changes shows within 2 s

PROGRESS_SCRIPT = """#!{python}
import json, os, sys, time
from pathlib import Path
sys.stdin.read()
folder = Path({folder!r})
progress = open(os.environ["AGENTD_PROGRESS_PATH"], "a")
for step, line in enumerate(["fetched 1 of 4 pages", "fetched 3 of 4 pages"]):
    progress.write(line + "\\n")
    progress.flush()
    deadline = time.monotonic() + 60
    while not (folder / f"go{{step}}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
outcome = {{"status": "completed", "machine_status": "ok", "operator_summary": "fetched 4 pages"}}
Path(os.environ["AGENTD_RESULT_PATH"]).write_text(json.dumps(outcome))
"""


def with_progress_adapter(folder: Path) -> Callable[[dict[str, Any]], None]:
    """Task type `pages` on a script adapter that reports `1 of 4`, waits for go0, `3 of 4`, waits for go1."""
    script = folder / "pages.py"
    script.write_text(PROGRESS_SCRIPT.format(python=sys.executable, folder=str(folder)))
    script.chmod(0o755)

    def mutate(raw: dict[str, Any]) -> None:
        raw["adapters"].append({"adapter_id": "pages", "kind": "script", "command": str(script), "timeout_ms": 60_000})
        raw["task_types"].append(
            {
                "task_type": "pages",
                "payload_schema_id": "agent-runtime/payload.any-object/v1",
                "default_profile_id": "operator",
                "default_adapter_id": "pages",
            }
        )

    return mutate


@pytest.fixture
def web(rig_factory: Callable[..., Rig], tmp_path: Path) -> Iterator[WebRig]:
    folder = tmp_path / "pages"
    folder.mkdir()
    with serving(rig_factory(with_progress_adapter(folder))) as served:
        yield served


def mark_window(page: Any) -> None:
    page.evaluate("window.notReloaded = true")


def not_reloaded(page: Any) -> bool:
    return bool(page.evaluate("window.notReloaded === true"))


def cli(tmp_path: Path, *args: str) -> str:
    """The real `agentd` CLI on the test's agent, in its own process."""
    argv = [sys.executable, "-m", "agentd", "--config", str(tmp_path / "config" / "agent.toml"), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_task_added_by_the_cli_shows_on_the_open_tasks_page_and_overview(
    page: Any, web: WebRig, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    log_in(page, web)
    page.goto("/tasks")
    expect(page.locator("table.tasks tbody")).to_contain_text("no tasks yet")
    mark_window(page)
    cli(tmp_path, "task", "add", "--type", "example", "--subject", "added from the CLI")
    expect(page.locator("table.tasks tbody tr").first).to_contain_text("added from the CLI", timeout=LIVE_MS)
    assert not_reloaded(page)
    page.goto("/")
    expect(page.locator("#queue-panel")).to_contain_text("pending")
    pending = page.locator("#queue-panel tr", has=page.locator("a[href='/tasks?status=pending']")).locator("td")
    expect(pending).to_have_text("1")
    mark_window(page)
    cli(tmp_path, "task", "add", "--type", "example", "--subject", "and another")
    expect(pending).to_have_text("2", timeout=LIVE_MS)
    assert not_reloaded(page)


def test_an_approval_shows_on_the_open_page_and_the_badge_counts_it(page: Any, web: WebRig) -> None:
    from playwright.sync_api import expect

    log_in(page, web)
    page.goto("/approvals")
    expect(page.get_by_text("Nothing waits for an operator.")).to_be_visible()
    badge = page.locator("#waiting-badge")
    expect(badge).to_be_hidden()
    mark_window(page)
    first = held(web.rig, subject="deploy the docs")
    expect(page.locator(f"#approval-{first}")).to_contain_text("deploy the docs", timeout=LIVE_MS)
    expect(badge).to_have_text("1", timeout=LIVE_MS)
    second = held(web.rig, subject="publish the release")
    expect(page.locator(f"#approval-{second}")).to_be_visible(timeout=LIVE_MS)
    expect(badge).to_have_text("2", timeout=LIVE_MS)
    assert not_reloaded(page)
    page.locator(f"#approval-{first} button[name=approve]").click()  # and the console says what it did
    expect(page.locator("p.flash")).to_have_text(f"Approved task {first}.")
    expect(badge).to_have_text("1")
    page.reload()
    expect(page.locator("p.flash")).to_have_count(0)  # said once


def test_a_running_scripts_progress_bar_moves_on_its_task_page_and_the_overview(
    page: Any, web: WebRig, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    rig = web.rig
    task_id = rig.add("pages", subject="fetch the pages").task_id
    held(rig, subject="publish the report")  # the picture: what waits beside what runs
    log_in(page, web)
    page.goto(f"/tasks/{task_id}")
    mark_window(page)
    worker = dispatching(rig)
    try:
        bar = page.locator("#live-attempt progress.bar")
        expect(bar).to_have_attribute("value", "25.0")
        expect(page.locator("#live-attempt .said")).to_have_text("fetched 1 of 4 pages")
        (tmp_path / "pages" / "go0").write_text("go")
        expect(bar).to_have_attribute("value", "75.0")
        expect(page.locator("#live-attempt .progress-lines li").first).to_contain_text("fetched 3 of 4 pages")
        assert not_reloaded(page)
        page.goto("/")
        expect(page.locator("#running progress.bar")).to_have_attribute("value", "75.0")
        expect(page.locator("#running .percent")).to_have_text("75%")
        expect(page.locator("#waiting-badge")).to_have_text("1")
        screenshot(page, "console-overview")  # docs/web.md's and the README's: a healthy agent at work
        mark_window(page)
    finally:
        (tmp_path / "pages" / "go1").write_text("go")
        worker.join(60)
    assert not worker.is_alive(), "the dispatcher did not go idle within 60 s"
    expect(page.locator("#running")).to_contain_text("Nothing is running.")
    assert not_reloaded(page)
    assert rig.store.get_task_or_raise(task_id).status == "completed"


def dispatching(rig: Rig) -> threading.Thread:
    """The dispatcher with its real adapters (child processes) until idle, in a thread of its own."""

    def drain() -> None:
        anyio.run(rig.dispatcher(processes=True).run_until_idle)

    worker = threading.Thread(target=drain, daemon=True)
    worker.start()
    return worker


def test_a_note_typed_and_a_box_ticked_survive_the_update_that_brings_a_new_row(page: Any, web: WebRig) -> None:
    from playwright.sync_api import expect

    rig = web.rig
    first = held(rig, subject="deploy the docs")
    log_in(page, web)
    page.goto("/approvals")
    note = page.locator(f"#approval-{first} input[name=note]")
    note.fill("looks right")
    page.locator("h1").click()  # the field left, its text not sent
    second = held(rig, subject="publish the release")
    expect(page.locator(f"#approval-{second}")).to_be_visible(timeout=LIVE_MS)
    expect(note).to_have_value("looks right")
    page.goto("/tasks")
    box = page.locator(f"input[name=task][value='{first}']")
    box.check()
    third = rig.add(subject="a new one").task_id
    expect(page.locator(f"#task-row-{third}")).to_be_visible(timeout=LIVE_MS)
    expect(box).to_be_checked()
    expect(page.locator(f"input[name=task][value='{second}']")).not_to_be_checked()


def test_times_tick_from_the_pages_clock(page: Any, web: WebRig) -> None:
    """The server's clock is a test's fake one, frozen: "just now" on the page becomes "Ns ago" by the
    page's own ticking from it, as agentd/web/times.py would say it."""
    from playwright.sync_api import expect

    web.rig.add(subject="tick")
    log_in(page, web)
    page.goto("/tasks")
    updated = page.locator("table.tasks tbody tr td:nth-child(7) time")
    expect(updated).to_have_text("just now")
    expect(updated).to_have_text(re.compile(r"^[1-9]s ago$"), timeout=5_000)


def test_a_new_task_from_the_form_and_a_refused_one_that_keeps_it(page: Any, web: WebRig) -> None:
    from playwright.sync_api import expect

    log_in(page, web)
    page.get_by_role("link", name="New task…").click()
    page.select_option("select[name=task_type]", "scripted")
    page.fill("input[name=subject]", "summarise the inbox")
    page.fill("textarea[name=payload]", '{\n  "outcome": {"status": "completed"}\n}')
    screenshot(page, "console-new-task")
    page.fill("textarea[name=payload]", '{"outcome": ')
    page.get_by_role("button", name="Add the task").click()
    expect(page.get_by_role("alert")).to_contain_text("body.payload: not JSON")
    expect(page.locator("input[name=subject]")).to_have_value("summarise the inbox")
    expect(page.locator("header nav")).to_be_visible()
    page.fill("textarea[name=payload]", '{"outcome": {"status": "completed"}}')
    page.get_by_role("button", name="Add the task").click()
    expect(page.locator("p.flash")).to_contain_text("Added task 1 (scripted).")
    assert web.rig.store.get_task_or_raise(1).subject == "summarise the inbox"
