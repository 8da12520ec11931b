"""Issue 52, finding 8: every view says the same thing of a task. One task in each state — lost, paused, waiting
for a person on a tool call, waiting on a task approval, waiting for a provider's reset, queued, running,
completed, failed — made with the store's own verbs on a migrated database, then asked of every view: the CLI's
`task list` and `task show` on the fast path (no pydantic) and the full one, `/api/tasks` and `/api/tasks/{id}`,
the console's list and task page (plain HTTP), `status --json` and the Agent Runtime export. One rule
(agentd/outlook/states.py) answers all of them."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rig import Rig
from test_fast_cli import view
from test_lost_task import dispatcher_gone, dispatcher_live
from test_web_console import logged_in
from test_web_live import running
from webrig import WebRig, serving

from agentd.cli.fast.cache import cache_file
from agentd.clock import age, parse_ts, relative
from agentd.outlook.states import NATIVE, STREAMING_S, StateFacts, task_state
from agentd.records import CredentialGroup, ProviderReset, TaskOutcome
from agentd.store.facts import CallWait
from agentd.store.resets import record_reset
from agentd.work.intake import admit_task

pytestmark = pytest.mark.timeout(120)


def _started(rig: Rig) -> tuple[int, str]:
    task_id, attempt_id = running(rig)
    rig.store.mark_attempt_started(task_id, attempt_id, 4242, rig.clock.now())
    return task_id, attempt_id


def _lost(rig: Rig) -> int:
    task_id, _ = _started(rig)
    dispatcher_gone(rig)
    return task_id


def _running(rig: Rig) -> int:
    return _started(rig)[0]


def _tool_call(rig: Rig) -> int:
    """A call an `ask` rule holds for a person while the attempt waits (docs/policy.md, "Asking a person")."""
    task_id, attempt_id = _started(rig)
    payload = {"tool": "Bash", "summary": "Bash: curl https://example.com", "rule": "ask: rule 1 ([policy])"}
    rig.store.hold_call(task_id, attempt_id, payload, rig.clock.now())
    return task_id


def _paused(rig: Rig) -> int:
    task = rig.add()
    rig.store.pause_task(task.task_id, "alice", "maintenance", rig.clock.now())
    return task.task_id


def _approval(rig: Rig) -> int:
    from agentd.records import TaskIntent

    intent = TaskIntent.model_validate({"task_type": "example", "source": "test", "payload": {}})
    now = rig.clock.now()
    return rig.store.enqueue_task(admit_task(intent, rig.config, now, trusted=True, require_approval=True), now).task_id


def _reset(rig: Rig) -> int:
    """A task whose adapter's credential rests until its provider's reset, as an outcome commit records it."""
    task = rig.add("scripted", requested_adapter_id="scripted")
    now = rig.clock.now()
    reset = ProviderReset(CredentialGroup("test-credential", ("scripted",)), now + timedelta(hours=2), "429: slow down")
    with rig.store.transaction():
        record_reset(rig.store.tx, reset, now)
    return task.task_id


def _closed(status: Literal["completed", "permanent_failure"]) -> Callable[[Rig], int]:
    def close(rig: Rig) -> int:
        task = rig.add()
        outcome = TaskOutcome.failure("declared", status) if status != "completed" else _done()
        rig.store.close_task(task.task_id, outcome, "alice", "declared", rig.clock.now())
        return task.task_id

    return close


def _done() -> TaskOutcome:
    return TaskOutcome(status="completed", machine_status="ok", operator_summary="done by hand")


STATES: dict[str, tuple[Callable[[Rig], int], str]] = {
    "lost": (_lost, "lost"),
    "paused": (_paused, "paused"),
    "tool call": (_tool_call, "waiting_permission"),
    "approval": (_approval, "waiting_permission"),
    "reset": (_reset, "waiting_resource"),
    "queued": (lambda rig: rig.add().task_id, "queued"),
    "running": (_running, "running"),
    "completed": (_closed("completed"), "completed"),
    "failed": (_closed("permanent_failure"), "failed"),
}
RUNNING = ("lost", "tool call", "running")


@pytest.fixture
def web(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> Iterator[WebRig]:
    for where in ("agentd.cli.queue", "agentd.cli.observe"):  # the CLI on the rig's clock
        monkeypatch.setattr(f"{where}.SystemClock", lambda: rig.clock)
    with serving(rig) as served:
        yield served


def listed_state(text: str, task_id: int) -> str:
    """The STATE column of the task's row in `agentd task list`."""
    header, *rows = text.splitlines()
    column = header.split().index("STATE")
    [row] = [line.split() for line in rows if line.split()[0] == str(task_id)]
    return row[column]


