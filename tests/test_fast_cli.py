"""The hot commands' fast paths (issue 27): `status` and `task add` without pydantic answer exactly as
the full path does, and the config's cached view they read is never used stale or tampered with."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from rig import Rig
from support import examples

from agentd.cli.fast import commands as quick
from agentd.cli.fast.cache import cache_file, read_view, write_view
from agentd.clock import FakeClock, format_ts
from agentd.errors import InputError
from agentd.outlook.snapshot import AgentView, agent_snapshot
from agentd.outlook.status import snapshot
from agentd.process import procs
from agentd.records import TaskIntent
from agentd.work.intake import admit_task

RIG_SETTINGS = settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck))


@contextlib.contextmanager
def fresh(factory: pytest.TempPathFactory, clock: FakeClock) -> Iterator[Rig]:
    """A new agent (config, database) per example: what one example did never leaks into the next."""
    from support import agent_config

    from agentd.work.validation import load_config

    rig = Rig(load_config(agent_config(factory.mktemp("agent"))), clock)
    try:
        yield rig
    finally:
        rig.close()


def view(rig: Rig) -> dict[str, Any]:
    write_view(rig.config)
    found = read_view(rig.config.path)
    assert found is not None, "a view just written is read back"
    return found


# --- status: the same snapshot --------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 10), st.sampled_from([0, 0, 30, 7200])),
        st.tuples(st.just("held"), st.integers(1, 10), st.sampled_from([0, 600])),
        st.tuples(st.just("advance"), st.sampled_from([1, 59, 3600]), st.just(0)),
        st.tuples(st.just("claim"), st.just(0), st.just(0)),
        st.tuples(st.just("cancel"), st.just(0), st.just(0)),
        st.tuples(st.just("pause"), st.just(0), st.just(0)),
        st.tuples(st.just("resume"), st.just(0), st.just(0)),
        st.tuples(st.just("service"), st.sampled_from(["idle", "running task 1", "stopped"]), st.integers(0, 3)),
        st.tuples(st.just("lock"), st.just(0), st.just(0)),
    ),
    max_size=12,
)


def apply(rig: Rig, op: tuple[str, Any, Any]) -> None:
    kind, first, second = op
    now = rig.clock.now()
    if kind == "add":
        rig.add("scripted", priority=first, payload={}, schedule={"delay_minutes": second} if second else None)
    elif kind == "held":
        intent = TaskIntent.model_validate({"task_type": "example", "source": "test", "payload": {}, "priority": first})
        rig.store.enqueue_task(admit_task(intent, rig.config, now, trusted=True, require_approval=True), now)
    elif kind == "advance":
        rig.clock.advance(first)
    elif kind == "claim":
        rig.store.claim_next_task(now, "test", rig.dispatcher()._plan, rig.config.paths.state_dir / "attempts")
    elif kind == "cancel" and (waiting := rig.store.list_tasks(statuses=("pending",), limit=1)):
        rig.store.cancel_task(waiting[0].task_id, _canceled(), now)
    elif kind == "pause":
        rig.store.pause_dispatch("tester", "a reason", now)
    elif kind == "resume":
        rig.store.resume_dispatch("tester", now)
    elif kind == "service":
        _service(rig, first, second)
    elif kind == "lock":
        _lock(rig)


def _canceled() -> Any:
    from agentd.records import TaskOutcome

    return TaskOutcome.failure("canceled by the test", "operator_canceled")


def _service(rig: Rig, status: str, who: int) -> None:
    """A service row written by this process, a gone one, another host's, or one from before agentd
    recorded who wrote it (pid_started NULL: a poisoned row as old databases hold them)."""
    me = procs.this_process()
    identity = [
        me,
        procs.ProcessIdentity(2**22 + 7, 1, me.host, me.boot_id),
        procs.ProcessIdentity(1, 1, "elsewhere", "x"),
    ]
    now = rig.clock.now()
    name = ("dispatch", "sensors")[who % 2]
    rig.store.report_service_status(name, identity[min(who, 2)], status, None, now, now)
    if who == 3:
        with rig.store.transaction() as conn:
            conn.execute("UPDATE service_status SET pid_started = NULL, host = NULL WHERE service = ?", (name,))


def _lock(rig: Rig) -> None:
    from agentd.records import LockHolder

    me = procs.this_process()
    now = rig.clock.now()
    holder = LockHolder("holder-1", me.pid, me.started, me.host, me.boot_id, now, now)
    rig.store.acquire_dispatch_lock(holder, now)


@RIG_SETTINGS
@given(ops=OPS)
def test_the_status_from_the_view_is_the_status_from_the_whole_config(
    tmp_path_factory: pytest.TempPathFactory, clock: FakeClock, ops: list[tuple[str, Any, Any]]
) -> None:
    """`agentd status` has one path (agentd/outlook/snapshot.py): from the config's cached view it says what
    the whole config says, running attempts and held calls included, and never asks for the whole config
    where the budget is not capped."""
    with fresh(tmp_path_factory, clock) as rig:
        for op in ops:
            apply(rig, op)
        now = rig.clock.now()
        full = snapshot(rig.config, rig.store, now)
        assert agent_snapshot(AgentView.of(view(rig)), rig.store, now, never_asked) == full


def never_asked() -> Any:
    raise AssertionError("the whole config was asked for, and the budget is not capped")


def test_a_capped_budgets_status_asks_for_the_whole_config_once(rig_factory: Any) -> None:
    rig = rig_factory(lambda raw: raw.__setitem__("budget", {"daily_usd": 5.0}))
    asked: list[int] = []

    def whole() -> Any:
        asked.append(1)
        return rig.config

    now = rig.clock.now()
    shown = agent_snapshot(AgentView.of(view(rig)), rig.store, now, whole)
    assert asked == [1] and shown == snapshot(rig.config, rig.store, now)
    assert shown["budget"] is not None and shown["budget"]["daily_usd"] == 5.0


# --- task add: the same admission, the same rows ----------------------------------------------------

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12) | st.sampled_from(
    ["example", "scripted", "ok\n", "", "a" * 129, "operator", "script", "no-such"]
)
PAYLOAD = st.dictionaries(
    st.text(max_size=4), st.integers(-(2**70), 2**70) | st.text(max_size=4) | st.none(), max_size=3
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    task_type=st.sampled_from(["example", "scripted", "plan", "nope", "ex ample"]),
    subject=st.none() | TEXT,
    priority=st.none() | st.integers(-1, 12),
    payload=PAYLOAD,
    profile=st.none() | TEXT,
    adapter=st.none() | TEXT,
    model=st.none() | TEXT,
    skills=st.none() | st.lists(TEXT, max_size=2),
    delay=st.none() | st.sampled_from([0.0, 1.5, -1.0, 525_600.0, 525_601.0, float("inf"), float("nan")]),
    artifacts=st.none() | st.lists(st.sampled_from(["out.txt", "../x", "/etc/passwd", "a/b"]), min_size=1, max_size=2),
)
def test_the_fast_admission_takes_only_what_admit_task_takes_and_makes_the_same_task(
    rig: Rig, **given_fields: Any
) -> None:
    fields = intent(**given_fields)
    now = rig.clock.now()
    fast = quick.admitted(view(rig)["intake"], fields, now)
    try:
        full = admit_task(TaskIntent.model_validate(fields), rig.config, now, trusted=True)
    except (ValidationError, InputError):  # either is a no
        assert fast is None, f"the fast path took what the full path refuses: {fields}"
        return
    if fast is None:
        return  # the full path answers: always allowed
    assert full.approval_reason is None
    assert fast == {
        "task_type": full.task_type,
        "source": full.source,
        "subject": full.subject,
        "description": full.description,
        "priority": full.priority,
        "payload": full.payload,
        "requested_profile_id": full.requested_profile_id,
        "requested_adapter_id": full.requested_adapter_id,
        "requested_model": full.requested_model,
        "skill_ids": full.skill_ids,
        "evidence_requirements": full.evidence_requirements.model_dump(exclude_none=True)
        if full.evidence_requirements
        else None,
        "max_attempts": full.max_attempts,
        "available_at": full.available_at,
    }


def intent(**given: Any) -> dict[str, Any]:
    """The fields `task add` builds (agentd/cli/fast/commands.py intent_fields) from these options."""
    fields = {
        "task_type": given["task_type"],
        "source": "operator:tester",
        "subject": given["subject"],
        "description": None,
        "priority": given["priority"],
        "payload": given["payload"],
        "requested_profile_id": given["profile"],
        "requested_adapter_id": given["adapter"],
        "requested_model": given["model"],
        "skill_ids": given["skills"] or None,
    }
    if given["delay"] is not None:
        fields["schedule"] = {"delay_minutes": given["delay"]}
    if given["artifacts"]:
        fields["evidence_requirements"] = {"required_artifacts": given["artifacts"]}
    return fields


def test_the_fast_admission_is_not_a_path_nothing_takes(rig: Rig) -> None:
    fields = intent(task_type="example", subject="s", priority=None, payload={"note": "x"}, profile=None,
                    adapter=None, model=None, skills=None, delay=None, artifacts=None)  # fmt: skip
    assert quick.admitted(view(rig)["intake"], fields, rig.clock.now()) is not None


def test_the_fast_enqueue_writes_the_rows_enqueue_task_writes(rig: Rig, tmp_path: Path) -> None:
    from support import agent_config

    from agentd.store.plain import enqueue_plain, open_plain
    from agentd.work.validation import load_config

    one, two = rig, Rig(load_config(agent_config(tmp_path / "two")), rig.clock)  # two databases, one clock
    fields = intent(task_type="example", subject="s", priority=3, payload={"note": "n"}, profile=None, adapter=None,
                    model=None, skills=None, delay=90.0, artifacts=["out.txt"])  # fmt: skip
    now = one.clock.now()
    full = one.store.enqueue_task(
        admit_task(TaskIntent.model_validate(fields), one.config, now, trusted=True), now, event_payload={"by": "me"}
    )
    plain = open_plain(two.config.db_path, two.clock, readonly=False)
    assert plain is not None
    task_id = enqueue_plain(plain, quick.admitted(view(two)["intake"], fields, now) or {}, now, {"by": "me"})
    plain.close()
    assert two.store.get_task_or_raise(task_id) == full
    [left], [right] = one.store.read_events(task_id=full.task_id), two.store.read_events(task_id=task_id)
    two.close()
    chained = {"event_id", "prev_hash", "hash"}  # each database's own chain
    unchained = dict.fromkeys(chained, "")
    assert dataclasses.replace(left, **unchained) == dataclasses.replace(right, **unchained)


# --- the CLI: the fast path is the one taken, and the chain it extends verifies -----------------------

PROBE = """
import contextlib, io, json, sys
from agentd.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "out": out.getvalue(), "pydantic": "pydantic" in sys.modules}))
"""


def probe(config: Path, *argv: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "--config", str(config), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.process
def test_status_and_task_add_run_without_pydantic_once_the_view_is_there(rig: Rig) -> None:
    cache_file(rig.config.paths.state_dir).unlink(missing_ok=True)
    first = probe(rig.config.path, "task", "add", "--type", "example", "--subject", "one")
    assert first["pydantic"], "without a view: the full path, which leaves one"
    assert oct(cache_file(rig.config.paths.state_dir).stat().st_mode & 0o777) == "0o600"
    second = probe(rig.config.path, "task", "add", "--type", "example", "--subject", "two", "--delay", "90s")
    assert not second["pydantic"]
    task = rig.store.get_task_or_raise(2)
    assert second["out"] == f"task 2 enqueued (example, priority 5, available {format_ts(task.available_at)})\n"
    assert (task.subject, task.available_at - task.created_at) == ("two", timedelta(seconds=90))
    status = probe(rig.config.path, "status", "--json")
    assert not status["pydantic"] and json.loads(status["out"])["counts"]["pending"] == 2
    verified = probe(rig.config.path, "evidence", "verify", "--all")
    assert verified["code"] == 0, verified["out"]


@pytest.mark.process
def test_a_refused_task_add_is_said_by_the_full_path(rig: Rig) -> None:
    write_view(rig.config)
    done = subprocess.run(
        [sys.executable, "-m", "agentd", "--config", str(rig.config.path), "task", "add", "--type", "example",
         "--priority", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--priority: expected 1 (most urgent) to 10 (least urgent), found 0" in done.stderr
    assert rig.store.list_tasks() == []


# --- the cached view: never stale, never tampered with --------------------------------------------


def test_every_file_the_view_depends_on_makes_it_stale_when_it_changes(rig: Rig) -> None:
    view(rig)
    cached = json.loads(cache_file(rig.config.paths.state_dir).read_text().partition("\n")[2])
    inside = [p for p in cached["paths"] if Path(p).is_file() and Path(p).is_relative_to(rig.config.path.parent.parent)]
    assert str(rig.config.path) in inside and len(inside) >= 3  # the TOML, SOUL.md, PURPOSE.md at least
    for path in inside:
        before = Path(path).read_bytes()
        Path(path).write_bytes(before + b"\n")
        assert read_view(rig.config.path) is None, f"{path} changed: the view is stale"
        Path(path).write_bytes(before)
    assert read_view(rig.config.path) is not None, "a view is not stale while nothing it was built from changed"


def test_a_changed_mode_or_an_environment_override_makes_it_stale(
    rig_factory: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    command = tmp_path / "adapter.sh"  # a copy: the repository's own scripts are other tests' too
    command.write_text("#!/bin/sh\nexit 0\n")
    command.chmod(0o755)

    def own_command(raw: dict[str, Any]) -> None:
        raw["adapters"][0]["command"] = str(command)

    rig = rig_factory(own_command)
    view(rig)
    command.chmod(0o644)  # no longer executable: the full path refuses the config
    assert read_view(rig.config.path) is None
    command.chmod(0o755)
    assert read_view(rig.config.path) is not None
    monkeypatch.setenv("AGENTD_DISPATCH__DEFAULT_MAX_ATTEMPTS", "2")
    assert read_view(rig.config.path) is None
    monkeypatch.delenv("AGENTD_DISPATCH__DEFAULT_MAX_ATTEMPTS")
    assert read_view(rig.config.path) is not None


def test_a_new_file_in_the_skills_folder_makes_it_stale(rig_factory: Any, tmp_path: Path) -> None:
    import shutil

    from support import REPO

    skills = tmp_path / "skills"
    shutil.copytree(REPO / "skills", skills)
    rig = rig_factory(lambda raw: raw["paths"].__setitem__("skills_dir", str(skills)))
    view(rig)
    (skills / "new-skill").mkdir()
    assert read_view(rig.config.path) is None


@pytest.mark.parametrize("tamper", ["body", "mode", "link", "owner", "moved"])
def test_a_tampered_view_is_never_used(rig: Rig, tamper: str, tmp_path: Path) -> None:
    view(rig)
    path = cache_file(rig.config.paths.state_dir)
    digest, _, body = path.read_text().partition("\n")
    if tamper == "body":
        path.write_text(digest + "\n" + body.replace('"demo"', '"other"'))
    elif tamper == "mode":
        path.chmod(0o644)
    elif tamper == "link":
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_text(path.read_text())
        elsewhere.chmod(0o600)
        path.unlink()
        path.symlink_to(elsewhere)
    elif tamper == "owner":
        if os.geteuid() != 0:
            pytest.skip("changing a file's owner needs root")
        os.chown(path, 65534, 65534)
    elif tamper == "moved":  # a view of another state dir, copied here whole
        cached = json.loads(body)
        cached["view"]["state_dir"] = "/somewhere/else"
        text = json.dumps(cached, sort_keys=True)
        import hashlib

        path.write_text(hashlib.sha256(text.encode()).hexdigest() + "\n" + text)
    assert read_view(rig.config.path) is None


def test_a_command_that_writes_replaces_a_stale_view_and_one_that_looks_leaves_the_state_dir_alone(
    rig: Rig, rig_cli: Any
) -> None:
    view(rig)
    path = cache_file(rig.config.paths.state_dir)
    path.write_text("not a view")
    path.chmod(0o600)
    assert rig_cli(rig, "status").code == 0  # no view: the full path, which only looks
    assert path.read_text() == "not a view"
    assert rig_cli(rig, "task", "add", "--type", "example").code == 0  # no view: the full path, which writes
    assert read_view(rig.config.path) is not None


@pytest.mark.process
def test_init_leaves_the_view_for_the_first_command(tmp_path: Path) -> None:
    from support import agent_config

    config = agent_config(tmp_path)
    assert probe(config, "init")["code"] == 0
    assert not probe(config, "status")["pydantic"]


# --- events, approvals, approve: the same output, poisoned rows included ---------------------------


def both_paths(rig: Rig, rig_cli: Any, *args: str) -> tuple[Any, Any]:
    """The command's output through the full path (no view), then through the fast one."""
    cache_file(rig.config.paths.state_dir).unlink(missing_ok=True)
    full = rig_cli(rig, *args)
    view(rig)
    return full, rig_cli(rig, *args)


