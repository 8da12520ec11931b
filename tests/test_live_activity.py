"""Live activity (issue 26): while an attempt runs, its tool calls, model turns, todos and progress lines
become events — seen BEFORE the attempt ends, rate-limited and capped, redacted, and never a way to break
the attempt (docs/live.md). The harnesses are stand-ins (tests/adapters/live.py) that hold still, mid-run,
until the test has seen what it waits for."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import privsep
import pytest
from rig import Rig
from support import ADAPTERS, CliResult, harness_fixture

from agentd.adapters.activity import Activity, ClaudeStream, EventText, stream_parser
from agentd.attempt.live import BURST, MAX_EVENTS, RATE_PER_S, Budget
from agentd.edge import printable
from agentd.outlook.activity import activity_lines, attempt_activity
from agentd.outlook.agent_runtime import runtime_type
from agentd.records import RuntimeEvent
from agentd.records.events import LIVE_EVENT_TYPES

SECRET = "live-s3cret-token-9271"
WAIT_S = 20.0


def live_config(kind: str, folder: Path, secrets: Path, command: Path) -> Callable[[dict[str, Any]], None]:
    """An adapter `live` of `kind` running `command` (tests/adapters/live.py) from `folder`, and its task
    type `live`; the adapter's env_file holds SECRET."""

    def mutate(raw: dict[str, Any]) -> None:
        adapter = {
            "adapter_id": "live",
            "kind": kind,
            "command": str(command),
            "env_file": str(secrets),
            "timeout_ms": 30_000,
            "env": {"LIVE_DIR": str(folder)},
        }
        raw["adapters"].append(adapter)
        raw["task_types"].append(
            {
                "task_type": "live",
                "payload_schema_id": "agent-runtime/payload.any-object/v1",
                "default_profile_id": "operator",
                "default_adapter_id": "live",
            }
        )

    return mutate


class Live:
    """A rig with a `live` adapter whose stand-in writes `before`, waits for `release()`, writes `after`."""

    def __init__(
        self,
        rig_factory: Callable[..., Rig],
        tmp_path: Path,
        kind: str,
        before: list[str],
        after: list[str],
        command: Path = ADAPTERS / "live.py",
    ) -> None:
        self.folder = tmp_path / "live"
        self.folder.mkdir()
        (self.folder / "before.jsonl").write_text("".join(line + "\n" for line in before))
        (self.folder / "after.jsonl").write_text("".join(line + "\n" for line in after))
        secrets = tmp_path / "live.env"
        secrets.write_text(f"LIVE_TOKEN={SECRET}\n")
        secrets.chmod(0o600)
        self.rig = rig_factory(live_config(kind, self.folder, secrets, command))
        self.task_id = self.rig.add("live", payload={}).task_id

    def events(self) -> list[RuntimeEvent]:
        return self.rig.events(self.task_id)

    def live(self) -> list[RuntimeEvent]:
        return [e for e in self.events() if e.type in LIVE_EVENT_TYPES]

    def release(self) -> None:
        (self.folder / "release").write_text("go")

    async def until(self, seen: Callable[[list[RuntimeEvent]], bool], what: str) -> list[RuntimeEvent]:
        """Wait, with a hard deadline, until the task's events satisfy `seen`; the attempt must still run."""
        with anyio.fail_after(WAIT_S):
            while not seen(events := self.events()):  # noqa: ASYNC110 (the store has no event to wait on)
                await anyio.sleep(0.02)
        assert "task_attempt_finished" not in [e.type for e in events], f"{what}: seen only after the attempt ended"
        assert self.rig.store.get_task_or_raise(self.task_id).status == "running"
        return events

    async def run(self, check: Callable[[], Any]) -> Any:
        """Run the task; while it runs, `check()` (async) sees its live events; then let it finish."""
        dispatcher = self.rig.dispatcher(processes=True)
        await dispatcher.start()
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(dispatcher.claim_and_run, self.rig.clock.now())
                try:
                    found = await check()
                finally:
                    self.release()
        finally:
            await dispatcher.stop()
        return found


def of_type(events: list[RuntimeEvent], kind: str) -> list[RuntimeEvent]:
    return [e for e in events if e.type == kind]


OUTCOME = {"status": "completed", "machine_status": "ok", "operator_summary": "worked where people could watch"}
FINAL = "Done.\n```json\n" + json.dumps(OUTCOME) + "\n```"


