"""Issue 41, finding 2: steering one task (seed 002's pause_task, resume_task, update_task, complete_task,
fail_task, link_tasks) through the CLI, the API and the console. Each act is an event naming who; each is
refused from inside an attempt; the claim respects a pause and a link; bad input changes nothing."""

from __future__ import annotations

import getpass
import json
from typing import Any

import anyio
import pytest
from inprocess import ok
from rig import Rig
from support import events_of
from test_web_console import logged_in
from webrig import WebRig

pytestmark = pytest.mark.timeout(60)


def drain(rig: Rig) -> list[int]:
    """The ids a dispatcher claims, in order, until nothing more is claimable."""
    before = {e.task_id for e in events_of(rig, "task_claimed")}
    anyio.run(rig.dispatcher().run_until_idle)
    return [e.task_id for e in events_of(rig, "task_claimed") if e.task_id not in before and e.task_id is not None]


def state(rig: Rig, rig_cli: Any, task_id: int) -> dict[str, Any]:
    shown = rig_cli(rig, "task", "show", str(task_id), "--json")
    assert shown.code == 0, shown.err
    return dict(shown.json()["state"])


# --- pause and resume ---------------------------------------------------------------------------------


def test_a_paused_task_is_passed_by_until_resumed_and_both_acts_name_who(rig: Rig, rig_cli: Any) -> None:
    held, other = rig.add(subject="hold"), rig.add(subject="go")
    paused = rig_cli(rig, "task", "pause", str(held.task_id), "--reason", "waiting for the vendor")
    assert paused.code == 0 and f"task {held.task_id} paused" in paused.out
    assert rig_cli(rig, "task", "pause", str(held.task_id)).out.startswith(f"task {held.task_id} was already paused")
    assert rig_cli(rig, "status", "--json").json()["waiting"]["paused"] == 1
    assert state(rig, rig_cli, held.task_id)["status"] == "paused"
    shown = rig_cli(rig, "task", "show", str(held.task_id)).out
    assert "paused since" in shown and "waiting for the vendor" in shown
    assert drain(rig) == [other.task_id]
    assert rig.store.get_task_or_raise(held.task_id).status == "pending"
    resumed = rig_cli(rig, "task", "resume", str(held.task_id))
    assert resumed.code == 0 and f"task {held.task_id} resumed" in resumed.out
    assert drain(rig) == [held.task_id]
    [p] = events_of(rig, "task_paused", held.task_id)
    [r] = events_of(rig, "task_resumed", held.task_id)
    assert p.payload == {"by": getpass.getuser(), "reason": "waiting for the vendor"}
    assert r.payload["by"] == getpass.getuser() and r.payload["paused_s"] >= 0
    again = rig_cli(rig, "task", "resume", str(held.task_id))
    assert again.code == 2 and "is not paused" in again.err
    done = rig_cli(rig, "task", "pause", str(held.task_id))
    assert done.code == 2 and "only a waiting or running task can be paused" in done.err


def test_a_running_task_paused_finishes_its_attempt_and_is_not_claimed_again(rig: Rig, rig_cli: Any) -> None:
    task = rig.add("flaky")  # every attempt a retryable failure
    claim = rig.store.claim_next_task(
        rig.clock.now(), "test", rig.dispatcher()._plan, rig.config.paths.state_dir / "attempts"
    )
    assert claim is not None and claim.task.task_id == task.task_id
    paused = rig_cli(rig, "task", "pause", str(task.task_id))
    assert paused.code == 0 and "its running attempt finishes" in paused.out
    rig.store._conn.execute(
        "UPDATE tasks SET status = 'retryable_failure', available_at = ? WHERE id = ?",
        (
            rig.store._conn.execute("SELECT started_at FROM tasks WHERE id = ?", (task.task_id,)).fetchone()[0],
            task.task_id,
        ),
    )
    rig.store._conn.execute("UPDATE task_attempts SET ended_at = started_at, exit_status = 'error'")
    rig.clock.advance(3600)
    assert drain(rig) == []
    assert state(rig, rig_cli, task.task_id)["status"] == "paused"


# --- edit ---------------------------------------------------------------------------------------------