def parsed(rig: Rig, *args: str) -> Any:
    from agentd.cli import build_parser

    return build_parser().parse_args(["--config", str(rig.config.path), *args])


POISON = st.sampled_from(
    [
        ("payload", "NaN"),
        ("payload", '{"a": 1e999}'),
        ("payload", '{"big": 99999999999999999999999}'),
        ("payload", "[1, 2]"),
        ("payload", "not json"),
        ("payload", '{"deep": ' + "[" * 80 + "]" * 80 + "}"),
        ("refs", "7"),
        ("payload", '{"fine": "\\u00e9t\\u00e9", "n": 1.5}'),
        ("payload", '{"big": 1e16, "small": [1e-07, 0.0001, -2.5e300]}'),
        ("payload", '{"quote": "\\"\\\\\\u0000\\u001f\\u007f\\u2028 \\ud83d\\ude00", "t": true, "n": null}'),
        ("payload", '{"lone": "\\ud800"}'),
    ]
)


@RIG_SETTINGS
@given(ops=OPS, poison=st.lists(st.tuples(st.integers(1, 40), POISON), max_size=3))
def test_events_print_the_same_through_both_paths(
    tmp_path_factory: pytest.TempPathFactory,
    clock: FakeClock,
    rig_cli: Any,
    ops: list[tuple[str, Any, Any]],
    poison: list[tuple[int, tuple[str, str]]],
) -> None:
    with fresh(tmp_path_factory, clock) as rig:
        events_both_ways(rig, rig_cli, ops, poison)