def fixture_lines(name: str) -> tuple[list[str], list[str]]:
    """A recorded stream split before its end, which becomes one that ends with a valid TaskOutcome:
    claude's result record, codex's last agent_message and its turn.completed."""
    lines = harness_fixture(name).read_text().splitlines()
    if name.startswith("claude"):
        result = {**json.loads(lines[-1]), "result": FINAL}
        return lines[:-1], [json.dumps(result)]
    message = {"type": "item.completed", "item": {"id": "item_99", "type": "agent_message", "text": FINAL}}
    return lines[:-1], [json.dumps(message), lines[-1]]


def todo_write(call_id: str, todos: list[dict[str, Any]], message_id: str = "msg_todo") -> str:
    block = {"type": "tool_use", "id": call_id, "name": "TodoWrite", "input": {"todos": todos}}
    usage = {"input_tokens": 5, "output_tokens": 3}
    return json.dumps({"type": "assistant", "message": {"id": message_id, "content": [block], "usage": usage}})


@pytest.fixture
def live(rig_factory: Callable[..., Rig], tmp_path: Path) -> Iterator[Callable[..., Live]]:
    yield lambda kind, before, after, **more: Live(rig_factory, tmp_path, kind, before, after, **more)


@pytest.mark.process
@pytest.mark.asyncio
async def test_claude_tool_calls_turns_and_todos_are_events_while_it_runs(live: Callable[..., Live]) -> None:
    before, after = fixture_lines("claude_stream_json_tool_use.jsonl")
    todos = [
        {"content": "Write the marker", "status": "completed", "activeForm": "Writing"},
        {"content": "Check it", "status": "in_progress", "activeForm": "Checking"},
        {"content": "Report", "status": "pending", "activeForm": "Reporting"},
    ]
    run = live("claude-code", [*before, todo_write("toolu_todo", todos)], after)

    async def check() -> list[RuntimeEvent]:
        wanted = {"tool_started", "tool_finished", "model_turn_completed", "todos_updated"}
        return await run.until(lambda events: wanted <= {e.type for e in events}, "claude's activity")

    events = await run.run(check)
    [bash, *_] = of_type(events, "tool_started")
    assert bash.payload == {
        "call_id": "toolu_fake_e29ca04554c34588b888b4bd",
        "tool": "Bash",
        "summary": "echo tool-ran-ok > /srv/agent/work/tool_marker.txt; echo tool-ran-ok",
    }
    [finished] = of_type(events, "tool_finished")
    assert finished.payload == {
        "call_id": bash.payload["call_id"],
        "tool": "Bash",
        "ok": True,
        "summary": "tool-ran-ok",
    }
    turn = of_type(events, "model_turn_completed")[0].payload
    assert turn == {"turn": 1, "input_tokens": 11, "output_tokens": 1}
    [listed] = of_type(events, "todos_updated")
    attempt_id = bash.attempt_id
    assert all(e.attempt_id == attempt_id and e.task_id == run.task_id for e in run.live())
    shown = [(t["text"], t["status"], t["runId"]) for t in listed.payload["todos"]]
    assert shown == [
        ("Write the marker", "done", attempt_id),
        ("Check it", "in-progress", attempt_id),
        ("Report", "open", attempt_id),
    ]
    task = run.rig.store.get_task_or_raise(run.task_id)
    assert task.status == "completed", task.last_error
    last_live = max(e.sequence for e in run.live())
    [ended] = of_type(run.events(), "task_attempt_finished")
    assert last_live < ended.sequence


