"""Honest operations: every number and word agentd shows an operator is true or says it does not know.

One test (or more) per finding of the issue, each failing on the code before it."""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rig import Rig
from support import EXAMPLE_CONFIG, REPO, CliResult, run_main, waiting

from agentd.attempt.prepare import plan_attempt
from agentd.cli import UtcFormatter, main
from agentd.clock import SystemClock, parse_ts
from agentd.outlook.metrics import DispatchMetrics
from agentd.outlook.status import snapshot
from agentd.process import procs
from agentd.services.dispatch import Dispatcher


def samples(metrics: DispatchMetrics, name: str) -> list[tuple[dict[str, str], float]]:
    text = generate_latest(metrics.registry).decode()
    return [(s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


# --- 1. failed attempts counted by their outcome ------------------------------------------------


@pytest.mark.asyncio
async def test_an_attempt_that_reports_failure_counts_as_that_outcome_not_ok(rig: Rig) -> None:
    metrics = DispatchMetrics("demo", rig.config.db_path, rig.clock)
    dispatcher = Dispatcher(
        rig.config, rig.db, clock=rig.clock, rng=random.Random(1), metrics=metrics, adapters=rig_adapters()
    )
    rig.add("flaky")  # exits 0, reports retryable_failure
    rig.add("example")
    await dispatcher.start()
    assert await dispatcher.run_until_idle() == 2
    counted = {
        (labels["adapter"], labels["outcome"], labels["exit_status"]): value
        for labels, value in samples(metrics, "agentd_attempts_total")
    }
    assert counted == {("fails", "retryable_failure", "ok"): 1.0, ("script", "completed", "ok"): 1.0}
    text = generate_latest(metrics.registry).decode()
    created = [line for line in text.splitlines() if line.split(" ")[0].split("{")[0].endswith("_created")]
    assert created == [], "prometheus-client's _created series are disabled"
    metrics.close()


def rig_adapters() -> Any:
    from inprocess import in_process

    return in_process


# --- 2. status and the liveness gauges tell the truth ---------------------------------------------


def report(rig: Rig, service: str, identity: procs.ProcessIdentity, status: str, ago_s: float = 0.0) -> None:
    at = rig.clock.now() - timedelta(seconds=ago_s)
    rig.store.report_service_status(service, identity, status, None, at, at)


def services(rig: Rig) -> dict[str, str]:
    shown = snapshot(rig.config, rig.store, rig.clock.now())
    return {s["service"]: s["liveness"] for s in shown["services"]}


def test_a_service_is_live_only_while_its_own_process_runs_and_reports(rig: Rig) -> None:
    me = procs.this_process()
    report(rig, "dispatch", me, "idle")
    assert services(rig) == {"dispatch": "live"}
    report(rig, "dispatch", me, "idle", ago_s=60)
    assert services(rig) == {"dispatch": "stale"}
    gone = procs.ProcessIdentity(me.pid, me.started + 1, me.host, me.boot_id)  # the pid reused by another process
    report(rig, "dispatch", gone, "running task 1")
    assert services(rig) == {"dispatch": "down"}
    report(rig, "dispatch", procs.ProcessIdentity(me.pid, me.started, me.host, "an-earlier-boot"), "idle")
    assert services(rig) == {"dispatch": "down"}
    report(rig, "dispatch", me, "stopped")
    assert services(rig) == {"dispatch": "stopped"}
    report(rig, "sensors", procs.ProcessIdentity(1, 1, "another-host", "b"), "idle")
    assert services(rig)["sensors"] == "unknown", "a row from another host is not called live"


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_a_killed_dispatcher_is_down_at_once_in_status(rig: Rig, cli_for: Any) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        identity = procs.ProcessIdentity(
            child.pid, procs.start_ticks(child.pid) or 0, procs.this_process().host, procs.boot_id()
        )
        report(rig, "dispatch", identity, "running task 7")
        assert services(rig) == {"dispatch": "live"}
    finally:
        child.kill()
        child.wait()
    assert services(rig) == {"dispatch": "down"}
    shown = cli_for(rig)("status")
    assert "dispatch pid" in shown.out and "DOWN: its process is gone" in shown.out
    assert "live" not in shown.out


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_a_service_whose_process_proc_hides_is_live_while_it_runs(
    rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console's unit mounts /proc with hidepid (ProtectProc=invisible) and holds no capability, so the
    dispatcher and sensors (which hold two) are not in its /proc: it read them as down, always. A process
    /proc does not show still answers a null signal: live while it runs, down once it is gone."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    identity = procs.ProcessIdentity(
        child.pid, procs.start_ticks(child.pid) or 0, procs.this_process().host, procs.boot_id()
    )
    hidden = tmp_path / "proc"  # a /proc that shows no process, only the boot id
    (hidden / "sys/kernel/random").mkdir(parents=True)
    (hidden / "sys/kernel/random/boot_id").write_text(procs.boot_id() + "\n")
    monkeypatch.setattr(procs, "PROC", hidden)
    try:
        report(rig, "dispatch", identity, "idle")
        assert services(rig) == {"dispatch": "live"}
        report(rig, "dispatch", identity, "idle", ago_s=60)
        assert services(rig) == {"dispatch": "stale"}, "an unseen process is judged by its row's age too"
    finally:
        child.kill()
        child.wait()
    report(rig, "dispatch", identity, "idle")
    assert services(rig) == {"dispatch": "down"}


def test_status_shows_the_running_task_from_its_attempt_the_moment_it_is_claimed(rig: Rig) -> None:
    task = rig.add("example")
    plan = functools.partial(plan_attempt, rig.config)
    claim = rig.store.claim_next_task(rig.clock.now(), "holder", plan, rig.config.paths.state_dir / "attempts")
    assert claim is not None
    rig.clock.advance(42)
    shown = snapshot(rig.config, rig.store, rig.clock.now())
    [running] = shown["running"]
    assert running["task_id"] == task.task_id and running["adapter_id"] == "script"
    assert running["elapsed_s"] == 42.0
    assert shown["waiting"]["claimable"] == 0


def test_waiting_is_split_into_claimable_retry_waiting_and_delayed(rig: Rig) -> None:
    now = rig.clock.now()
    rig.add("example")  # claimable
    rig.add("example", schedule={"delay_minutes": 10})  # delayed
    retry = rig.add("example")
    rig.store._conn.execute(
        "UPDATE tasks SET status = 'retryable_failure', available_at = ? WHERE id = ?",
        ((now + timedelta(minutes=5)).isoformat().replace("+00:00", "Z"), retry.task_id),
    )
    due_retry = rig.add("example")
    rig.store._conn.execute("UPDATE tasks SET status = 'retryable_failure' WHERE id = ?", (due_retry.task_id,))
    rig.clock.advance(20)
    shown = snapshot(rig.config, rig.store, rig.clock.now())
    assert shown["waiting"] == waiting(claimable=2, retry_waiting=1, delayed=1)
    assert shown["oldest_pending_age_s"] == 20.0


@pytest.fixture
def cli_for(capsys: pytest.CaptureFixture[str]) -> Any:
    def make(rig: Rig) -> Any:
        def run(*args: str) -> CliResult:
            return run_main(capsys, rig.config.path, *args)

        return run

    return make


# --- 3. ports: one-shot runs serve no metrics; a listen address is checked -----------------------


@pytest.fixture
def held_ports() -> Iterator[tuple[int, int]]:
    """Two loopback ports held by someone else (as the agent's own running services would)."""
    with socket.socket() as one, socket.socket() as two:
        for taken in (one, two):
            taken.bind(("127.0.0.1", 0))
            taken.listen()
        yield one.getsockname()[1], two.getsockname()[1]


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_one_shot_runs_do_not_serve_metrics_unless_asked(
    cli: Any, held_ports: tuple[int, int], monkeypatch: Any
) -> None:
    assert cli("init").code == 0
    dispatch_port, sensors_port = held_ports
    monkeypatch.setenv("AGENTD_METRICS__DISPATCH_LISTEN", f"127.0.0.1:{dispatch_port}")
    monkeypatch.setenv("AGENTD_METRICS__SENSORS_LISTEN", f"127.0.0.1:{sensors_port}")
    assert cli("dispatch", "--until-idle").code == 0, "the agent's service holds the port: a one-shot run still works"
    assert cli("sensors", "--once").code == 0
    asked = cli("dispatch", "--until-idle", "--metrics")
    assert asked.code == 2 and f"port {dispatch_port} is in use (127.0.0.1:{dispatch_port}" in asked.err


@pytest.mark.parametrize(
    "value",
    # "²" is a digit to str.isdigit() but not to int() (was int()'s own message); "١٢٣" was port 123.
    ["nonsense", "127.0.0.1", "127.0.0.1:70000", "::1:9478", "a b:80", ":9478", "127.0.0.1:\u00b2", "127.0.0.1:\u0661"],
)
def test_a_listen_address_that_cannot_work_is_refused_by_config_check(cli: Any, monkeypatch: Any, value: str) -> None:
    monkeypatch.setenv("AGENTD_METRICS__DISPATCH_LISTEN", value)
    result = cli("config", "check")
    assert result.code == 2
    assert "AGENTD_METRICS__DISPATCH_LISTEN: metrics.dispatch_listen: expected" in result.err, result.err
    assert "invalid literal" not in result.err


BEYOND_LOOPBACK = ["0.0.0.0:9578", "[::]:9578", "10.1.2.3:9578", "[::ffff:0.0.0.0]:9578", "box.lan:9578"]
LOOPBACK = ["127.0.0.1:9578", "127.8.9.10:0", "[::1]:9578", "[::ffff:127.0.0.1]:9578", "localhost:9"]


@pytest.mark.parametrize("listen", BEYOND_LOOPBACK)
def test_the_console_beyond_loopback_is_refused_unless_the_operator_says_so(
    cli: Any, monkeypatch: Any, listen: str
) -> None:
    """Plain HTTP with bearer tokens and session cookies: beyond loopback they would cross the network in clear."""
    monkeypatch.setenv("AGENTD_WEB__LISTEN", listen)
    refused = cli("config", "check")
    assert refused.code == 2 and f"web.listen: {listen} is not a loopback address" in refused.err, refused.err
    assert "[web] beyond_loopback = true" in refused.err
    monkeypatch.setenv("AGENTD_WEB__BEYOND_LOOPBACK", "true")
    assert cli("config", "check").code == 0


@pytest.mark.parametrize("listen", LOOPBACK)
def test_the_console_on_loopback_needs_no_word(cli: Any, monkeypatch: Any, listen: str) -> None:
    monkeypatch.setenv("AGENTD_WEB__LISTEN", listen)
    assert cli("config", "check").code == 0


def test_agentd_web_holds_its_listen_flag_to_loopback_too() -> None:
    """`agentd web --listen` bypasses the config's value, not its rule; nothing is bound."""
    from agentd.errors import InputError
    from agentd.web.service import bind

    with pytest.raises(InputError, match=r"web.listen: 0.0.0.0:0 is not a loopback address"):
        bind("0.0.0.0:0")
    bind("127.0.0.1:0").close()


def test_the_two_services_cannot_share_a_port(cli: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("AGENTD_METRICS__DISPATCH_LISTEN", "127.0.0.1:9600")
    monkeypatch.setenv("AGENTD_METRICS__SENSORS_LISTEN", "127.0.0.1:9600")
    result = cli("config", "check")
    assert result.code == 2 and "give each its own port" in result.err


# --- 4. which agent: --agent, --config and $AGENTD_CONFIG never silently override each other ------


@pytest.mark.parametrize(
    ("env", "flags", "named"),
    [
        (True, ["--agent", "web"], ("$AGENTD_CONFIG", "--agent web")),
        (False, ["--agent", "web", "--config", "OTHER"], ("--config", "--agent web")),
        (True, ["--config", "OTHER"], ("--config", "$AGENTD_CONFIG")),
    ],
)
def test_two_ways_of_naming_the_agent_that_disagree_are_an_error_naming_both(
    state_dir: Path, tmp_path: Path, monkeypatch: Any, capsys: Any, env: bool, flags: list[str], named: tuple[str, str]
) -> None:
    other = tmp_path / "other.toml"
    other.write_text(EXAMPLE_CONFIG.read_text())
    if env:
        monkeypatch.setenv("AGENTD_CONFIG", str(EXAMPLE_CONFIG))
    code = main([*(str(other) if f == "OTHER" else f for f in flags), "task", "list"])
    err = capsys.readouterr().err
    assert code == 2
    assert named[0] in err and named[1] in err and "give only one" in err


def test_the_same_file_named_twice_is_fine(cli: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("AGENTD_CONFIG", str(EXAMPLE_CONFIG.parent / ".." / "config" / EXAMPLE_CONFIG.name))
    assert cli("config", "check").code == 0


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("AGENTD_BOGUS__X", "no [bogus] table can be set from the environment"),
        ("AGENTD_DISPATCH__GRAC_S", "[dispatch] has no key 'grac_s'"),
        ("AGENTD_ADAPTERS__TIMEOUT_MS", "no [adapters] table can be set from the environment"),
    ],
)
def test_an_environment_override_that_names_nothing_is_refused_and_blamed(
    cli: Any, monkeypatch: Any, name: str, expected: str
) -> None:
    monkeypatch.setenv(name, "5")
    result = cli("config", "check")
    assert result.code == 2
    assert result.err.startswith(name + ": ") or f"\n{name}: " in result.err, result.err
    assert expected in result.err


# --- 5. events: --follow from now, --since, --type, --last; no events for a missing task ----------


def test_events_filters_and_header(cli: Any) -> None:
    assert cli("init").code == 0
    for subject in ("a", "b", "c"):
        assert cli("task", "add", "--type", "example", "--subject", subject).code == 0
    typed = cli("events", "--type", "task_enqueued")
    lines = typed.out.splitlines()
    assert lines[0].split() == ["SEQ", "TIME", "TYPE", "DETAIL"]
    assert len(lines) == 4 and all("task_enqueued" in line for line in lines[1:])
    last = cli("events", "--last", "2", "--json").json_lines()
    everything = cli("events", "--json").json_lines()
    assert [e["sequence"] for e in last] == [e["sequence"] for e in everything[-2:]]
    assert cli("events", "--since", "1h", "--json").json_lines() == everything
    assert cli("events", "--since", "2999-01-01", "--json").json_lines() == []
    bad = cli("events", "--since", "yesterday")
    assert bad.code == 2 and "expected a UTC time like" in bad.err


def test_events_of_a_task_that_does_not_exist_is_an_error(cli: Any) -> None:
    assert cli("init").code == 0
    result = cli("events", "--task", "99999")
    assert result.code == 2 and "task 99999 does not exist" in result.err


@pytest.mark.process
def test_events_follow_starts_at_the_end(cli: Any, state_dir: Path) -> None:
    assert cli("init").code == 0
    assert cli("task", "add", "--type", "example", "--subject", "old").code == 0
    command = [sys.executable, "-m", "agentd", "--config", str(EXAMPLE_CONFIG), "events", "--follow", "--json"]
    follower = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert follower.stdout is not None
        _wait_for_follower(follower)
        assert cli("task", "add", "--type", "example", "--subject", "new").code == 0
        first = json.loads(follower.stdout.readline())
        assert first["type"] == "task_enqueued" and first["payload"].get("task_type") == "example"
        assert first["task_id"] == 2, "the follower starts after what was already there"
    finally:
        follower.kill()
        follower.wait()
        if follower.stdout is not None:
            follower.stdout.close()


def _wait_for_follower(follower: subprocess.Popen[str]) -> None:
    """The follower has fixed where it starts once it sleeps between polls: it has read the log's
    end and found nothing new (its first sleep comes only after that read)."""
    from support import wait_until

    def polling() -> bool:
        try:
            return Path(f"/proc/{follower.pid}/wchan").read_text().endswith("nanosleep")
        except OSError:
            return False

    wait_until(polling, 20, "the follower to poll the event log")


# --- 7. readability ------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_task_show_reads_as_text(rig: Rig, cli_for: Any) -> None:
    failing = rig.add("flaky", payload={"note": "x" * 400, "flag": True})
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.run_until_idle()
    shown = cli_for(rig)("task", "show", str(failing.task_id))
    assert shown.code == 0, shown.err
    out = shown.out
    [attempt] = rig.store.attempts_of(failing.task_id)
    assert attempt.evidence_dir and attempt.evidence_dir in out, "the evidence path is shown"
    assert "retryable_failure" in out.split("attempts\n", 1)[1].splitlines()[1], "the attempt's outcome, not EXIT ok"
    for python in ("None", "True", "False", "{'"):
        assert python not in out, f"a Python value {python!r} in {out}"
    assert '"flag": true' in out
    assert "chars)" in out or "x" * 400 in out, "a long value is cut with a marker or not at all"
    assert "outcome  retryable_failure (needs_retry)" in out


def test_a_long_event_detail_is_cut_with_a_marker() -> None:
    from agentd.cli.observe import DETAIL_CHARS, detail

    text = detail({"summary": "y" * 500, "model": None, "enabled": True})
    assert text.startswith("summary=yyy") and text.endswith(" chars)") and "…" in text
    assert len(text) < DETAIL_CHARS + 30
    assert detail({"model": None, "enabled": True}) == "model=null enabled=true"


def test_log_lines_are_utc_with_a_z() -> None:
    record = logging.LogRecord("agentd", logging.INFO, __file__, 1, "hello", None, None)
    record.created, record.msecs = 1_700_000_000.25, 250.0
    line = UtcFormatter("%(asctime)s %(message)s").format(record)
    assert line == "2023-11-14T22:13:20.250Z hello"


def test_a_log_message_is_one_line_whatever_it_quotes() -> None:
    """Text from outside (a receiver's answer, a request's path) went into the log as it was: a newline in
    it wrote a line of its own, which journald and every log reader take for agentd's."""
    forged = "\n2026-11-26T09:00:00.000Z ERROR agentd.services.dispatch: all tasks deleted\x1b[2J"
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("agentd", logging.ERROR, __file__, 1, "said: %s", (forged,), sys.exc_info())
    line = UtcFormatter("%(levelname)s %(name)s: %(message)s").format(record)
    first, *traceback = line.split("\n")
    assert (
        first
        == "ERROR agentd: said: \\x0a2026-11-26T09:00:00.000Z ERROR agentd.services.dispatch: all tasks deleted\\x1b[2J"
    )
    assert traceback[0] == "Traceback (most recent call last):" and traceback[-1] == "ValueError: boom"


def test_delay_and_every_take_durations_with_units(cli: Any) -> None:
    assert cli("init").code == 0
    added = cli("task", "add", "--type", "example", "--delay", "90s", "--json").json()
    assert (parse_ts(added["available_at"]) - parse_ts(added["created_at"])).total_seconds() == pytest.approx(90, abs=1)
    bare = cli("task", "add", "--type", "example", "--delay", "2", "--json").json()  # a bare number: minutes, as before
    assert (parse_ts(bare["available_at"]) - parse_ts(bare["created_at"])).total_seconds() == pytest.approx(120, abs=1)
    scheduled = cli("schedule", "add", "nightly", "--every", "1d", "--type", "example", "--json").json()
    assert scheduled["interval_seconds"] == 86400
    assert (
        cli("schedule", "add", "often", "--every", "90", "--type", "example", "--json").json()["interval_seconds"] == 90
    )
    refused = cli("task", "add", "--type", "example", "--delay", "soon")
    assert refused.code == 2 and "expected a duration like 90s, 15m, 2h or 7d, found 'soon'" in refused.err


def test_task_add_and_schedule_add_refuse_in_the_same_words(cli: Any) -> None:
    assert cli("init").code == 0
    task = cli("task", "add", "--type", "example", "--priority", "0")
    schedule = cli("schedule", "add", "x", "--every", "1h", "--type", "example", "--priority", "0")
    assert task.code == schedule.code == 2
    assert task.err == schedule.err == "agentd: --priority: expected 1 (most urgent) to 10 (least urgent), found 0\n"


@pytest.mark.asyncio
@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
async def test_stopping_during_an_attempt_says_which_task_it_waits_for(rig: Rig, caplog: Any) -> None:
    import anyio

    dispatcher = rig.dispatcher(processes=True)
    task = rig.add("scripted", payload={"sleep_s": 30})
    lines: list[str] = []
    dispatcher.shell.notifier.stopping = lines.append  # type: ignore[method-assign]
    await dispatcher.start()
    async with anyio.create_task_group() as group:
        group.start_soon(dispatcher.run_until_idle)
        with anyio.fail_after(20):
            while dispatcher.attempts.describe() is None:  # noqa: ASYNC110 (the attempt has no event to wait on)
                await anyio.sleep(0.05)
        with caplog.at_level(logging.INFO, logger="agentd.services.dispatch"):
            dispatcher.request_stop()
        dispatcher.request_stop(immediately=True)
    assert f"waiting up to 30s for running task {task.task_id}" in lines[0]
    assert "a second SIGTERM or Ctrl-C stops it at once" in lines[0]
    assert lines[0] in caplog.text
    assert lines[1].startswith(f"stopping at once: ending running task {task.task_id}")


# --- 8. accepted but wrong -----------------------------------------------------------------------


def test_retry_with_zero_attempts_is_refused(cli: Any) -> None:
    assert cli("init").code == 0
    assert cli("task", "add", "--type", "example").code == 0
    assert cli("task", "cancel", "1").code == 0
    result = cli("task", "retry", "1", "--attempts", "0")
    assert result.code == 2 and "expected 1 to 100 attempts, found '0'" in result.err
    assert cli("task", "show", "1", "--json").json()["task"]["status"] == "operator_canceled"


def test_workflow_start_checks_its_context_against_the_first_step(rig_factory: Any, cli_for: Any) -> None:
    def strict_plan(raw: dict[str, Any]) -> None:
        for spec in raw["task_types"]:
            if spec["task_type"] == "plan":
                spec["payload_schema_id"] = "example.payload/v1"

    rig = rig_factory(strict_plan)
    cli = cli_for(rig)
    refused = cli("workflow", "start", "goal-loop", "m1", "--context", '{"unknown": 1}')
    assert refused.code == 2 and "--context: the plan step could not take it" in refused.err, refused.err
    assert rig.store.list_workflows() == []


def test_a_refused_duplicate_workflow_start_does_not_use_up_an_id(rig: Rig, cli_for: Any) -> None:
    cli = cli_for(rig)
    assert cli("workflow", "start", "goal-loop", "m1").code == 0
    assert cli("workflow", "start", "goal-loop", "m1").code == 2
    assert cli("workflow", "start", "goal-loop", "m2", "--json").json()["workflow_id"] == 2


def test_a_schedule_id_that_is_not_an_identifier_is_refused(cli: Any) -> None:
    assert cli("init").code == 0
    result = cli("schedule", "add", "bad id!", "--every", "1h", "--type", "example")
    assert result.code == 2 and "ID: expected letters, digits" in result.err
    assert cli("schedule", "list", "--json").json() == []


def test_a_negative_limit_is_refused(cli: Any) -> None:
    assert cli("init").code == 0
    result = cli("task", "list", "--limit", "-1")
    assert result.code == 2 and "--limit" in result.err


def test_a_one_shot_dispatch_before_init_creates_nothing(cli: Any, state_dir: Path) -> None:
    result = cli("dispatch", "--until-idle")
    assert result.code != 0 and "run `agentd init`" in result.err
    assert not state_dir.exists() and not (state_dir.parent / "workspace").exists()


# --- 9. start-up: the everyday commands do not import the services -------------------------------


@pytest.mark.process
@pytest.mark.parametrize("command", [["status"], ["task", "add", "--type", "example"], ["task", "list"]])
def test_everyday_commands_do_not_import_the_services(cli: Any, command: list[str]) -> None:
    assert cli("init").code == 0
    probe = (
        "import sys, contextlib, io\n"
        "from agentd.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main(['--config', {str(EXAMPLE_CONFIG)!r}, *{command!r}])\n"
        "print(code, sorted(m for m in sys.modules if m.split('.')[0] in "
        "('httpx', 'prometheus_client', 'sdnotify', 'jsonschema_rs') or m.startswith(('agentd.adapters', "
        "'agentd.services.dispatch', 'agentd.outlook.metrics', 'agentd.services.sensing', 'agentd.attempt.run'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=os.environ.copy(), cwd=REPO, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0 []", out.stdout


def test_status_json_names_liveness_and_waiting(rig: Rig, cli_for: Any) -> None:
    now = SystemClock().now()  # the command reads the real clock
    rig.store.report_service_status("dispatch", procs.this_process(), "idle", None, now, now)
    shown = cli_for(rig)("status", "--json").json()
    assert shown["services"][0]["liveness"] == "live"
    assert set(shown["waiting"]) == {
        "claimable",
        "retry_waiting",
        "delayed",
        "approval",
        "paused",
        "after",
        "budget",
        "resting",
    }
    assert shown["running"] == []