def events_both_ways(
    rig: Rig, rig_cli: Any, ops: list[tuple[str, Any, Any]], poison: list[tuple[int, tuple[str, str]]]
) -> None:
    for op in ops:
        apply(rig, op)
    import sqlite3

    edit = sqlite3.connect(rig.config.db_path, isolation_level=None)
    edit.execute("PRAGMA ignore_check_constraints = ON")  # an edit, as an older agentd or a person leaves one
    for sequence, (column, text) in poison:
        edit.execute(f"UPDATE events SET {column} = ? WHERE sequence = ?", (text, sequence))
    edit.close()
    for args in (
        ("events",), ("events", "--last", "3"), ("events", "--type", "task_enqueued", "--after", "2"),
        ("events", "--json"), ("events", "--format", "json", "--last", "2"), ("events", "--oldest-first"),
        ("events", "--before", "30", "--limit", "4"), ("events", "--before", "30", "--limit", "4", "--json"),
        ("events", "--until", "1h", "--limit", "3"),
    ):  # fmt: skip
        full, fast = both_paths(rig, rig_cli, *args)
        assert (fast.code, fast.out, fast.err) == (full.code, full.out, full.err)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",))),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=examples(300))
@given(payload=st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5), subject=st.text())
def test_an_events_json_line_is_the_records_own(payload: dict[str, Any], subject: str) -> None:
    """`events --json` writes each event as one compact line that reads back as the record's own JSON
    (agentd/records/stored.py `record_json`), whatever its payload holds."""
    from agentd.records import RuntimeEvent, event_json, record_json

    fields = {
        "event_id": "01M8ARFN5G5ENN98ZC4R03FYWP", "type": "task_enqueued", "sequence": 7, "schema_version": 1,
        "task_id": 3, "attempt_id": None, "workflow_id": None, "schedule_id": None, "sensor_id": subject or None,
        "payload": {**payload, "subject": subject}, "refs": {"r": payload}, "prev_hash": "0" * 64, "hash": "f" * 64,
    }  # fmt: skip
    moment = FakeClock().now()
    event = RuntimeEvent(timestamp=moment, **fields)
    line = event_json(event)
    assert "\n" not in line and line == json.dumps(json.loads(line), ensure_ascii=False, separators=(",", ":"))
    assert json.loads(line) == record_json(event)
    keys = list(fields)
    assert list(json.loads(line)) == [*keys[:2], "timestamp", *keys[2:]]