@pytest.mark.process
@pytest.mark.asyncio
async def test_codex_commands_plan_and_turn_are_events_while_it_runs(live: Callable[..., Live]) -> None:
    before, after = fixture_lines("codex_exec_json_tool_use.jsonl")
    plan = {"id": "item_9", "type": "todo_list", "items": [{"text": "run it", "completed": True}, {"text": "say so"}]}
    run = live("codex", [*before, json.dumps({"type": "item.updated", "item": plan})], after)

    async def check() -> list[RuntimeEvent]:
        return await run.until(lambda e: {"tool_finished", "todos_updated"} <= {x.type for x in e}, "codex's activity")

    events = await run.run(check)
    [started] = of_type(events, "tool_started")
    assert started.payload["tool"] == "command_execution" and "echo tool-ran-ok" in started.payload["summary"]
    [finished] = of_type(events, "tool_finished")
    assert finished.payload["ok"] is True and finished.payload["call_id"] == "item_2"
    [todos] = of_type(events, "todos_updated")
    assert [(t["text"], t["status"]) for t in todos.payload["todos"]] == [("run it", "done"), ("say so", "open")]
    turns = of_type(run.events(), "model_turn_completed")  # turn.completed is the stream's last line
    assert [t.payload for t in turns] == [{"turn": 1, "input_tokens": 22, "output_tokens": 14}]
    assert run.rig.store.get_task_or_raise(run.task_id).status == "completed"


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_script_progress_lines_are_events_while_it_runs(live: Callable[..., Live]) -> None:
    long = "x" * 5000
    run = live("script", ["step 1 of 3: fetching", "", f"token {SECRET} in a line", long, "\x1b[31mred\x1b[0m"], [])

    async def check() -> list[RuntimeEvent]:
        return await run.until(lambda e: len(of_type(e, "attempt_progress")) == 4, "the progress lines")

    events = await run.run(check)
    texts = [e.payload["text"] for e in of_type(events, "attempt_progress")]
    assert texts[0] == "step 1 of 3: fetching"
    assert texts[1] == "token [redacted] in a line"
    assert len(texts[2]) == 500 and texts[2].endswith(" chars)") and "x… (+" in texts[2]  # a cut says so
    assert texts[3] == "\\x1b[31mred\\x1b[0m"  # printable: no terminal escape reaches an operator
    assert run.rig.store.get_task_or_raise(run.task_id).status == "completed"


@pytest.mark.process
@pytest.mark.asyncio
async def test_secrets_never_reach_an_event_even_cut_at_the_summary_limit(live: Callable[..., Live]) -> None:
    lines = []
    for n, at in enumerate((0, 150, 190, 199, 200, 260)):  # the secret starting before, at and after the cut
        command = "a" * at + SECRET + " tail"
        block = {"type": "tool_use", "id": f"call_{n}", "name": "Bash", "input": {"command": command}}
        lines.append(json.dumps({"type": "assistant", "message": {"id": f"m{n}", "content": [block]}}))
        result = {"type": "tool_result", "tool_use_id": f"call_{n}", "content": f"printed {SECRET}"}
        lines.append(json.dumps({"type": "user", "message": {"content": [result]}}))
    todos = [{"content": f"use {SECRET}", "status": "pending"}]
    run = live("claude-code", [*lines, todo_write("todo", todos)], [])

    async def check() -> list[RuntimeEvent]:
        return await run.until(lambda e: len(of_type(e, "tool_finished")) == 6 and of_type(e, "todos_updated"), "all")

    await run.run(check)
    shown = json.dumps([e.payload for e in run.live()])
    for part in (SECRET, SECRET[:6], SECRET[-6:]):  # not even the part of one a cut would leave
        assert part not in shown
    assert shown.count("[redacted]") >= 6


