"""Steering a running agent from the CLI: approvals before a first claim, a pause that survives a
restart, and bounded delegation. Every act is an event naming who and why."""

from __future__ import annotations

import getpass
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from rig import Rig
from support import events_of, ok

pytestmark = pytest.mark.asyncio


@pytest.fixture
def gated(rig_factory: Callable[..., Rig]) -> Rig:
    """`scripted` tasks need an operator's approval."""

    def add(raw: dict[str, Any]) -> None:
        next(t for t in raw["task_types"] if t["task_type"] == "scripted")["requires_approval"] = True

    return rig_factory(add)


async def drain(rig: Rig, *, processes: bool = False) -> int:
    """A fresh dispatcher (a restart each time): its claims until nothing more is claimable."""
    dispatcher = rig.dispatcher(processes=processes)
    await dispatcher.start()
    claimed = await dispatcher.run_until_idle()
    await dispatcher.stop()
    return claimed


async def test_a_task_needing_approval_waits_across_restarts_until_approved(gated: Rig, rig_cli: Any) -> None:
    task = gated.add("scripted", subject="deploy", payload={"outcome": ok()})
    assert task.awaiting_approval
    assert await drain(gated) == 0
    assert await drain(gated) == 0  # a restart between the request and the approval loses nothing
    listed = rig_cli(gated, "approvals", "--json").json()
    assert [(a["task_id"], a["reason"]) for a in listed] == [(task.task_id, "task type scripted requires approval")]
    assert rig_cli(gated, "status", "--json").json()["waiting"]["approval"] == 1
    assert "waiting_permission" in rig_cli(gated, "task", "list").out  # its state (docs/operate.md)
    approved = rig_cli(gated, "approve", str(task.task_id), "--note", "looked at it")
    assert approved.code == 0 and f"approved by {getpass.getuser()}" in approved.out
    assert await drain(gated) == 1
    assert gated.store.get_task_or_raise(task.task_id).status == "completed"
    [requested] = events_of(gated, "approval_requested", task.task_id)
    [resolved] = events_of(gated, "approval_resolved", task.task_id)
    assert resolved.payload == {
        "approval_id": requested.payload["approval_id"],
        "decision": "approved",
        "by": getpass.getuser(),
        "note": "looked at it",
    }
    assert requested.sequence < resolved.sequence
    assert rig_cli(gated, "approvals", "--json").json() == []


async def test_deny_ends_it_operator_canceled_with_the_reason(gated: Rig, rig_cli: Any) -> None:
    task = gated.add("scripted", payload={"outcome": ok()})
    denied = rig_cli(gated, "deny", str(task.task_id), "--reason", "not during the freeze")
    assert denied.code == 0
    ended = gated.store.get_task_or_raise(task.task_id)
    assert ended.status == "operator_canceled" and not ended.awaiting_approval
    assert ended.outcome is not None
    assert ended.outcome.operator_summary == f"denied by {getpass.getuser()}: not during the freeze"
    [resolved] = events_of(gated, "approval_resolved", task.task_id)
    assert (resolved.payload["decision"], resolved.payload["by"]) == ("denied", getpass.getuser())
    assert await drain(gated) == 0
    again = rig_cli(gated, "approve", str(task.task_id))
    assert again.code == 2 and f"task {task.task_id} is not waiting for approval" in again.err


async def test_an_operator_can_require_approval_for_one_task(rig: Rig, rig_cli: Any) -> None:
    added = rig_cli(rig, "task", "add", "--type", "example", "--require-approval")
    assert added.code == 0 and "waiting for approval" in added.out
    rig.clock.advance(max((rig.store.get_task_or_raise(1).available_at - rig.clock.now()).total_seconds(), 0))
    assert await drain(rig) == 0
    assert rig_cli(rig, "approve", "1").code == 0
    assert await drain(rig) == 1
    assert rig_cli(rig, "deny", "404", "--reason", "x").code == 2
    assert rig_cli(rig, "deny", "1").code == 2  # a reason is required


async def pause_when_running(rig: Rig, rig_cli: Any, task_id: int) -> None:
    for _ in range(1000):  # 20 s: the adapter is a real process started by the dispatcher beside us
        if any(a.pid for a in rig.store.attempts_of(task_id)):
            assert rig_cli(rig, "dispatch", "pause", "--reason", "maintenance").code == 0
            return
        await anyio.sleep(0.02)
    raise AssertionError(f"task {task_id} never started")