def test_events_of_a_task_that_does_not_exist_are_the_full_paths_error(rig: Rig, rig_cli: Any) -> None:
    full, fast = both_paths(rig, rig_cli, "events", "--task", "99")
    assert (fast.code, fast.err) == (full.code, full.err) and full.code != 0


@RIG_SETTINGS
@given(ops=OPS)
def test_approvals_and_approve_answer_the_same_through_both_paths(
    tmp_path_factory: pytest.TempPathFactory, clock: FakeClock, rig_cli: Any, ops: list[tuple[str, Any, Any]]
) -> None:
    with fresh(tmp_path_factory, clock) as rig:
        approvals_both_ways(rig, rig_cli, ops)


def approvals_both_ways(rig: Rig, rig_cli: Any, ops: list[tuple[str, Any, Any]]) -> None:
    for op in [*ops, ("held", 3, 0)]:
        apply(rig, op)
    for args in (("approvals",), ("approvals", "--json")):
        full, fast = both_paths(rig, rig_cli, *args)
        assert (fast.code, fast.out) == (full.code, full.out)
    held = [p.task_id for p in rig.store.pending_approvals()]
    write_view(rig.config)
    fast = rig_cli(rig, "approve", str(held[-1]), "--note", "ok")
    approval = rig.store.read_events(task_id=held[-1], types=("approval_resolved",))[-1]
    assert fast.code == 0 and fast.out.startswith(f"task {held[-1]} approved by ")
    assert approval.payload["decision"] == "approved" and approval.payload["note"] == "ok"
    assert not rig.store.get_task_or_raise(held[-1]).awaiting_approval
    again = rig_cli(rig, "approve", str(held[-1]))  # nothing pending now: the full path's refusal
    assert again.code == 2 and "is not waiting for approval" in again.err


