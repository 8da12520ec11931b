"""Issue 41, finding 1: a task whose attempt is open while no live dispatcher runs it is LOST in every
view (the CLI's status, its --json, the API, the console and the Agent Runtime export), by one rule with
one sentence (agentd/outlook/liveness.py `lost_reason`), never "running"."""

from __future__ import annotations

from typing import Any

import pytest
from rig import Rig
from test_web_console import logged_in
from test_web_live import running
from webrig import WebRig

from agentd.clock import format_ts
from agentd.outlook.agent_runtime import session_snapshot
from agentd.outlook.liveness import lost_reason
from agentd.outlook.status import snapshot
from agentd.process import procs
from agentd.web.task_page import with_code

pytestmark = pytest.mark.timeout(60)


def dispatcher_gone(rig: Rig) -> str:
    """The dispatch service's row written by a process that no longer runs (its pid since reused):
    what `agentd status` reads after the dispatcher was killed. The sentence every view must show."""
    me = procs.this_process()
    gone = procs.ProcessIdentity(me.pid, me.started + 1, me.host, me.boot_id)
    now = rig.clock.now()
    rig.store.report_service_status("dispatch", gone, "running task 1", None, now, now)
    return f"its dispatcher is DOWN since {format_ts(now)}"


def dispatcher_live(rig: Rig) -> None:
    now = rig.clock.now()
    rig.store.report_service_status("dispatch", procs.this_process(), "running task 1", None, now, now)


def test_a_running_task_is_lost_in_status_its_json_and_the_export_with_one_sentence(rig: Rig, rig_cli: Any) -> None:
    task_id, attempt_id = running(rig)
    said = dispatcher_gone(rig)
    text = rig_cli(rig, "status").out
    assert f"LOST     task {task_id}: {said}" in text, text
    assert "running  task" not in text
    [shown] = rig_cli(rig, "status", "--json").json()["running"]
    assert (shown["task_id"], shown["attempt_id"], shown["lost"]) == (task_id, attempt_id, said)
    exported = rig_cli(rig, "status", "--format", "agent-runtime").json()
    [task] = [t for t in exported["tasks"] if t["taskId"] == str(task_id)]
    assert (task["status"], task["statusReason"]) == ("lost", said)


def test_a_task_is_lost_without_any_dispatcher_and_not_lost_under_a_live_one(rig: Rig) -> None:
    running(rig)
    [shown] = snapshot(rig.config, rig.store, rig.clock.now())["running"]
    assert shown["lost"] == "no dispatcher has reported to this database"
    dispatcher_live(rig)
    [shown] = snapshot(rig.config, rig.store, rig.clock.now())["running"]
    assert shown["lost"] is None
    status = snapshot(rig.config, rig.store, rig.clock.now())
    exported = session_snapshot(rig.config, rig.store, status, rig.clock.now())
    assert {t["status"] for t in exported["tasks"]} <= {"running", "preparing", "streaming"}


@pytest.mark.parametrize(
    ("liveness", "word"), [("stale", "STALE"), ("down", "DOWN"), ("stopped", "STOPPED"), ("unknown", "UNKNOWN")]
)
def test_every_liveness_but_live_loses_the_task_and_names_itself(liveness: str, word: str) -> None:
    row = {"service": "dispatch", "liveness": liveness, "updated_at": "2026-11-22T10:00:00.000000Z"}
    assert lost_reason([row]) == f"its dispatcher is {word} since 2026-11-22T10:00:00.000000Z"
    assert lost_reason([{**row, "liveness": "live"}, {**row, "service": "sensors"}]) is None
    assert lost_reason([{**row, "service": "sensors"}]) == "no dispatcher has reported to this database"


def test_the_api_and_the_console_show_the_lost_task(web: WebRig) -> None:
    rig = web.rig
    task_id, _ = running(rig)
    said = dispatcher_gone(rig)
    [shown] = web.client().get("/api/status").json()["running"]
    assert (shown["task_id"], shown["lost"]) == (task_id, said)
    assert web.client().get(f"/api/tasks/{task_id}").json()["state"]["status"] == "lost"
    browser, _ = logged_in(web)
    overview = browser.get("/").text
    assert f"LOST task {task_id}: {said}" in overview
    page = browser.get(f"/tasks/{task_id}").text
    assert 'data-state="lost"' in page and str(with_code(said)) in page  # its times to the second
