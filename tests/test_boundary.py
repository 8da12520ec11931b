"""The agent cannot act as its operator (docs/install-and-deploy.md, "The boundary"): tried from inside a real attempt,
running as its own user under a service that runs as another, as the units run them."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from typing import Any

import privsep
import pytest
from support import ran_ok, wait_until


def hostile_payload(agent: privsep.PrivAgent, **more: Any) -> str:
    files = {"env_file": str(agent.env_file), "sensor_home": str(agent.sensor_home)}
    return json.dumps({"report": "hostile-report.json", **files, **more})


@pytest.mark.deep
@pytest.mark.process
def test_an_attempt_that_tries_to_act_as_its_operator_fails_at_every_try() -> None:
    with privsep.initialised_agent() as agent:
        held = json.loads(ran_ok(agent.as_operator("task", "add", "--type", "example", "--require-approval", "--json")))
        payload = hostile_payload(agent, approve=held["task_id"])
        ran_ok(agent.as_operator("task", "add", "--type", "hostile", "--payload", payload))
        ran = agent.as_service("dispatch", "--until-idle")
        assert ran.returncode == 0, ran.stderr
        assert f"attempts run as {agent.run}" in ran.stderr

        tries = json.loads((agent.workspace / "hostile-report.json").read_text())
        assert len(tries) >= 18
        succeeded = [t for t in tries if t["succeeded"]]
        assert succeeded == [], json.dumps(tries, indent=1)
        [processes] = [t for t in tries if t["name"].startswith("reach another user's process")]
        assert processes["detail"].startswith("PermissionError: none of "), processes  # it found some to try

        approvals = json.loads(ran_ok(agent.as_operator("approvals", "--json")))
        assert [a["task_id"] for a in approvals] == [held["task_id"]]  # still held
        tasks = json.loads(ran_ok(agent.as_operator("task", "list", "--json")))
        assert not any(t["source"] == "operator:x" for t in tasks)
        events = [json.loads(line) for line in ran_ok(agent.as_operator("events", "--json")).splitlines()]
        assert not {"dispatch_paused", "dispatch_resumed", "approval_resolved"} & {e["type"] for e in events}
        hostile = next(t for t in tasks if t["task_type"] == "hostile")
        assert hostile["status"] == "completed"
        verified = agent.as_operator("evidence", "verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.deep
@pytest.mark.process
def test_a_stubborn_attempt_and_its_daemon_are_stopped_without_a_kill_capability() -> None:
    """The service holds no CAP_KILL: the run user's own `kill` stops the group at the timeout, and the
    attempt's cgroup ends the setsid daemon it left."""
    with privsep.initialised_agent() as agent:
        payload = json.dumps({"stubborn": True, "daemon": "daemon.pid", "sleep_s": 600})
        ran_ok(agent.as_operator("task", "add", "--type", "scripted", "--payload", payload))
        ran = agent.as_service("dispatch", "--until-idle")
        assert ran.returncode == 0, ran.stderr
        [task] = json.loads(ran_ok(agent.as_operator("task", "list", "--json")))
        assert task["status"] == "retryable_failure" and "timed out" in (task["last_error"] or "")
        assert agent.processes_of(agent.run) == []  # the group, the stubborn grandchild and the daemon