def test_edit_changes_a_waiting_task_as_task_add_judges_and_says_what_changed(rig: Rig, rig_cli: Any) -> None:
    first, second = rig.add("scripted", payload={"outcome": ok()}), rig.add("scripted", payload={"outcome": ok()})
    edited = rig_cli(rig, "task", "edit", str(second.task_id), "--priority", "1", "--payload", '{"note": "x"}')
    assert edited.code == 0 and "priority 1" in edited.out, edited.err
    [event] = events_of(rig, "task_edited", second.task_id)
    assert event.payload["by"] == getpass.getuser()
    assert event.payload["changes"]["priority"] == {"from": 5, "to": 1}
    assert event.payload["changes"]["payload"]["to"] == {"note": "x"}
    delayed = rig_cli(rig, "task", "edit", str(first.task_id), "--delay", "2h")
    assert delayed.code == 0
    assert rig.store.get_task_or_raise(first.task_id).available_at > rig.clock.now()
    assert drain(rig) == [second.task_id], "the edit took effect: priority 1 first, the delayed one not yet"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--priority", "0"), "--priority"),
        (("--priority", "11"), "--priority"),
        (("--payload", "[1]"), "--payload"),
        (("--payload", "{bad"), "--payload"),
        (("--at", "yesterday"), "--at"),
        (("--delay", "1h", "--at", "2030-01-01T00:00:00Z"), "not allowed with"),
        ((), "nothing to change"),
    ],
)
def test_edit_refuses_bad_input_and_writes_nothing(rig: Rig, rig_cli: Any, args: tuple[str, ...], said: str) -> None:
    task = rig.add("example")
    before = rig.store.last_event_sequence()
    refused = rig_cli(rig, "task", "edit", str(task.task_id), *args)
    assert refused.code == 2 and said in refused.err, refused.err
    assert rig.store.last_event_sequence() == before
    assert rig.store.get_task_or_raise(task.task_id) == task


def test_edit_judges_the_payload_against_its_type_schema_and_refuses_once_claimed(rig: Rig, rig_cli: Any) -> None:
    task = rig.add("example")
    refused = rig_cli(rig, "task", "edit", str(task.task_id), "--payload", '{"bogus": 1}')
    assert refused.code == 2 and "payload" in refused.err and "schema example.payload/v1" in refused.err
    claimed = rig.store.claim_next_task(
        rig.clock.now(), "test", rig.dispatcher()._plan, rig.config.paths.state_dir / "attempts"
    )
    assert claimed is not None
    running = rig_cli(rig, "task", "edit", str(task.task_id), "--priority", "1")
    assert running.code == 2 and "claimed" in running.err
    retried = rig.add("flaky")
    rig.store._conn.execute(
        "UPDATE tasks SET status = 'retryable_failure', attempt_count = 1 WHERE id = ?", (retried.task_id,)
    )
    again = rig_cli(rig, "task", "edit", str(retried.task_id), "--payload", "{}")
    assert again.code == 2 and "a new payload is a new task" in again.err
    assert rig_cli(rig, "task", "edit", str(retried.task_id), "--priority", "2").code == 0


# --- complete and fail --------------------------------------------------------------------------------


def test_complete_and_fail_close_a_waiting_task_with_the_declared_outcome_and_reason(rig: Rig, rig_cli: Any) -> None:
    done, failed = rig.add(), rig.add()
    closed = rig_cli(rig, "task", "complete", str(done.task_id), "--reason", "done by hand")
    assert closed.code == 0, closed.err
    task = rig.store.get_task_or_raise(done.task_id)
    assert task.status == "completed" and task.outcome is not None
    assert task.outcome.operator_summary == f"completed by {getpass.getuser()}: done by hand"
    assert rig_cli(rig, "task", "fail", str(failed.task_id), "--reason", "obsolete").code == 0
    assert rig.store.get_task_or_raise(failed.task_id).status == "permanent_failure"
    [event] = events_of(rig, "task_finished", failed.task_id)
    assert event.payload == {
        "status": "permanent_failure",
        "summary": f"failed by {getpass.getuser()}: obsolete",
        "by": getpass.getuser(),
        "declared": True,
    }
    spare = rig.add()
    assert rig_cli(rig, "task", "fail", str(spare.task_id)).code == 2, "a reason is required"
    again = rig_cli(rig, "task", "complete", str(done.task_id), "--reason", "twice")
    assert again.code == 2 and "only a waiting task" in again.err
    assert drain(rig) == [spare.task_id], "only the task still waiting runs"


def test_a_workflow_step_is_not_closed_on_its_own(rig: Rig, rig_cli: Any) -> None:
    assert rig_cli(rig, "workflow", "start", "goal-loop", "g1", "--context", "{}").code == 0
    anyio.run(rig.dispatcher().advance_workflows, rig.clock.now())
    [step] = rig.store.list_tasks(statuses=("pending",))
    refused = rig_cli(rig, "task", "complete", str(step.task_id), "--reason", "skip it")
    assert refused.code == 2 and "workflow signal" in refused.err