@pytest.mark.process
@pytest.mark.asyncio
async def test_poison_in_the_stream_never_breaks_the_attempt(live: Callable[..., Live]) -> None:
    before, after = fixture_lines("claude_stream_json_tool_use.jsonl")
    poison = [
        "[" * 200_000 + "]" * 200_000,
        '{"type": "assistant", "message": {"content": [{"type": "tool_use", "id": NaN, "name": 1e999, "input": NaN}]}}',
        json.dumps({"type": "assistant", "message": {"content": [{"type": "tool_use", "input": "y" * 3_000_000}]}}),
        '{"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "\\ud800", "input": "\\udfff"}]}}',
        '{"type": "user", "message": {"content": [{"type": "tool_result", "content": [1, {"text": 2}]}]}}',
        '{"type": "assistant", "message": {"id": [], "usage": {"input_tokens": -1, "output_tokens": 1e999}}}',
        json.dumps(
            {
                "type": "assistant",
                "message": {"content": [{"type": "tool_use", "name": "TodoWrite", "input": {"todos": "x"}}]},
            }
        ),
        "\xff\xfe not utf-8 \x00",
        "{" * 5000,
    ]
    run = live("claude-code", [*poison, *before], after)

    async def check() -> list[RuntimeEvent]:
        return await run.until(
            lambda e: any(x.payload.get("tool") == "Bash" for x in e), "the good lines after the bad"
        )

    await run.run(check)
    assert run.rig.store.get_task_or_raise(run.task_id).status == "completed"
    summaries = [e.payload["summary"] for e in run.live() if "summary" in e.payload]
    assert summaries and all(len(s) <= 200 and printable(s) == s for s in summaries)
    assert run.rig.store.verify_event_chain() == []


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_link_planted_at_the_progress_path_is_refused(live: Callable[..., Live], tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("what the link points at\n")
    planted = tmp_path / "plant.py"
    planted.write_text(
        f"#!{sys.executable}\nimport os, runpy\n"
        f"os.symlink({str(target)!r}, os.environ['AGENTD_PROGRESS_PATH'])\n"
        f"runpy.run_path({str(ADAPTERS / 'live.py')!r}, run_name='__main__')\n"
    )
    planted.chmod(0o755)
    run = live("script", ["written through the link"], [], command=planted)

    async def check() -> None:
        with anyio.fail_after(WAIT_S):
            while "through the link" not in target.read_text():  # noqa: ASYNC110 (a file: no event to wait on)
                await anyio.sleep(0.02)

    await run.run(check)  # the attempt's end reads its progress one last time: the link is refused then too
    assert "written through the link" in target.read_text()
    assert of_type(run.events(), "attempt_progress") == []
    assert run.rig.store.get_task_or_raise(run.task_id).status == "completed"


def test_the_budget_holds_the_burst_the_rate_and_the_cap() -> None:
    events = [Activity("attempt_progress", {"text": str(n)}) for n in range(10_000)]
    budget = Budget(at=0.0)
    assert len(budget.admit(events, 0.0)) == BURST  # a flood at once: the burst
    assert len(budget.admit(events, 0.0)) == 0
    assert len(budget.admit(events, 1.0)) == RATE_PER_S  # then the rate
    assert len(budget.admit(events, 100.0)) == BURST  # a quiet spell refills only the burst
    written = BURST * 2 + RATE_PER_S
    for second in range(101, 1000):
        written += len(budget.admit(events, float(second)))
    assert written == budget.written == MAX_EVENTS - 1  # one kept for activity_capped
    assert budget.dropped == 10_000 * (1000 - 100 + 3) - written


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_flood_of_progress_is_rate_limited_capped_and_counted(live: Callable[..., Live]) -> None:
    flood = [f"line {n}" for n in range(MAX_EVENTS + 1000)]
    run = live("script", flood, [])
    started = time.monotonic()

    async def check() -> None:
        await run.until(lambda e: len(of_type(e, "attempt_progress")) >= BURST, "the first burst")

    await run.run(check)
    elapsed = time.monotonic() - started
    shown = of_type(run.events(), "attempt_progress")
    assert len(shown) <= BURST + RATE_PER_S * elapsed + 1  # the rate held
    assert [e.payload["text"] for e in shown] == flood[: len(shown)]  # the first ones, in order
    [capped] = of_type(run.events(), "activity_capped")
    assert capped.payload["dropped"] == len(flood) - len(shown)  # nothing lost uncounted
    assert len(run.live()) <= MAX_EVENTS
    assert run.rig.store.get_task_or_raise(run.task_id).status == "completed"


@pytest.mark.process
@pytest.mark.asyncio
async def test_status_says_what_the_running_attempt_is_doing_now(
    live: Callable[..., Live], rig_cli: Callable[..., CliResult]
) -> None:
    todos = [
        {"content": "Read the issue", "status": "completed"},
        {"content": "Write the tests", "status": "in_progress"},
        {"content": "Ship", "status": "pending"},
    ]
    block = {"type": "tool_use", "id": "call_7", "name": "Bash", "input": {"command": "pytest -q tests/"}}
    now = json.dumps({"type": "assistant", "message": {"id": "m2", "content": [block]}})
    run = live(
        "claude-code", [todo_write("todo_1", todos, "m1"), now], fixture_lines("claude_stream_json_tool_use.jsonl")[1]
    )

    async def check() -> tuple[dict[str, Any], CliResult, CliResult]:
        events = await run.until(
            lambda e: bool(of_type(e, "tool_started")) and bool(of_type(e, "todos_updated")), "both"
        )
        attempt_id = events[-1].attempt_id
        assert attempt_id is not None
        return (
            attempt_activity(run.rig.store, run.task_id, attempt_id),
            rig_cli(run.rig, "status", "--json"),
            rig_cli(run.rig, "status"),
        )

    activity, as_json, as_text = await run.run(check)
    last = activity["last"]
    assert (last["type"], last["tool"], last["summary"], last["call_id"]) == (
        "tool_started",
        "Bash",
        "pytest -q tests/",
        "call_7",
    )
    assert [(t["text"], t["status"]) for t in activity["todos"]] == [
        ("Read the issue", "done"),
        ("Write the tests", "in-progress"),
        ("Ship", "open"),
    ]
    [running] = as_json.json()["running"]
    assert running["activity"] == activity
    assert "  now      Bash since " in as_text.out and ": pytest -q tests/" in as_text.out
    assert "  todos    1/3 done; in progress: Write the tests" in as_text.out
    after = attempt_activity(run.rig.store, run.task_id, running["attempt_id"])
    assert after["last"]["type"] == "model_turn_completed"  # the result record closed the turn, at the end


def test_an_attempt_with_no_activity_yet_has_none(rig: Rig) -> None:
    task = rig.add("example")
    rig.store.record_activity(task.task_id, "earlier-attempt", [("attempt_progress", {"text": "old"})], rig.clock.now())
    assert attempt_activity(rig.store, task.task_id, "this-attempt") == {"last": None, "todos": []}
    assert activity_lines({"last": None, "todos": []}) == []


def test_events_shows_a_todo_list_by_where_it_stands(rig: Rig, rig_cli: Callable[..., CliResult]) -> None:
    task = rig.add("example")
    todos = [{"text": t, "status": s} for t, s in (("a", "done"), ("b", "in-progress"), ("c", "open"))]
    rig.store.record_activity(task.task_id, "attempt-1", [("todos_updated", {"todos": todos})], rig.clock.now())
    shown = rig_cli(rig, "events", "--type", "todos_updated")
    assert (
        shown.code == 0
        and "todos_updated  " in shown.out
        and "  task=1 attempt=attempt-1 todos=3: 1 done, 1 in-progress, 1 open" in shown.out
    )
    assert rig_cli(rig, "events", "--type", "todos_updated", "--json").json_lines()[0]["payload"]["todos"] == todos


def todo_list(parser: Any, todos: list[tuple[str, str]], at: str) -> list[tuple[str, str, str, str]]:
    record = json.loads(todo_write("t", [{"content": text, "status": status} for text, status in todos]))
    [update] = [a for a in parser.feed(record, at) if a.type == "todos_updated"]
    return [(t["text"], t["status"], t["createdAt"], t["updatedAt"]) for t in update.payload["todos"]]


def test_a_todo_removed_before_it_is_done_is_dropped_and_each_keeps_when_it_was_made() -> None:
    parser = stream_parser("claude-code", "attempt-1", EventText())
    assert todo_list(parser, [("plan", "pending"), ("build", "pending")], "t1") == [
        ("plan", "open", "t1", "t1"),
        ("build", "open", "t1", "t1"),
    ]
    assert todo_list(parser, [("plan", "completed")], "t2") == [
        ("plan", "done", "t1", "t2"),
        ("build", "dropped", "t1", "t2"),
    ]
    assert todo_list(parser, [], "t3") == [("plan", "done", "t1", "t2"), ("build", "dropped", "t1", "t2")]


def test_a_failed_tool_call_is_tool_failed_in_the_agent_runtime_format(rig: Rig) -> None:
    task = rig.add("example")
    calls = [("tool_finished", {"call_id": n, "tool": "Bash", "ok": n == "1", "summary": ""}) for n in ("1", "2")]
    rig.store.record_activity(task.task_id, "attempt-1", calls, rig.clock.now())
    shown = [runtime_type(e) for e in rig.events(task.task_id) if e.type == "tool_finished"]
    assert shown == ["tool.result", "tool.failed"]


def test_only_activity_goes_through_the_activity_verb(rig: Rig) -> None:
    with pytest.raises(ValueError, match="not an activity event type"):
        rig.store.record_activity(1, "attempt-1", [("task_finished", {})], rig.clock.now())


@pytest.mark.process
@pytest.mark.asyncio
async def test_in_a_flood_every_held_back_event_is_counted_and_the_newest_todo_list_still_lands(
    live: Callable[..., Live],
) -> None:
    states = [
        [{"content": f"step {k}", "status": "completed" if k < n else "pending"} for k in range(5)] for n in range(60)
    ]
    lines = [todo_write(f"call_{n}", todos, f"msg_{n}") for n, todos in enumerate(states)]
    expected = ClaudeStream("attempt", EventText())
    produced = [a for line in lines for a in expected.feed(json.loads(line), "t")]
    run = live("claude-code", lines, fixture_lines("claude_stream_json_tool_use.jsonl")[1])

    async def check() -> None:
        await run.until(lambda e: bool(of_type(e, "todos_updated")), "a todo list")

    await run.run(check)
    written = [e for e in run.live() if e.type not in ("todos_updated", "activity_capped")]
    others = [a for a in produced if a.type != "todos_updated"] + expected.close("t")
    [capped] = of_type(run.events(), "activity_capped")
    assert capped.payload["dropped"] == len(others) - len(written) > 0
    newest = of_type(run.events(), "todos_updated")[-1].payload["todos"]
    assert [t["status"] for t in newest] == ["done"] * 5 and len(of_type(run.events(), "todos_updated")) < 10


@pytest.mark.process
@pytest.mark.asyncio
async def test_events_follow_prints_a_tool_call_while_the_attempt_runs(live: Callable[..., Live]) -> None:
    before, after = fixture_lines("claude_stream_json_tool_use.jsonl")
    run = live("claude-code", before, after)
    argv = [sys.executable, "-m", "agentd", "--config", str(run.rig.config.path), "events", "--follow"]
    follower = await anyio.open_process([*argv, "--type", "tool_started"], stdout=subprocess.PIPE)
    out = follower.stdout
    assert out is not None
    printed = b""
    try:
        with anyio.fail_after(WAIT_S):
            while b"SEQ" not in printed:  # its header: it has read where the chain ends, and follows from there
                printed += await out.receive()

        async def check() -> bytes:
            nonlocal printed
            with anyio.fail_after(WAIT_S):
                while b"tool_started" not in printed:
                    printed += await out.receive()
            assert run.rig.store.get_task_or_raise(run.task_id).status == "running"
            return printed

        await run.run(check)
    finally:
        follower.terminate()
        await follower.wait()
    line = next(line for line in printed.decode().splitlines() if "tool_started" in line)
    assert f"task={run.task_id}" in line and "tool=Bash" in line and "summary=echo tool-ran-ok" in line


@pytest.mark.deep
@pytest.mark.process
def test_progress_written_by_the_run_user_is_read_by_the_service() -> None:
    """With `[dispatch] run_as`, the script writes its progress file as its own user, in its run folder;
    the service (another user) reads it (docs/install-and-deploy.md, "The boundary")."""
    privsep.require()
    with privsep.priv_agent() as agent:
        assert agent.as_service("init").returncode == 0
        payload = json.dumps({"files": {"${AGENTD_PROGRESS_PATH}": "one\ntwo\n"}, "outcome": {**OUTCOME}})
        assert agent.as_operator("task", "add", "--type", "scripted", "--payload", payload).returncode == 0
        ran = agent.as_service("dispatch", "--until-idle")
        assert ran.returncode == 0, ran.stderr
        listed = agent.as_operator("events", "--type", "attempt_progress", "--json")
        assert [json.loads(line)["payload"]["text"] for line in listed.stdout.splitlines()] == ["one", "two"]


@pytest.mark.process
@pytest.mark.asyncio
async def test_what_a_harness_wrote_last_is_read_however_much_came_before_it(live: Callable[..., Live]) -> None:
    filler = ["not json: " + "x" * 1000] * 6000  # 6 MB at once, more than one tick reads
    block = {"type": "tool_use", "id": "call_last", "name": "Bash", "input": {"command": "echo last"}}
    final = json.dumps({"type": "assistant", "message": {"id": "m9", "content": [block]}})
    run = live("claude-code", [], [*filler, final, *fixture_lines("claude_stream_json_tool_use.jsonl")[1]])

    async def check() -> None:
        await run.until(lambda e: any(x.type == "task_started" for x in e), "the start")

    await run.run(check)
    [started] = of_type(run.events(), "tool_started")
    assert started.payload["call_id"] == "call_last"
    assert run.rig.store.get_task_or_raise(run.task_id).status == "completed"