@pytest.mark.deep
@pytest.mark.process
@pytest.mark.parametrize("mode", ["700", "2777", "2770"], ids=["closed to the services", "open to all", "setgid"])
def test_an_attempt_that_changes_its_workspaces_mode_stops_no_service_and_no_later_attempt(mode: str) -> None:
    """The workspace is the run user's, so only it may change its mode: an attempt's `chmod 700
    $AGENTD_WORKSPACE` made every service fail at its next start (the service's own chmod refused), and
    left every later attempt's files unreadable to the services. Now the mode is put back by a process of
    the run user, at each start and before each attempt."""
    with privsep.initialised_agent() as agent:
        done = {"status": "completed", "machine_status": "ok", "operator_summary": "done", "artifact_paths": ["a.txt"]}
        first = json.dumps({"files": {"a.txt": "first"}, "outcome": done, "chmod_workspace": mode})
        ran_ok(agent.as_operator("task", "add", "--type", "scripted", "--payload", first))
        second = json.dumps({"files": {"a.txt": "second"}, "outcome": done})
        ran_ok(agent.as_operator("task", "add", "--type", "scripted", "--priority", "9", "--payload", second))
        ran = agent.as_service("dispatch", "--until-idle")
        assert ran.returncode == 0, ran.stderr
        tasks = {t["task_id"]: t for t in json.loads(ran_ok(agent.as_operator("task", "list", "--json")))}
        first_ends = "retryable_failure" if mode == "700" else "completed"  # it hid its own artifact from agentd
        assert [tasks[n]["status"] for n in (1, 2)] == [first_ends, "completed"], tasks
        assert agent.workspace.stat().st_mode & 0o7777 == 0o770
        os.chmod(agent.workspace, int(mode, 8))  # as the last attempt of a run may leave it
        for service, once, delegated in (("dispatch", "--until-idle", True), ("sensors", "--once", False)):
            started = agent.as_service(service, once, delegated=delegated)
            assert started.returncode == 0, (service, started.stderr)
            assert agent.workspace.stat().st_mode & 0o7777 == 0o770, service
            os.chmod(agent.workspace, int(mode, 8))


@pytest.mark.process
def test_a_planted_link_in_the_result_is_refused_and_never_followed() -> None:
    with privsep.initialised_agent() as agent:
        secret = agent.state_dir / "agentd.db"
        payload = json.dumps({"result_symlink": str(secret)})
        ran_ok(agent.as_operator("task", "add", "--type", "scripted", "--payload", payload))
        assert agent.as_service("dispatch", "--until-idle").returncode == 0
        shown = json.loads(ran_ok(agent.as_operator("task", "show", "1", "--json")))
        attempt = shown["attempts"][0]
        assert "symbolic link" in attempt["diagnostics"]["outcome_problem"], attempt["diagnostics"]
        evidence = agent.state_dir / "attempts" / "1" / attempt["attempt_id"]
        assert not (evidence / "result.json").exists()  # nothing of the database was copied in


@pytest.mark.deep
@pytest.mark.process
def test_two_agents_on_one_vm_share_no_writable_path() -> None:
    privsep.require()
    with privsep.priv_agent() as beta, privsep.priv_agent() as alpha:
        ran_ok(beta.as_service("init"))
        ran_ok(alpha.as_service("init"))
        payload = hostile_payload(alpha, other_workspace=str(beta.workspace))
        ran_ok(alpha.as_operator("task", "add", "--type", "hostile", "--payload", payload))
        assert alpha.as_service("dispatch", "--until-idle").returncode == 0
        tries = json.loads((alpha.workspace / "hostile-report.json").read_text())
        [planted] = [t for t in tries if t["name"] == "write another agent's workspace"]
        assert not planted["succeeded"] and not (beta.workspace / "planted").exists()


SENSOR = """#!/usr/bin/env python3
import json, os, subprocess, sys
daemon = (  # the first process returns only once the daemon has written its pid (no race with the test)
    "import os, time\\nr, w = os.pipe()\\nif os.fork():\\n    os.close(w); os.read(r, 1); os._exit(0)\\n"
    "os.setsid()\\nopen(os.environ['HOME'] + '/daemon.pid', 'w').write(str(os.getpid()))\\n"
    "os.write(w, b'x')\\ntime.sleep(600)"
)
subprocess.run([sys.executable, "-c", daemon], check=True)  # leaves the group; keeps the run's marker
print(json.dumps({"event_id": "e1", "observed_at": "2026-11-25T00:00:00Z", "source_ref": "x",
                  "dedupe_key": "k1", "payload": {"whoami": os.getuid()}}))
"""


def add_sensor(agent: privsep.PrivAgent, sensor_id: str, script: str) -> None:
    folder = agent.sensors_dir / sensor_id
    folder.mkdir(mode=0o755)
    (folder / "sense.py").write_text(script)
    (folder / "sense.py").chmod(0o755)
    manifest = f'description = "{sensor_id}"\ninterval_seconds = 60\ncommand = ["./sense.py"]\n'
    (folder / "sensor.toml").write_text(manifest)