@pytest.mark.process
async def test_pause_lets_the_running_attempt_finish_and_holds_across_a_restart(rig: Rig, rig_cli: Any) -> None:
    first = rig.add("scripted", payload={"sleep_s": 0.5, "outcome": ok()})
    second = rig.add("scripted", payload={"outcome": ok()})
    async with anyio.create_task_group() as group:
        group.start_soon(pause_when_running, rig, rig_cli, first.task_id)
        claimed = await drain(rig, processes=True)
    assert claimed == 1
    assert rig.store.get_task_or_raise(first.task_id).status == "completed"
    assert rig.store.get_task_or_raise(second.task_id).status == "pending"
    assert await drain(rig) == 0  # a restarted dispatcher is still paused
    status = rig_cli(rig, "status")
    assert "PAUSED   since" in status.out and f"by {getpass.getuser()}: maintenance" in status.out
    assert rig_cli(rig, "dispatch", "pause").out.startswith("dispatch was already paused since")
    assert len(events_of(rig, "dispatch_paused")) == 1
    resumed = rig_cli(rig, "dispatch", "resume")
    assert resumed.code == 0 and "dispatch resumed" in resumed.out
    assert await drain(rig) == 1
    assert rig.store.get_task_or_raise(second.task_id).status == "completed"
    [event] = events_of(rig, "dispatch_resumed")
    assert event.payload["by"] == getpass.getuser()
    assert rig_cli(rig, "dispatch", "resume").out == "dispatch was not paused\n"


@pytest.fixture
def bounded(rig_factory: Callable[..., Rig]) -> Rig:
    def add(raw: dict[str, Any]) -> None:
        raw["profiles"][0]["result_policy"].update(max_follow_up_depth=1, max_follow_ups_per_outcome=2)

    return rig_factory(add)


def follow(subject: str, outcome: dict[str, Any]) -> dict[str, Any]:
    return {"task_type": "scripted", "source": "model", "subject": subject, "payload": {"outcome": outcome}}


async def test_follow_ups_beyond_the_depth_cap_are_refused_and_recorded(bounded: Rig, rig_cli: Any) -> None:
    grandchild = follow("too deep", ok())
    child = follow("child", ok(follow_up_tasks=[grandchild]))
    root = bounded.add("scripted", subject="root", payload={"outcome": ok(follow_up_tasks=[child])})
    await drain(bounded)
    tasks = {t.subject: t for t in bounded.store.list_tasks()}
    assert set(tasks) == {"root", "child"}
    assert (tasks["child"].parent_task_id, tasks["child"].delegation_depth) == (root.task_id, 1)
    [refused] = events_of(bounded, "outbox_refused", tasks["child"].task_id)
    assert "delegation depth 2 would exceed result_policy.max_follow_up_depth = 1" in refused.payload["reason"]
    shown = rig_cli(bounded, "task", "show", str(tasks["child"].task_id))
    assert f"follow-up of task {root.task_id}" in shown.out


async def test_follow_ups_beyond_the_per_outcome_cap_are_refused(bounded: Rig) -> None:
    three = [follow(f"f{i}", ok()) for i in range(3)]
    bounded.add("scripted", subject="root", payload={"outcome": ok(follow_up_tasks=three)})
    await drain(bounded)
    assert {t.subject for t in bounded.store.list_tasks()} == {"root", "f0", "f1"}
    [refused] = events_of(bounded, "outbox_refused")
    assert "follow-up 3 exceeds result_policy.max_follow_ups_per_outcome = 2" in refused.payload["reason"]


@pytest.fixture
def careful(rig_factory: Callable[..., Rig], tmp_path: Any) -> Rig:
    """The profile allows follow-ups and messages, each outcome's only after an operator's approval;
    messages go to a spool file."""

    def add(raw: dict[str, Any]) -> None:
        raw["profiles"][0]["result_policy"].update(
            allow_follow_up_tasks=True, allow_external_messages=True, require_approval_for_side_effects=True
        )
        raw["message_handlers"] = [{"handler_id": "spool", "kind": "spool", "path": str(tmp_path / "out.jsonl")}]
        raw["dispatch"]["default_message_handler"] = "spool"

    return rig_factory(add)


def with_side_effects() -> dict[str, Any]:
    return {"outcome": ok(follow_up_tasks=[follow("next", ok())], external_messages=[{"text": "hello"}])}