def shown_state(text: str) -> str:
    """The state `agentd task show` says: its `state` row, else the status its header names."""
    found = re.search(r"^state +([a-z_]+)", text, re.MULTILINE)
    if found:
        return str(found[1])
    return NATIVE[text.split()[2]]


def cli_states(rig: Rig, rig_cli: Any, task_id: int) -> dict[str, str]:
    """`task list` and `task show` as the CLI prints them."""
    listed = rig_cli(rig, "task", "list")
    shown = rig_cli(rig, "task", "show", str(task_id))
    assert listed.code == 0 and shown.code == 0, listed.err + shown.err
    return {"list": listed_state(listed.out, task_id), "show": shown_state(shown.out)}


def console_row(page: str, task_id: int) -> str:
    rows: list[str] = re.findall(r"<tr[^>]*>.*?</tr>", page, re.DOTALL)
    [row] = [r for r in rows if f'href="/tasks/{task_id}"' in r]
    return row


@pytest.mark.parametrize("name", list(STATES))
def test_every_view_says_the_same_state_of_one_task(web: WebRig, rig_cli: Any, name: str) -> None:
    rig = web.rig
    make, word = STATES[name]
    if name != "lost":
        dispatcher_live(rig)
    task_id = make(rig)
    said: dict[str, str] = {}

    cache_file(rig.config.paths.state_dir).unlink(missing_ok=True)  # no cached view: the full path answers
    said |= {f"full {view_name}": state for view_name, state in cli_states(rig, rig_cli, task_id).items()}
    full_show = rig_cli(rig, "task", "show", str(task_id), "--json").json()["state"]["status"]
    view(rig)  # the cached view: the same commands read it instead of a full load
    said |= {f"fast {view_name}": state for view_name, state in cli_states(rig, rig_cli, task_id).items()}

    api = web.client()
    [listed] = [t for t in api.get("/api/tasks").json()["tasks"] if t["task_id"] == task_id]
    said["/api/tasks"] = listed["state"]["status"]
    said["/api/tasks/{id}"] = api.get(f"/api/tasks/{task_id}").json()["state"]["status"]
    browser, _ = logged_in(web)
    row = console_row(browser.get("/tasks").text, task_id)
    said["console list"] = word if f'data-state="{word}"' in row else row
    page = browser.get(f"/tasks/{task_id}").text
    said["console page"] = word if f'class="state {word}"' in page else page

    status = rig_cli(rig, "status", "--json").json()
    runs = {r["task_id"]: r["state"]["status"] for r in status["running"]}
    exported = rig_cli(rig, "status", "--format", "agent-runtime").json()
    [task] = [t for t in exported["tasks"] if t["taskId"] == str(task_id)]
    said["export"] = task["status"]
    said["show --json"] = full_show

    assert said == dict.fromkeys(said, word), said
    assert runs.get(task_id) == (word if name in RUNNING else None), status["running"]


def test_a_paused_task_is_counted_paused_and_a_lost_one_says_so_in_status(web: WebRig, rig_cli: Any) -> None:
    """`status` counts the paused task where it waits; the text names the lost one (issue 41's sentence)."""
    rig = web.rig
    _paused(rig)
    lost = _lost(rig)
    status = rig_cli(rig, "status", "--json").json()
    assert status["waiting"]["paused"] == 1
    assert f"LOST     task {lost}:" in rig_cli(rig, "status").out


def test_a_held_call_makes_the_session_wait_for_a_person(web: WebRig, rig_cli: Any) -> None:
    """While every running task waits for a person to decide a tool call, the export's session is not active."""
    rig = web.rig
    dispatcher_live(rig)
    _tool_call(rig)
    session = rig_cli(rig, "status", "--format", "agent-runtime").json()["agentSession"]
    assert session["status"] == "waiting-approval"
    assert [ref.split("/")[0] for ref in session["approvalRefs"]] == ["approval:call"]


