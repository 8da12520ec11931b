"""The agent cannot act as its operator (docs/install-and-deploy.md, "The boundary"): tried from inside a real attempt,
running as its own user under a service that runs as another, as the units run them."""

from __future__ import annotations

import json
from typing import Any

import privsep
import pytest


def hostile_payload(agent: privsep.PrivAgent, **more: Any) -> str:
    return json.dumps({"report": "hostile-report.json", "env_file": str(agent.env_file), **more})


def ok(done: Any) -> str:
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


@pytest.mark.process
def test_an_attempt_that_tries_to_act_as_its_operator_fails_at_every_try() -> None:
    privsep.require()
    with privsep.priv_agent() as agent:
        ok(agent.as_service("init"))
        held = json.loads(ok(agent.as_operator("task", "add", "--type", "example", "--require-approval", "--json")))
        payload = hostile_payload(agent, approve=held["task_id"])
        ok(agent.as_operator("task", "add", "--type", "hostile", "--payload", payload))
        ran = agent.as_service("dispatch", "--until-idle")
        assert ran.returncode == 0, ran.stderr
        assert f"attempts run as {agent.run}" in ran.stderr

        tries = json.loads((agent.workspace / "hostile-report.json").read_text())
        assert len(tries) >= 15
        succeeded = [t for t in tries if t["succeeded"]]
        assert succeeded == [], json.dumps(tries, indent=1)

        approvals = json.loads(ok(agent.as_operator("approvals", "--json")))
        assert [a["task_id"] for a in approvals] == [held["task_id"]]  # still held
        tasks = json.loads(ok(agent.as_operator("task", "list", "--json")))
        assert not any(t["source"] == "operator:x" for t in tasks)
        events = [json.loads(line) for line in ok(agent.as_operator("events", "--json")).splitlines()]
        assert not {"dispatch_paused", "dispatch_resumed", "approval_resolved"} & {e["type"] for e in events}
        hostile = next(t for t in tasks if t["task_type"] == "hostile")
        assert hostile["status"] == "completed"
        verified = agent.as_operator("evidence", "verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.process
def test_a_stubborn_attempt_and_its_daemon_are_stopped_without_a_kill_capability() -> None:
    """The service holds no CAP_KILL: the run user's own `kill` stops the group at the timeout, and the
    attempt's cgroup ends the setsid daemon it left."""
    privsep.require()
    with privsep.priv_agent() as agent:
        ok(agent.as_service("init"))
        payload = json.dumps({"stubborn": True, "daemon": "daemon.pid", "sleep_s": 600})
        ok(agent.as_operator("task", "add", "--type", "scripted", "--payload", payload))
        ran = agent.as_service("dispatch", "--until-idle")
        assert ran.returncode == 0, ran.stderr
        [task] = json.loads(ok(agent.as_operator("task", "list", "--json")))
        assert task["status"] == "retryable_failure" and "timed out" in (task["last_error"] or "")
        assert agent.processes_of(agent.run) == []  # the group, the stubborn grandchild and the daemon


@pytest.mark.process
def test_a_planted_link_in_the_result_is_refused_and_never_followed() -> None:
    privsep.require()
    with privsep.priv_agent() as agent:
        ok(agent.as_service("init"))
        secret = agent.state_dir / "agentd.db"
        payload = json.dumps({"result_symlink": str(secret)})
        ok(agent.as_operator("task", "add", "--type", "scripted", "--payload", payload))
        assert agent.as_service("dispatch", "--until-idle").returncode == 0
        shown = json.loads(ok(agent.as_operator("task", "show", "1", "--json")))
        attempt = shown["attempts"][0]
        assert "symbolic link" in attempt["diagnostics"]["outcome_problem"], attempt["diagnostics"]
        evidence = agent.state_dir / "attempts" / "1" / attempt["attempt_id"]
        assert not (evidence / "result.json").exists()  # nothing of the database was copied in


@pytest.mark.process
def test_two_agents_on_one_vm_share_no_writable_path() -> None:
    privsep.require()
    with privsep.priv_agent() as beta, privsep.priv_agent() as alpha:
        ok(beta.as_service("init"))
        ok(alpha.as_service("init"))
        payload = hostile_payload(alpha, other_workspace=str(beta.workspace))
        ok(alpha.as_operator("task", "add", "--type", "hostile", "--payload", payload))
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


@pytest.mark.process
def test_a_sensor_runs_as_the_run_user_and_what_it_leaves_is_ended_by_its_marker() -> None:
    """The sensor service has neither CAP_KILL nor a delegated cgroup (as under its unit): a daemon a
    sensor leaves outside its process group is found by its marker and killed by the run user."""
    privsep.require()
    with privsep.priv_agent() as agent:
        folder = agent.sensors_dir / "leaky"
        folder.mkdir(mode=0o755)
        (folder / "sense.py").write_text(SENSOR)
        (folder / "sense.py").chmod(0o755)
        manifest = 'description = "leaves a daemon"\ninterval_seconds = 60\ncommand = ["./sense.py"]\n'
        (folder / "sensor.toml").write_text(manifest)
        ok(agent.as_service("init"))
        ran = agent.as_service("sensors", "--once", delegated=False)
        assert ran.returncode == 0, ran.stderr
        events = [json.loads(line) for line in ok(agent.as_operator("events", "--json")).splitlines()]
        assert [e["type"] for e in events].count("sensor_event_recorded") == 1
        pid_file = agent.run_area / "runs" / "sensors" / "leaky" / "daemon.pid"
        assert pid_file.stat().st_uid == agent.uid(agent.run)  # the sensor ran as the run user, and its daemon started
        assert agent.processes_of(agent.run) == []  # and is gone


@pytest.mark.process
def test_a_replay_runs_as_the_attempt_ran_never_as_its_operator() -> None:
    """`agentd replay` ran the attempt's command again as whoever asked (root, or the services' user, who
    owns the database and the env files), with the attempt's own stdin: a task an attempt shaped could
    have its script run with the operator's rights. Now it runs as the run user, or not at all."""
    privsep.require()
    with privsep.priv_agent() as agent:
        ok(agent.as_service("init"))
        payload = json.dumps({"whoami": True, "outcome": {"status": "completed", "machine_status": "ok",
                                                         "operator_summary": "ran"}})  # fmt: skip
        ok(agent.as_operator("task", "add", "--type", "scripted", "--payload", payload))
        assert agent.as_service("dispatch", "--until-idle").returncode == 0
        [task] = json.loads(ok(agent.as_operator("task", "list", "--json")))
        shown = json.loads(ok(agent.as_operator("task", "show", str(task["task_id"]), "--json")))
        attempt_id = shown["attempts"][0]["attempt_id"]
        for replayed in (
            agent.as_operator("replay", attempt_id, "--json"),
            agent.as_service("replay", attempt_id, "--json"),
        ):
            verdict = json.loads(ok(replayed))
            assert verdict["verdict"] == "identical", verdict  # the same uid printed: the run user's
        assert agent.processes_of(agent.run) == []


@pytest.mark.process
def test_a_skill_command_the_operator_runs_acts_with_the_run_users_rights_only() -> None:
    """`agentd skills run` ran the skill's command in the workspace as whoever typed it: the workspace is
    the run user's, so a link an attempt left where the command writes (the example skill's notes.md)
    turned the operator's `notes add` into a write wherever the link pointed."""
    privsep.require()
    with privsep.priv_agent() as agent:
        ok(agent.as_service("init"))
        operators = agent.base / "etc" / "operators-file"
        operators.write_text("the operator's\n")
        operators.chmod(0o644)
        planted = agent.workspace / "notes.md"
        planted.symlink_to(operators)  # what an attempt could leave
        followed = agent.as_operator("skills", "run", "example", "notes", "add", "from the workspace")
        assert followed.returncode != 0, followed.stdout
        assert operators.read_text() == "the operator's\n"
        planted.unlink()
        ok(agent.as_operator("skills", "run", "example", "notes", "add", "hello"))
        assert planted.read_text() == "- hello\n" and planted.stat().st_uid == agent.uid(agent.run)