@pytest.mark.parametrize("name", ["spaces", "unicode spaces"])
def test_a_held_tool_call_is_shown_whole_by_status_and_approvals_through_either_path(
    rig: Rig, rig_cli: Any, name: str
) -> None:
    """Issue 50, finding 2: a call held for a person is the full path's to show (its whole input, its tail
    in view), whichever path `status` and `approvals` would take; the fast one leaves it to the full one
    even when no attempt runs (a held call's attempt closed while its calls' denial failed)."""
    from support import HIDDEN_HEAD, HIDDEN_TAIL, PADDINGS, in_view
    from test_web_calls import hold

    hold(rig, HIDDEN_HEAD + PADDINGS[name] + HIDDEN_TAIL)
    for args in (("status",), ("approvals",)):
        full, fast = both_paths(rig, rig_cli, *args)
        assert fast.out == full.out and in_view(fast.out, PADDINGS[name]), fast.out
    full, fast = (result.json()["held_calls"] for result in both_paths(rig, rig_cli, "status", "--json"))
    assert [c | {"age_s": 0} for c in fast] == [c | {"age_s": 0} for c in full]  # seconds apart: the same call
    assert in_view(fast[0]["summary"], PADDINGS[name])


def decided(rig: Rig, task_id: int) -> dict[str, Any]:
    """What an approval's decision left of a task: its row, its approvals and its events, without the ids
    and the times (two tasks decided a moment apart compare equal)."""
    db = rig.store.tx
    task = dict(db.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone())
    for moment in ("id", "created_at", "updated_at", "finished_at", "available_at"):
        task.pop(moment)
    approvals = db.execute(
        "SELECT status, decided_by, reason, scope, decided_at IS NOT NULL FROM approvals WHERE task_id = ?", (task_id,)
    ).fetchall()
    events = [
        (e.type, {k: v for k, v in e.payload.items() if k not in ("approval_id", "task_id")})
        for e in rig.store.read_events(task_id=task_id, limit=1000)
    ]
    return {"task": task, "approvals": [tuple(a) for a in approvals], "events": events}