# --- link ---------------------------------------------------------------------------------------------


def test_a_linked_task_is_claimed_only_after_the_other_completed(rig: Rig, rig_cli: Any) -> None:
    first = rig.add("scripted", priority=9, payload={"outcome": ok()})
    second = rig.add("scripted", priority=1, payload={"outcome": ok()})
    linked = rig_cli(rig, "task", "link", str(second.task_id), "--after", str(first.task_id))
    assert linked.code == 0 and f"task {second.task_id} runs only after task {first.task_id}" in linked.out
    assert state(rig, rig_cli, second.task_id) == {"status": "queued", "reason": f"after task {first.task_id}"}
    order = rig_cli(rig, "task", "list", "--order", "claim", "--json").json()
    assert [(r["position"], r["task"]["task_id"]) for r in order] == [(1, first.task_id), (None, second.task_id)]
    assert drain(rig) == [first.task_id, second.task_id], "priority 1, but after priority 9"
    [event] = events_of(rig, "task_linked", second.task_id)
    assert event.payload == {
        "after": second.task_id,
        "before": first.task_id,
        "before_status": "pending",
        "by": getpass.getuser(),
    }


def test_a_cycle_a_self_link_and_a_task_no_longer_waiting_are_refused(rig: Rig, rig_cli: Any) -> None:
    a, b, c = rig.add(), rig.add(), rig.add()
    assert rig_cli(rig, "task", "link", str(b.task_id), "--after", str(a.task_id)).code == 0
    assert rig_cli(rig, "task", "link", str(c.task_id), "--after", str(b.task_id)).code == 0
    before = rig.store.last_event_sequence()
    cycle = rig_cli(rig, "task", "link", str(a.task_id), "--after", str(c.task_id))
    assert cycle.code == 2 and "cycle" in cycle.err
    itself = rig_cli(rig, "task", "link", str(a.task_id), "--after", str(a.task_id))
    assert itself.code == 2 and "cannot wait for itself" in itself.err
    missing = rig_cli(rig, "task", "link", str(a.task_id), "--after", "999")
    assert missing.code == 2 and "999 does not exist" in missing.err
    assert rig.store.last_event_sequence() == before
    assert drain(rig) == [a.task_id, b.task_id, c.task_id]
    done = rig_cli(rig, "task", "link", str(a.task_id), "--after", str(b.task_id))
    assert done.code == 2 and "only a waiting task" in done.err


def test_a_task_after_one_that_failed_is_blocked_until_unlinked(rig: Rig, rig_cli: Any) -> None:
    first, second = rig.add(), rig.add()
    assert rig_cli(rig, "task", "link", str(second.task_id), "--after", str(first.task_id)).code == 0
    assert rig_cli(rig, "task", "fail", str(first.task_id), "--reason", "no longer needed").code == 0
    blocked = state(rig, rig_cli, second.task_id)
    assert blocked["status"] == "blocked" and "ended permanent_failure" in blocked["reason"]
    exported = rig_cli(rig, "status", "--format", "agent-runtime").json()
    assert [b["taskId"] for b in exported["blockedTasks"]] == [str(second.task_id)]
    assert drain(rig) == []
    assert rig_cli(rig, "task", "unlink", str(second.task_id), "--after", str(first.task_id)).code == 0
    assert drain(rig) == [second.task_id]
    assert events_of(rig, "task_unlinked", second.task_id)[0].payload["by"] == getpass.getuser()


# --- from inside an attempt ---------------------------------------------------------------------------

VERBS = (
    ("task", "pause", "{id}"),
    ("task", "resume", "{id}"),
    ("task", "edit", "{id}", "--priority", "1"),
    ("task", "complete", "{id}", "--reason", "I did it, trust me"),
    ("task", "fail", "{id}", "--reason", "x"),
    ("task", "link", "{id}", "--after", "{other}"),
    ("task", "unlink", "{id}", "--after", "{other}"),
)