def without_sensor_user(raw: dict[str, Any]) -> None:
    del raw["sensors"]["run_as"]  # a TOML an older `agentd install` wrote


@pytest.mark.deep
@pytest.mark.process
@pytest.mark.parametrize("own_user", [True, False], ids=["its own user", "the attempts' user (an older TOML)"])
def test_a_sensor_runs_as_its_user_and_what_it_leaves_is_ended_by_its_marker(own_user: bool) -> None:
    """The sensor service has neither CAP_KILL nor a delegated cgroup (as under its unit): a daemon a
    sensor leaves outside its process group is found by its marker and killed by the sensor's user."""
    privsep.require()
    with privsep.priv_agent(None if own_user else without_sensor_user) as agent:
        add_sensor(agent, "leaky", SENSOR)
        ran_ok(agent.as_service("init"))
        ran = agent.as_service("sensors", "--once", delegated=False)
        assert ran.returncode == 0, ran.stderr
        user = agent.sensors if own_user else agent.run
        said = f"sensors run as {agent.sensors} (uid" if own_user else "sensors run as that user too"
        assert said in ran.stderr, "the start line says who sensors run as"
        events = [json.loads(line) for line in ran_ok(agent.as_operator("events", "--json")).splitlines()]
        assert [e["type"] for e in events].count("sensor_event_recorded") == 1
        home = agent.sensor_home / "leaky" if own_user else agent.run_area / "runs" / "sensors" / "leaky"
        assert (home / "daemon.pid").stat().st_uid == agent.uid(user)  # the sensor ran as its user; its daemon started
        assert agent.processes_of(user) == []  # and is gone
        if own_user:
            assert home.stat().st_uid == agent.uid(agent.sensors) and home.stat().st_mode & 0o7777 == 0o700
            assert not (agent.run_area / "runs" / "sensors").exists(), "nothing of the sensor's where attempts reach"


WAITING_SENSOR = """#!/usr/bin/env python3
import json, os, time
home = os.environ["HOME"]
open(home + "/secret", "w").write("the sensor's own")
open(home + "/sensor.pid", "w").write(str(os.getpid()))
for _ in range(1200):  # until the test has tried to reach it (at most a minute)
    if os.path.exists(home + "/go"):
        break
    time.sleep(0.05)
print(json.dumps({"event_id": "e1", "observed_at": "2026-11-25T00:00:00Z", "source_ref": "x",
                  "dedupe_key": "k1", "payload": {}}))
"""

REACH = """
import json, os, sys
home, pid = sys.argv[1], int(sys.argv[2])
def tried(action):
    try:
        action()
    except PermissionError:
        return "refused"
    except OSError as exc:
        return f"failed: {exc}"
    return "done"
print(json.dumps({
    "read its files": tried(lambda: open(home + "/secret").read()),
    "list its folder": tried(lambda: os.listdir(home)),
    "plant a file": tried(lambda: open(home + "/planted", "w").write("x")),
    "read its environment": tried(lambda: open(f"/proc/{pid}/environ", "rb").read()),
    "open its memory": tried(lambda: open(f"/proc/{pid}/mem", "rb").close()),
    "signal it": tried(lambda: os.kill(pid, 0)),
}))
"""