@pytest.mark.parametrize(
    "verb", [("approve",), ("approve", "--note", "looks right"), ("deny", "--reason", "not this week")]
)
def test_approve_and_deny_do_through_the_fast_path_what_the_full_path_does(
    rig: Rig, rig_cli: Any, monkeypatch: pytest.MonkeyPatch, verb: tuple[str, ...]
) -> None:
    """Two tasks held alike: one decided by the full path (no view), the other by the fast one (the full
    path made to fail, so it cannot have answered). The same words, rows and events, ids and times aside."""
    for _ in range(2):
        apply(rig, ("held", 3, 0))
    first, second = [p.task_id for p in rig.store.pending_approvals()][-2:]
    cache_file(rig.config.paths.state_dir).unlink(missing_ok=True)
    full = rig_cli(rig, verb[0], str(first), *verb[1:])
    view(rig)

    def no_full_path(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the full path answered")

    monkeypatch.setattr("agentd.control.resolve_approval", no_full_path)
    fast = rig_cli(rig, verb[0], str(second), *verb[1:])
    assert full.code == 0, full.err
    assert (fast.code, fast.err) == (full.code, full.err)
    assert fast.out.replace(f"task {second}", "task N") == full.out.replace(f"task {first}", "task N")
    assert decided(rig, second) == decided(rig, first)
    monkeypatch.undo()
    again = rig_cli(rig, *verb[:1], str(second), *verb[1:])  # nothing pending now: the full path's refusal
    assert again.code == 2 and "is not waiting for approval" in again.err


@settings(max_examples=examples(200))
@given(summary=st.text(), note=st.one_of(st.none(), st.text()))
def test_a_denied_tasks_outcome_is_the_records_own(summary: str, note: str | None) -> None:
    """The fast path writes a denied task's outcome without pydantic: the same JSON TaskOutcome stores."""
    from agentd.records import TaskOutcome
    from agentd.store.plain import canceled_outcome, denial

    written = TaskOutcome.failure(summary, "operator_canceled").model_dump(mode="json", exclude_none=True)
    assert canceled_outcome(summary) == written
    assert denial("op", note).startswith("denied by op")


@pytest.mark.process
def test_deny_task_show_and_events_json_run_without_pydantic_once_the_view_is_there(rig: Rig) -> None:
    from agentd.process.privilege import operator_name

    apply(rig, ("held", 3, 0))
    (held,) = [p.task_id for p in rig.store.pending_approvals()]
    assert probe(rig.config.path, "init")["code"] == 0  # the view, in the probe's environment
    denied = probe(rig.config.path, "deny", str(held), "--reason", "no")
    assert (denied["code"], denied["pydantic"]) == (0, False), denied
    assert denied["out"] == f"task {held} denied by {operator_name()}: operator_canceled\n"
    assert rig.store.get_task_or_raise(held).status == "operator_canceled"
    page = probe(rig.config.path, "task", "show", str(held))
    assert (page["code"], page["pydantic"]) == (0, False), page
    assert page["out"].startswith(f"task {held}  operator_canceled") and "summary     denied by" in page["out"]
    logged = probe(rig.config.path, "events", "--json", "--task", str(held))
    assert (logged["code"], logged["pydantic"]) == (0, False), logged
    assert [json.loads(line)["type"] for line in logged["out"].splitlines()][-1] == "task_finished"


@pytest.mark.process
def test_task_list_and_events_run_without_pydantic_once_the_view_is_there(rig: Rig) -> None:
    """The one path of `task list` and `events`, as text and as JSON: the view and the store's plain records
    (docs/decisions.md, "One shape per fact")."""
    apply(rig, ("add", 2, 0))
    apply(rig, ("claim", 0, 0))
    assert probe(rig.config.path, "init")["code"] == 0  # the view, in the probe's environment
    for args in (("task", "list"), ("task", "list", "--json"), ("events",), ("events", "--last", "2")):
        ran = probe(rig.config.path, *args)
        assert (ran["code"], ran["pydantic"]) == (0, False), (args, ran)
    listed = json.loads(probe(rig.config.path, "task", "list", "--json")["out"])
    assert [task["task_id"] for task in listed] == [t.task_id for t in rig.store.list_tasks(limit=50)]


# --- task list: the same table, poisoned rows included -----------------------------------------------

TASK_POISON = st.sampled_from(
    [
        ("outcome", '{"status": "completed", "machine_status": "ok", "operator_summary": "done"}'),
        ("outcome", '{"status": "completed", "machine_status": "ok"}'),
        ("outcome", '{"status": "finished", "machine_status": "ok", "operator_summary": "x"}'),
        ("outcome", '{"status": "completed", "machine_status": "ok", "operator_summary": "x", "extra": 1}'),
        ("outcome", '{"status": "completed", "machine_status": "ok", "operator_summary": "\\ud800"}'),
        ("outcome", '{"status": "completed", "machine_status": "ok", "operator_summary": "x", "follow_up_tasks": '
         '[{"task_type": "example", "source": "s", "payload": {}, "available_at": "soon"}]}'),
        ("outcome", '{"status": "completed", "machine_status": "ok", "operator_summary": "x", "follow_up_tasks": '
         '[{"task_type": "bad\\n", "source": "s", "payload": {}}]}'),
        ("outcome", "[1]"),
        ("skill_ids", "null"),
        ("skill_ids", '["a", 1]'),
        ("delegation_caps", '{"max_depth": 1.5}'),
        ("evidence_requirements", '{"required_artifacts": "x"}'),
        ("evidence_requirements", "{}"),
        ("payload", '{"n": 1e999}'),
        ("priority", 0),
        ("status", "weird"),
        ("available_at", "garbage"),
        ("delegation_depth", -1),
        ("subject", 7),
    ]
)  # fmt: skip


def outcome_of(rig_cli: Any, rig: Rig, *args: str) -> tuple[Any, ...]:
    """(exit code, stdout, stderr), or the exception's type where the command raised one."""
    try:
        done = rig_cli(rig, *args)
    except Exception as exc:
        return (type(exc),)
    return (done.code, done.out, done.err)


@RIG_SETTINGS
@given(ops=OPS, poison=st.lists(st.tuples(st.integers(1, 6), TASK_POISON), max_size=2))
def test_task_list_prints_the_same_through_both_paths(
    tmp_path_factory: pytest.TempPathFactory,
    clock: FakeClock,
    rig_cli: Any,
    ops: list[tuple[str, Any, Any]],
    poison: list[tuple[int, tuple[str, Any]]],
) -> None:
    import sqlite3

    with fresh(tmp_path_factory, clock) as rig:
        for op in [("add", 5, 0), *ops]:
            apply(rig, op)
        edit = sqlite3.connect(rig.config.db_path, isolation_level=None)
        edit.execute("PRAGMA ignore_check_constraints = ON")
        for task_id, (column, value) in poison:
            edit.execute(f"UPDATE tasks SET {column} = ? WHERE id = ?", (value, task_id))
        edit.close()
        for args in (("task", "list"), ("task", "list", "--status", "pending", "--limit", "2")):
            cache_file(rig.config.paths.state_dir).unlink(missing_ok=True)
            full = outcome_of(rig_cli, rig, *args)
            view(rig)
            assert outcome_of(rig_cli, rig, *args) == full


# --- task show: the same page, poisoned rows included ----------------------------------------------

ATTEMPT_POISON = st.sampled_from(
    [
        ("exit_status", "weird"),
        ("started_at", "garbage"),
        ("ended_at", "2026-13-01T00:00:00Z"),
        ("attempt_number", "1"),
        ("pid", 1.5),
        ("model", 7),
        ("evidence_pruned_at", "2026-11-20T10:00:00Z"),
        ("termination_reason", "the operator's \x1b[31mred\x1b[0m words"),
        ("diagnostics", '{"n": 1e999}'),
        ("input_tokens", -3),
    ]
)
SHOW_EDITS = st.one_of(
    st.tuples(st.just("tasks"), TASK_POISON),
    st.tuples(st.just("tasks"), st.tuples(st.just("parent_task_id"), st.integers(1, 7))),
    st.tuples(st.just("task_attempts"), ATTEMPT_POISON),
    st.tuples(st.just("events"), POISON),
)
WHERE = {"tasks": "id", "task_attempts": "rowid", "events": "sequence"}


@settings(RIG_SETTINGS, max_examples=examples(100))
@given(ops=OPS, edits=st.lists(st.tuples(st.integers(1, 6), SHOW_EDITS), max_size=3), shown=st.integers(1, 4))
def test_task_show_prints_the_same_through_both_paths(
    tmp_path_factory: pytest.TempPathFactory,
    clock: FakeClock,
    rig_cli: Any,
    monkeypatch: pytest.MonkeyPatch,
    ops: list[tuple[str, Any, Any]],
    edits: list[tuple[int, tuple[str, tuple[str, Any]]]],
    shown: int,
) -> None:
    """A task with attempts, events, approvals and delegation parents (some of them cycles or missing),
    any row poisoned: the page read by the view is the page read by a full load."""
    import sqlite3

    monkeypatch.setattr("agentd.cli.queue.SystemClock", lambda: clock)  # the page's "ago", the same twice
    with fresh(tmp_path_factory, clock) as rig:
        for op in [("add", 5, 0), ("claim", 0, 0), ("held", 3, 0), *ops]:
            apply(rig, op)
        edit = sqlite3.connect(rig.config.db_path, isolation_level=None)
        edit.execute("PRAGMA ignore_check_constraints = ON")
        edit.execute("PRAGMA foreign_keys = OFF")
        for row, (table, (column, value)) in edits:
            edit.execute(f"UPDATE {table} SET {column} = ? WHERE {WHERE[table]} = ?", (value, row))
        edit.close()
        args = ("task", "show", str(shown))
        cache_file(rig.config.paths.state_dir).unlink(missing_ok=True)
        full = outcome_of(rig_cli, rig, *args)
        view(rig)
        assert outcome_of(rig_cli, rig, *args) == full


def test_a_temporary_file_left_by_a_dead_writer_does_not_stop_the_view(rig: Rig) -> None:
    state = rig.config.paths.state_dir
    (state / f".config-cache.json.{os.getpid()}").write_text("half a view")
    cache_file(state).unlink(missing_ok=True)
    assert read_view(rig.config.path) is None
    write_view(rig.config)
    assert read_view(rig.config.path) is not None


def test_a_full_load_rewrites_the_view_only_when_its_key_changed(rig: Rig) -> None:
    """A service's restart (or any full load) on an unchanged config leaves the view file as it is: the
    key covers everything the view is made from. A changed config gets a new one."""
    write_view(rig.config)
    path = cache_file(rig.config.paths.state_dir)
    before = path.stat()
    write_view(rig.config)
    assert path.stat().st_ino == before.st_ino  # not replaced: os.replace would give a new inode
    from agentd.work.validation import load_config

    rig.config.path.write_text(rig.config.path.read_text() + "\n# edited\n")
    write_view(load_config(rig.config.path))
    assert path.stat().st_ino != before.st_ino
    assert read_view(rig.config.path) is not None