def test_one_reset_reads_the_same_time_in_every_line_of_status_and_task_show(web: WebRig, rig_cli: Any) -> None:
    """Finding 7: `in 1h56m` beside `in 1h57m` for one reset. 7019.96 s ahead: said from the exact time and the
    view's one now it is 1h56m everywhere, never 1h57m from seconds rounded to 7020.0 first."""
    rig = web.rig
    task_id = rig.add("scripted", requested_adapter_id="scripted").task_id
    now = rig.clock.now()
    until = now + timedelta(seconds=7019.96)
    with rig.store.transaction():
        record_reset(rig.store.tx, ProviderReset(CredentialGroup("c", ("scripted",)), until, "429"), now)
    status = rig_cli(rig, "status").out
    shown = rig_cli(rig, "task", "show", str(task_id)).out
    [reset_line] = [line for line in status.splitlines() if line.startswith("RESET")]
    assert "(in 1h56m)" in reset_line, reset_line
    assert re.search(r"^state +waiting_resource: waiting for the provider's reset at .* \(in 1h56m\)", shown, re.M), (
        shown
    )
    api = web.client().get(f"/api/tasks/{task_id}").json()["state"]["reason"]
    assert "(in 1h56m)" in api, api


@pytest.mark.process
def test_the_fast_list_says_lost_and_paused_without_loading_pydantic(rig: Rig) -> None:
    """`agentd task list` in a fresh interpreter, the view cached: the state without a record loaded."""
    from test_fast_cli import probe

    lost, paused = _lost(rig), _paused(rig)
    assert probe(rig.config.path, "init")["code"] == 0  # the view, in the probe's environment
    listed = probe(rig.config.path, "task", "list")
    assert (listed["code"], listed["pydantic"]) == (0, False), listed
    assert (listed_state(listed["out"], lost), listed_state(listed["out"], paused)) == ("lost", "paused")
    shown = probe(rig.config.path, "task", "show", str(lost))
    assert (shown["code"], shown["pydantic"], shown_state(shown["out"])) == (0, False, "lost"), shown


# --- the rule itself, over plain values ---------------------------------------------------------------


class Task:
    def __init__(self, status: str, awaiting_approval: bool = False) -> None:
        self.task_id, self.status, self.awaiting_approval, self.cancel_requested_at = 7, status, awaiting_approval, None


class Attempt:
    def __init__(self, kind: str) -> None:
        self.attempt_id, self.adapter_kind, self.pid, self.bundle_hash = "A1", kind, 4242, "h"
        self.ended_at, self.termination_reason = None, None


NOW = parse_ts("2026-11-22T10:00:00Z")


def facts(**given: Any) -> StateFacts:
    empty: dict[str, Any] = {"lost": None, "budget_held": {}, "pauses": {}, "links": {}, "activity_at": {}}
    return StateFacts(NOW, **(empty | {"calls": {}, "resets": {}} | given))


@given(kind=st.sampled_from(["script", "claude-code", "codex", "hermes", "ollama"]), quiet=st.floats(0, STREAMING_S))
def test_a_harness_that_reported_streams_and_a_script_that_did_runs(kind: str, quiet: float) -> None:
    seen = NOW - timedelta(seconds=quiet)
    state = task_state(Task("running"), [Attempt(kind)], facts(activity_at={"A1": seen}))
    assert state.status == ("running" if kind == "script" else "streaming")
    assert state.reason is not None and state.reason.endswith(relative(seen, NOW))


@given(waited=st.floats(0, 86_400 * 3))
def test_a_held_call_outranks_the_stream_and_says_how_long_it_waits(waited: float) -> None:
    asked = NOW - timedelta(seconds=waited)
    call = CallWait("C1", 7, "Bash", "Bash: ls", asked)
    state = task_state(Task("running"), [Attempt("claude-code")], facts(calls={"A1": call}, activity_at={"A1": NOW}))
    assert state.status == "waiting_permission"
    assert state.reason is not None and f"asked {relative(asked, NOW)}" in state.reason and "--call C1" in state.reason


@given(seconds=st.floats(-1e7, 1e7, allow_nan=False))
def test_relative_and_since_say_the_same_seconds_as_age(seconds: float) -> None:
    """One clock, one rounding: a time `relative` says is `age` of the exact distance, never of a rounded one."""
    from agentd.clock import since

    moment = NOW - timedelta(seconds=seconds)
    words = relative(moment, NOW)
    if abs(seconds) < 1:
        assert words == "just now"
    else:
        assert words == (f"{age(seconds)} ago" if seconds > 0 else f"in {age(-seconds)}")
    assert since(moment, NOW) == age(seconds)


@given(count=st.integers(0, 10**7), noun=st.sampled_from(["attempt", "profile", "task type", "tool call"]))
def test_a_count_says_its_noun_in_the_right_number(count: int, noun: str) -> None:
    """Issue 52, finding 9: never `1 attempts` or `1 profiles`."""
    from agentd.vocabulary import counted

    words = counted(count, noun)
    assert words == (f"1 {noun}" if count == 1 else f"{count:,} {noun}s")
    assert counted(count, "entry", "entries").endswith("entry" if count == 1 else "entries")