async def test_side_effects_wait_in_the_outbox_until_approved(careful: Rig, rig_cli: Any) -> None:
    task = careful.add("scripted", subject="root", payload=with_side_effects())
    assert await drain(careful) == 1
    assert await drain(careful) == 0  # a restart applies nothing held
    assert careful.store.get_task_or_raise(task.task_id).status == "completed"  # the work itself is done
    assert [t.subject for t in careful.store.list_tasks()] == ["root"]
    held = f"held until `agentd approve {task.task_id}`"
    assert [(e["kind"], e["state"], e["reason"]) for e in rig_cli(careful, "outbox", "list", "--json").json()] == [
        ("external_message", "pending", held),
        ("follow_up_task", "pending", held),
    ]
    listed = rig_cli(careful, "approvals")
    assert "its follow-ups and messages" in listed.out and "1 follow-up task(s) and 1 external message(s)" in listed.out
    [requested] = events_of(careful, "approval_requested", task.task_id)
    assert requested.payload["scope"] == "side_effects"
    approved = rig_cli(careful, "approve", str(task.task_id), "--note", "fine")
    assert approved.code == 0 and "follow-ups and messages go ahead" in approved.out
    assert await drain(careful) == 1  # the follow-up, enqueued by the outbox once approved
    assert sorted(t.subject for t in careful.store.list_tasks()) == ["next", "root"]
    [resolved] = events_of(careful, "approval_resolved", task.task_id)
    assert (resolved.payload["decision"], resolved.payload["by"]) == ("approved", getpass.getuser())
    assert rig_cli(careful, "approve", str(task.task_id)).code == 2  # nothing waits any more


async def test_approved_side_effects_go_ahead_at_the_next_tick_while_the_queue_stays_busy(
    careful: Rig, rig_cli: Any
) -> None:
    task = careful.add("scripted", subject="root", payload=with_side_effects())
    dispatcher = careful.dispatcher()
    await dispatcher.start()
    assert await dispatcher.tick(careful.clock.now())  # root completes; its side effects are held
    for n in range(2):
        careful.add("scripted", subject=f"busy {n}", payload={"outcome": ok()})
    assert rig_cli(careful, "approve", str(task.task_id)).code == 0
    assert await dispatcher.tick(careful.clock.now())  # applies what the approval let go, then claims
    subjects = [t.subject for t in careful.store.list_tasks()]
    assert "next" in subjects, "an approved follow-up waited for the queue to empty"
    statuses = {t.subject: t.status for t in careful.store.list_tasks()}
    assert statuses["busy 0"] == "completed" and statuses["busy 1"] != "completed", "one attempt ran in that tick"
    await dispatcher.stop()


async def test_denied_side_effects_are_refused_with_who_and_why(careful: Rig, rig_cli: Any) -> None:
    task = careful.add("scripted", subject="root", payload=with_side_effects())
    assert await drain(careful) == 1
    denied = rig_cli(careful, "deny", str(task.task_id), "--reason", "not today")
    assert denied.code == 0 and "are refused" in denied.out
    assert await drain(careful) == 0
    assert careful.store.get_task_or_raise(task.task_id).status == "completed"
    refused = events_of(careful, "outbox_refused", task.task_id)
    assert sorted(e.payload["kind"] for e in refused) == ["external_message", "follow_up_task"]
    assert {e.payload["reason"] for e in refused} == {f"denied by {getpass.getuser()}: not today"}
    assert [t.subject for t in careful.store.list_tasks()] == ["root"]


async def test_a_canceled_task_waits_for_no_approval(gated: Rig, rig_cli: Any) -> None:
    task = gated.add("scripted", payload={"outcome": ok()})
    assert rig_cli(gated, "task", "cancel", str(task.task_id)).code == 0
    assert rig_cli(gated, "approvals", "--json").json() == []
    assert rig_cli(gated, "status", "--json").json()["waiting"]["approval"] == 0
    [closed] = events_of(gated, "approval_resolved", task.task_id)
    assert (closed.payload["decision"], closed.payload["by"]) == ("denied", getpass.getuser())  # who canceled it
    assert rig_cli(gated, "approve", str(task.task_id)).code == 2