@pytest.mark.deep
@pytest.mark.process
def test_an_attempts_user_cannot_reach_a_running_sensor_or_its_folder() -> None:
    """Sensors ran as the attempts' user, their folders under the run dir, group-writable: an attempt could
    rewrite a sensor's state, read its environment (its env_file's secrets) and write into its memory,
    and so make it report whatever it liked. Now each try is refused; the sensor's own user, the control,
    does each of them."""
    privsep.require()
    python = privsep.reachable_python()
    with privsep.priv_agent() as agent:
        add_sensor(agent, "watcher", WAITING_SENSOR)
        ran_ok(agent.as_service("init"))
        service = subprocess.Popen(agent.service_argv("sensors", "--once", delegated=False), env=agent.env())
        try:
            home = agent.sensor_home / "watcher"

            def started() -> str | None:
                assert service.poll() is None, "the sensor service ended before its sensor started"
                return (home / "sensor.pid").read_text() if (home / "sensor.pid").exists() else None

            pid = wait_until(started, 60, "the sensor's pid")

            def reach(name: str) -> dict[str, str]:
                entry = pwd.getpwnam(name)
                done = subprocess.run(
                    [str(python), "-c", REACH, str(home), pid],
                    user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], cwd="/",
                    capture_output=True, text=True, timeout=30, check=True,
                )  # fmt: skip
                return dict(json.loads(done.stdout))

            attempts = reach(agent.run)
            assert set(attempts.values()) == {"refused"}, attempts
            assert set(reach(agent.sensors).values()) == {"done"}, "the control: the sensor's own user may"
            (home / "go").touch()
            assert service.wait(timeout=60) == 0
        finally:
            if service.poll() is None:
                service.kill()
                service.wait()
        assert (home / "secret").read_text() == "the sensor's own"


@pytest.mark.deep
@pytest.mark.process
def test_status_names_the_sensor_user_and_says_when_its_home_would_let_an_attempt_in() -> None:
    with privsep.initialised_agent() as agent:
        sensors = agent.uid(agent.sensors)
        line = json.loads(ran_ok(agent.as_operator("status", "--json")))["boundary"]["line"]
        assert line.endswith(f"sensors run as {agent.sensors} (uid {sensors}), out of the attempts' reach"), line
        assert f"boundary: {line}\n" in ran_ok(agent.as_operator("config", "check")), "config check says it too"
        agent.sensor_home.chmod(0o770)
        line = json.loads(ran_ok(agent.as_operator("status", "--json")))["boundary"]["line"]
        assert f"; no sensor can start: sensors.run_as: {agent.sensors}'s home" in line, line
        assert "expected 0700" in line
        checked = json.loads(ran_ok(agent.as_operator("config", "check", "--json")))
        assert checked["ok"] and checked["boundary"]["line"] == line, "the config is fine; the machine is not"


@pytest.mark.deep
@pytest.mark.process
@pytest.mark.parametrize("loosened", ["group may enter", "a link", "the run user's"])
def test_the_sensor_service_refuses_to_start_when_the_sensor_home_is_not_the_sensor_users_alone(loosened: str) -> None:
    with privsep.initialised_agent() as agent:
        home = agent.sensor_home
        if loosened == "group may enter":
            home.chmod(0o750)
        elif loosened == "a link":
            home.rename(home.with_name("elsewhere"))
            home.symlink_to(home.with_name("elsewhere"))
        else:
            os.chown(home.parent, agent.uid(agent.run), -1)  # a folder above it that an attempt could change
        ran = agent.as_service("sensors", "--once", delegated=False)
        assert ran.returncode == 2, ran.stderr
        assert f"sensors.run_as: {agent.sensors}'s home {home}" in ran.stderr, ran.stderr
        assert agent.processes_of(agent.sensors) == []


@pytest.mark.deep
@pytest.mark.process
def test_a_replay_runs_as_the_attempt_ran_never_as_its_operator() -> None:
    """`agentd replay` ran the attempt's command again as whoever asked (root, or the services' user, who
    owns the database and the env files), with the attempt's own stdin: a task an attempt shaped could
    have its script run with the operator's rights. Now it runs as the run user, or not at all."""
    with privsep.initialised_agent() as agent:
        payload = json.dumps({"whoami": True, "outcome": {"status": "completed", "machine_status": "ok",
                                                         "operator_summary": "ran"}})  # fmt: skip
        ran_ok(agent.as_operator("task", "add", "--type", "scripted", "--payload", payload))
        assert agent.as_service("dispatch", "--until-idle").returncode == 0
        [task] = json.loads(ran_ok(agent.as_operator("task", "list", "--json")))
        shown = json.loads(ran_ok(agent.as_operator("task", "show", str(task["task_id"]), "--json")))
        attempt_id = shown["attempts"][0]["attempt_id"]
        for replayed in (
            agent.as_operator("replay", attempt_id, "--json"),
            agent.as_service("replay", attempt_id, "--json"),
        ):
            verdict = json.loads(ran_ok(replayed))
            assert verdict["verdict"] == "identical", verdict  # the same uid printed: the run user's
        assert agent.processes_of(agent.run) == []