@pytest.mark.parametrize("verb", VERBS, ids=lambda v: v[1])
def test_every_steering_verb_is_refused_inside_an_attempt(
    rig: Rig, rig_cli: Any, monkeypatch: pytest.MonkeyPatch, verb: tuple[str, ...]
) -> None:
    task, other = rig.add(), rig.add()
    rig.store.pause_task(task.task_id, "op", None, rig.clock.now())
    rig.store.link_tasks(task.task_id, other.task_id, "op", rig.clock.now())
    before = rig.store.last_event_sequence()
    monkeypatch.setenv("AGENTD_ATTEMPT_ID", "01JATTEMPT0000000000000000")
    args = [part.format(id=task.task_id, other=other.task_id) for part in verb]
    refused = rig_cli(rig, *args)
    assert refused.code == 2 and "refused inside an attempt" in refused.err, refused.err
    assert rig.store.last_event_sequence() == before


# --- the API and the console --------------------------------------------------------------------------


def test_the_api_steers_as_the_token_operator_and_names_a_bad_field(web: WebRig) -> None:
    rig, client = web.rig, web.client("carol")
    first, second = rig.add(), rig.add()
    base = f"/api/tasks/{second.task_id}"
    assert client.post(f"{base}/pause", {"reason": "later"}).json()["changed"] is True
    assert client.post(f"{base}/resume", {}).status == 200
    edited = client.post(f"{base}/edit", {"priority": 2, "delay": "10m"})
    assert edited.status == 200 and edited.json()["task"]["priority"] == 2
    bad = client.post(f"{base}/edit", {"priority": 0})
    assert (bad.status, bad.error_at()) == (422, "body.priority")
    assert client.post(f"{base}/edit", {"colour": "red"}).status == 422
    assert client.post(f"{base}/link", {"after": first.task_id}).json()["linked"] is True
    cycle = client.post(f"/api/tasks/{first.task_id}/link", {"after": second.task_id})
    assert cycle.status == 422 and "cycle" in cycle.text
    assert client.post(f"{base}/unlink", {"after": first.task_id}).status == 200
    no_reason = client.post(f"{base}/complete", {})
    assert (no_reason.status, no_reason.error_at()) == (422, "body.reason")
    closed = client.post(f"{base}/fail", {"reason": "not needed"})
    assert closed.json()["task"]["status"] == "permanent_failure"
    assert web.client(None).post(f"/api/tasks/{first.task_id}/pause", {}).status == 401
    kinds = ("task_paused", "task_resumed", "task_edited", "task_linked", "task_unlinked", "task_finished")
    assert {e.payload["by"] for e in rig.events(second.task_id) if e.type in kinds} == {"carol"}


def test_the_console_asks_for_a_confirmation_then_steers_with_its_csrf_token(web: WebRig) -> None:
    rig = web.rig
    task = rig.add()
    browser, csrf = logged_in(web)
    page = browser.get(f"/tasks/{task.task_id}").text
    for verb in ("pause", "edit", "link", "complete", "fail"):
        assert f'action="/tasks/{task.task_id}/{verb}"' in page or f'formaction="/tasks/{task.task_id}/{verb}"' in page
    forged = browser.form(f"/tasks/{task.task_id}/pause", {"csrf": "f" * 64, "reason": "x"})
    assert forged.status == 403
    asked = browser.form(f"/tasks/{task.task_id}/pause", {"csrf": csrf, "reason": "lunch"})
    assert asked.status == 200 and "will not be claimed until resumed" in asked.text
    assert rig.store.task_pause(task.task_id) is None, "a confirmation page changes nothing"
    done = browser.form(f"/tasks/{task.task_id}/pause", {"csrf": csrf, "reason": "lunch", "confirm": "yes"})
    assert done.status == 303 and rig.store.task_pause(task.task_id) is not None
    assert events_of(rig, "task_paused", task.task_id)[0].payload == {"by": "alice", "reason": "lunch"}
    shown = browser.get(f"/tasks/{task.task_id}").text
    assert (
        'data-state="paused" title="paused">Paused</span>' in shown
        and f'action="/tasks/{task.task_id}/resume"' in shown
    )
    payload = json.dumps({"note": "typed in"})
    edit = {"csrf": csrf, "priority": "3", "payload": payload, "confirm": "yes"}
    assert browser.form(f"/tasks/{task.task_id}/edit", edit).status == 303
    assert rig.store.get_task_or_raise(task.task_id).priority == 3
    bad = browser.form(f"/tasks/{task.task_id}/edit", {"csrf": csrf, "payload": "[1]", "confirm": "yes"})
    assert bad.status == 422
    no_reason = browser.form(f"/tasks/{task.task_id}/complete", {"csrf": csrf, "confirm": "yes"})
    assert no_reason.status == 422 and rig.store.get_task_or_raise(task.task_id).status == "pending"