async def test_the_claim_itself_refuses_while_paused(rig: Rig) -> None:
    """The pause is read inside the claim's transaction: a pause that lands just before a claim is
    never followed by one."""
    task = rig.add("scripted", payload={"outcome": ok()})
    rig.store.pause_dispatch("tester", "now", rig.clock.now())
    evidence = rig.config.paths.state_dir / "attempts"
    plan = rig.dispatcher()._plan
    assert rig.store.claim_next_task(rig.clock.now(), "test", plan, evidence) is None
    rig.store.resume_dispatch("tester", rig.clock.now())
    claim = rig.store.claim_next_task(rig.clock.now(), "test", plan, evidence)
    assert claim is not None and claim.task.task_id == task.task_id


@pytest.fixture
def delegating(rig_factory: Callable[..., Rig]) -> Rig:
    """Profile `operator` may delegate 3 deep; profile `narrow` only 1 deep, 1 per outcome; a tree holds
    at most 4 follow-ups."""

    def add(raw: dict[str, Any]) -> None:
        operator = raw["profiles"][0]
        operator["result_policy"].update(
            allow_follow_up_tasks=True, max_follow_up_depth=3, max_follow_ups_per_outcome=5
        )
        narrow = {**operator, "profile_id": "narrow", "result_policy": {**operator["result_policy"]}}
        narrow["result_policy"].update(max_follow_up_depth=1, max_follow_ups_per_outcome=1)
        raw["profiles"].append(narrow)
        raw["task_types"].append(
            {
                **next(t for t in raw["task_types"] if t["task_type"] == "scripted"),
                "task_type": "narrow-scripted",
                "default_profile_id": "narrow",
            }
        )
        raw["dispatch"]["max_descendants"] = 4

    return rig_factory(add)


async def test_a_follow_up_cannot_widen_the_profile_or_adapter_its_parent_had(delegating: Rig) -> None:
    wider = [
        {**follow("other profile", ok()), "requested_profile_id": "narrow"},
        {**follow("other adapter", ok()), "requested_adapter_id": "script"},
        {**follow("same as its parent", ok()), "requested_profile_id": "operator", "requested_adapter_id": "scripted"},
    ]
    delegating.add("scripted", subject="root", payload={"outcome": ok(follow_up_tasks=wider)})
    await drain(delegating)
    assert {t.subject for t in delegating.store.list_tasks()} == {"root", "same as its parent"}
    reasons = sorted(e.payload["reason"] for e in events_of(delegating, "outbox_refused"))
    assert "a follow-up may not choose an adapter other than its parent's ('scripted')" in reasons[0]
    assert "a follow-up may not choose a profile other than its parent's ('operator')" in reasons[1]


async def test_a_follow_up_keeps_the_stricter_caps_of_its_parent_and_its_own_profile(delegating: Rig) -> None:
    great = follow("great-grandchild", ok())
    grand = [follow("grandchild 1", ok(follow_up_tasks=[great])), follow("grandchild 2", ok())]
    child = {**follow("child", ok(follow_up_tasks=grand)), "task_type": "narrow-scripted"}
    delegating.add("scripted", subject="root", payload={"outcome": ok(follow_up_tasks=[child])})
    await drain(delegating)
    tasks = {t.subject: t for t in delegating.store.list_tasks()}
    # the child's own profile allows 1 deep and 1 per outcome: its children inherit that, never the root's 3
    assert tasks["child"].delegation_caps == {"max_depth": 1, "max_per_outcome": 1}
    assert set(tasks) == {"root", "child"}, set(tasks)
    reasons = [e.payload["reason"] for e in events_of(delegating, "outbox_refused", tasks["child"].task_id)]
    assert any("max_follow_up_depth = 1" in r for r in reasons), reasons


async def test_a_tree_of_follow_ups_stops_at_max_descendants(delegating: Rig) -> None:
    leaf = [follow(f"leaf {i}", ok()) for i in range(3)]
    mid = [follow("mid 1", ok(follow_up_tasks=leaf)), follow("mid 2", ok())]
    root = delegating.add("scripted", subject="root", payload={"outcome": ok(follow_up_tasks=mid)})
    await drain(delegating)
    tree = [t for t in delegating.store.list_tasks() if t.root_task_id == root.task_id]
    assert len(tree) == 4 and all(t.status == "completed" for t in tree)
    [refused] = events_of(delegating, "outbox_refused")
    assert f"task {root.task_id} already has 4 descendants ([dispatch] max_descendants)" in refused.payload["reason"]