@pytest.mark.deep
@pytest.mark.process
def test_a_skill_command_the_operator_runs_acts_with_the_run_users_rights_only() -> None:
    """`agentd skills run` ran the skill's command in the workspace as whoever typed it: the workspace is
    the run user's, so a link an attempt left where the command writes (the example skill's notes.md)
    turned the operator's `notes add` into a write wherever the link pointed."""
    with privsep.initialised_agent() as agent:
        operators = agent.base / "etc" / "operators-file"
        operators.write_text("the operator's\n")
        operators.chmod(0o644)
        planted = agent.workspace / "notes.md"
        planted.symlink_to(operators)  # what an attempt could leave
        followed = agent.as_operator("skills", "run", "example", "notes", "add", "from the workspace")
        assert followed.returncode != 0, followed.stdout
        assert operators.read_text() == "the operator's\n"
        planted.unlink()
        ran_ok(agent.as_operator("skills", "run", "example", "notes", "add", "hello"))
        assert planted.read_text() == "- hello\n" and planted.stat().st_uid == agent.uid(agent.run)


def _scripted_timeout(raw: dict[str, Any]) -> None:
    next(a for a in raw["adapters"] if a["adapter_id"] == "scripted")["timeout_ms"] = 60_000


@pytest.mark.deep
@pytest.mark.process
def test_a_sensor_cannot_reach_a_running_attempt_nor_forge_what_it_reports() -> None:
    """A sensor in the services' group rewrote a running attempt's prompt (the attempt read the injected
    text; bundle_compiled recorded the real bundle's hash) and replaced its result after it wrote an honest
    permanent_failure: the task ended completed, "FORGED by the sensor user", and evidence verify said clean.
    Now the sensor user shares no group with the attempts: every try is refused and the outcome stands."""
    privsep.require()
    with privsep.priv_agent(_scripted_timeout) as agent:
        folder = agent.sensors_dir / "hostile"
        folder.mkdir(mode=0o755)
        targets = agent.base / "targets.json"
        (folder / "sensor.toml").write_text(
            'description = "reaches for the attempts"\ninterval_seconds = 60\n'
            f'command = ["{privsep.REPO}/tests/adapters/hostile_sensor.py"]\n'
            f'env = {{ HOSTILE_TARGETS = "{targets}" }}\n'
        )
        ran_ok(agent.as_service("init"))
        honest = {"status": "permanent_failure", "machine_status": "failed", "operator_summary": "honest: it failed"}
        payload = json.dumps({"sleep_s": 8, "outcome": honest})
        ran_ok(agent.as_operator("task", "add", "--type", "scripted", "--payload", payload))
        dispatcher = subprocess.Popen(agent.service_argv("dispatch", "--until-idle"), env=agent.env())
        try:
            runs = agent.run_area / "runs"
            run = wait_until(lambda: next((p for p in runs.iterdir() if p.is_dir()), None), 60, "the attempt's run dir")
            pid = wait_until(lambda: agent.processes_of(agent.run), 60, "the attempt's process")[0]
            wait_until(lambda: (run / "prompt.md").exists(), 30, "its bundle copy")
            prompt_before = (run / "prompt.md").read_bytes()
            targets.write_text(json.dumps({"runs": str(runs), "workspace": str(agent.workspace),
                                           "attempts": [{"run": str(run), "pid": pid}]}))  # fmt: skip
            targets.chmod(0o644)
            sensed = agent.as_service("sensors", "--once", delegated=False)
            assert sensed.returncode == 0, sensed.stderr
            tries = json.loads((agent.sensor_home / "hostile" / "hostile-sensor-report.json").read_text())
            assert len(tries) == 11 and [t for t in tries if t["succeeded"]] == [], json.dumps(tries, indent=1)
            assert (run / "prompt.md").read_bytes() == prompt_before
            assert dispatcher.wait(timeout=90) == 0
        finally:
            if dispatcher.poll() is None:
                dispatcher.kill()
                dispatcher.wait()
        [task] = json.loads(ran_ok(agent.as_operator("task", "list", "--json")))
        assert task["status"] == "permanent_failure" and "FORGED" not in json.dumps(task), task
        assert not (agent.workspace / "planted-by-sensor").exists()
        verified = agent.as_operator("evidence", "verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.deep
@pytest.mark.process
def test_status_and_install_say_when_attempts_and_sensors_still_share_a_group() -> None:
    """An older install made the run and sensor users in the services' group, and systemd-sysusers never
    changes an existing user's group: status says what they can reach of each other and how to split
    them; install names the usermod line for each."""
    from agentd.process.privilege import not_in_own_group

    with privsep.initialised_agent() as agent:
        assert "out of the attempts' reach" in ran_ok(agent.as_operator("status"))
        assert not_in_own_group(agent.run) is None and not_in_own_group(agent.sensors) is None
        for user in (agent.run, agent.sensors):  # as an older install left them
            subprocess.run(["usermod", "-g", agent.service, user], check=True, capture_output=True)
        status = ran_ok(agent.as_operator("status"))
        gid = pwd.getpwnam(agent.service).pw_gid
        assert f"share group {gid} with the attempts" in status and f"usermod -g {agent.sensors}" in status, status
        said = not_in_own_group(agent.run)
        assert said is not None and f"usermod -g {agent.run} {agent.run}" in said and agent.service in said


@pytest.mark.deep
@pytest.mark.process
def test_a_fork_bomb_ends_at_its_attempts_own_limit_and_never_stalls_the_dispatcher() -> None:
    """The attempt's cgroup is a child of the dispatcher unit's, so a fork bomb used up the unit's TasksMax
    and the dispatcher could start neither a thread nor a process until the attempt's timeout. Here the
    service's own cgroup holds at most 128 (the unit's TasksMax, as systemd sets it) and runs as the units
    run it: the bomb ends at its own [dispatch] max_pids within a second or so, and the next task runs."""
    privsep.require()

    def limited(raw: dict[str, Any]) -> None:
        raw["dispatch"]["max_pids"] = 24
        next(a for a in raw["adapters"] if a["adapter_id"] == "scripted")["timeout_ms"] = 60_000

    with privsep.priv_agent(limited) as agent:
        v1 = agent.v1_cgroups()
        pids = next((path for path in v1 if path.parent.name == "pids"), None)
        if pids is None:
            pytest.skip("no cgroup v1 pids hierarchy here (a v2 host: the limit is set in the attempt's v2 cgroup)")
        (pids / "pids.max").write_text("128")
        ran_ok(agent.as_service("init"))
        bomb = json.dumps({"forks": 1000, "outcome": {"status": "completed", "machine_status": "ok",
                                                       "operator_summary": "forked"}})  # fmt: skip
        ran_ok(agent.as_operator("task", "add", "--type", "scripted", "--payload", bomb))
        ran_ok(agent.as_operator("task", "add", "--type", "example", "--priority", "9"))
        ran = agent.as_service("dispatch", "--until-idle", timeout=90)
        assert ran.returncode == 0, ran.stderr
        first, second = sorted(
            json.loads(ran_ok(agent.as_operator("task", "list", "--json"))), key=lambda t: t["task_id"]
        )
        shown = json.loads(ran_ok(agent.as_operator("task", "show", str(first["task_id"]), "--json")))
        attempt = shown["attempts"][-1]
        assert attempt["termination_reason"] == "pids_limit", attempt
        assert attempt["diagnostics"]["elapsed_s"] < 20, "ended at its limit, long before its 60 s timeout"
        assert second["status"] == "completed", second
        assert agent.processes_of(agent.run) == []
