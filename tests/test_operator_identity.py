"""Every control act names a real person, and none can come from inside an attempt (docs/install-and-deploy.md, "The
boundary"): the verbs refuse a caller with AGENTD_ATTEMPT_ID or the run user's uid before reading
anything, `--source` cannot claim a namespace agentd sets, and a retry is never a way around a no."""

from __future__ import annotations

import pwd
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from support import REPO, ok, plain_env, write_config

from agentd.clock import FakeClock
from agentd.errors import ConfigError, InputError
from agentd.process.privilege import RESERVED_SOURCES, operator_identity, operator_name, refuse_inside_attempt
from agentd.records import RuntimeEvent
from agentd.work.validation import load_config


@pytest.fixture
def gated(rig_factory: Callable[..., Rig]) -> Rig:
    def add(raw: dict[str, Any]) -> None:
        next(t for t in raw["task_types"] if t["task_type"] == "scripted")["requires_approval"] = True

    return rig_factory(add)


def events(rig: Rig, kind: str) -> list[RuntimeEvent]:
    return [e for e in rig.events() if e.type == kind]


# Each control verb, as an operator types it (task 1 exists and waits for approval).
CONTROL_VERBS = [
    ("task", "add", "--type", "scripted", "--payload", "{}"),
    ("task", "cancel", "1"),
    ("task", "retry", "1"),
    ("approve", "1"),
    ("deny", "1", "--reason", "no"),
    ("dispatch", "pause"),
    ("dispatch", "resume"),
    ("schedule", "add", "s1", "--every", "1h", "--type", "scripted"),
    ("schedule", "rm", "s1"),
    ("workflow", "start", "goal-loop", "k1"),
    ("workflow", "signal", "1", "ok"),
    ("workflow", "unblock", "1"),
    ("workflow", "cancel", "1"),
    ("outbox", "retry", "1"),
    ("constitution", "accept", "1"),
    ("constitution", "reject", "1", "--reason", "no"),
    ("prune", "--before", "1d"),
]


@pytest.mark.asyncio
@pytest.mark.parametrize("verb", CONTROL_VERBS, ids=" ".join)
async def test_every_control_verb_is_refused_inside_an_attempt(
    gated: Rig, rig_cli: Any, monkeypatch: pytest.MonkeyPatch, verb: tuple[str, ...]
) -> None:
    held = gated.add("scripted", payload={"outcome": ok()})
    before = gated.store.chain_head()
    monkeypatch.setenv("AGENTD_ATTEMPT_ID", "01ATTEMPTFROMINSIDE")
    refused = rig_cli(gated, *verb)
    assert refused.code == 2, refused.out + refused.err
    assert "refused inside an attempt (AGENTD_ATTEMPT_ID=01ATTEMPTFROMINSIDE)" in refused.err
    assert gated.store.chain_head() == before  # nothing written
    assert gated.store.get_task_or_raise(held.task_id).awaiting_approval
    monkeypatch.delenv("AGENTD_ATTEMPT_ID")
    assert rig_cli(gated, "status").code == 0  # looking is not acting


@pytest.mark.asyncio
async def test_the_run_user_is_refused_even_without_the_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    me = pwd.getpwuid(__import__("os").getuid()).pw_name
    with pytest.raises(InputError, match=f"refused for {me}, the user attempts run as"):
        refuse_inside_attempt(me, "agentd approve")
    refuse_inside_attempt(None, "agentd approve")  # no run user: only the marker is checked


def test_a_sensor_is_refused_by_its_user_or_its_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sensor is the operator's code but runs on what it reads: it proposes work on its stdout, where
    each line is judged, never by acting as the operator."""
    me = pwd.getpwuid(__import__("os").getuid()).pw_name
    with pytest.raises(InputError, match=f"refused for {me}, the user sensors run as"):
        refuse_inside_attempt("nobody", "agentd approve", me)
    refuse_inside_attempt("nobody", "agentd approve", "nobody")  # the control: neither user is this one
    monkeypatch.setenv("AGENTD_SENSOR_RUN", "01SENSORRUN\nforged line")
    with pytest.raises(
        InputError, match=r"refused inside a sensor run \(AGENTD_SENSOR_RUN='01SENSORRUN\\nforged line'\)"
    ):
        refuse_inside_attempt(None, "agentd approve")


@pytest.mark.parametrize("source", [*(f"{name}:x" for name in RESERVED_SOURCES), "Sensor:inbox:1", " operator:bob"])
@pytest.mark.asyncio
async def test_a_source_cannot_claim_a_namespace_agentd_sets(gated: Rig, rig_cli: Any, source: str) -> None:
    before = gated.store.chain_head()
    refused = rig_cli(gated, "task", "add", "--type", "scripted", "--source", source, "--payload", "{}")
    assert refused.code == 2 and "claims a namespace agentd sets itself" in refused.err
    assert gated.store.chain_head() == before


@pytest.mark.parametrize("given", ["no-such-account-here", "nobody\nforged line", "x" * 100_000])
def test_sudo_user_is_recorded_only_when_it_names_an_account(monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    """$SUDO_USER is anyone's to set: text that names no account of this system (a newline that would forge a
    log line, a megabyte in every event's `by`) is not recorded as who ran sudo. The OS user always is."""
    monkeypatch.setenv("SUDO_USER", given)
    assert "sudo_user" not in operator_identity() and operator_name() == operator_identity()["user"]


@pytest.mark.asyncio
async def test_every_control_act_records_the_os_user(gated: Rig, rig_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUDO_USER", "nobody")  # as sudo leaves it: the person behind the account
    who = operator_name()
    assert who == f"nobody (sudo as {operator_identity()['user']})"
    added = rig_cli(gated, "task", "add", "--type", "scripted", "--payload", "{}", "--json").json()
    assert added["source"] == f"operator:{operator_identity()['user']}"
    assert rig_cli(gated, "task", "add", "--type", "scripted", "--source", "ci:nightly", "--payload", "{}").code == 0
    assert rig_cli(gated, "deny", str(added["task_id"]), "--reason", "no").code == 0
    assert rig_cli(gated, "task", "retry", str(added["task_id"])).code == 0
    assert rig_cli(gated, "task", "cancel", "2").code == 0
    assert rig_cli(gated, "schedule", "add", "s1", "--every", "1h", "--type", "scripted").code == 0
    assert rig_cli(gated, "schedule", "rm", "s1").code == 0
    assert rig_cli(gated, "dispatch", "pause").code == 0
    assert rig_cli(gated, "dispatch", "resume").code == 0
    acts = {
        "task_enqueued": lambda e: e.task_id == added["task_id"],
        "approval_resolved": lambda e: True,
        "task_requeued": lambda e: True,
        "task_finished": lambda e: e.task_id == 2,
        "schedule_upserted": lambda e: e.schedule_id == "s1",
        "schedule_removed": lambda e: True,
        "dispatch_paused": lambda e: True,
        "dispatch_resumed": lambda e: True,
    }
    for kind, mine in acts.items():
        found = [e for e in events(gated, kind) if mine(e)]
        assert found and all(e.payload["by"] == who for e in found), (kind, [e.payload for e in found])


@pytest.mark.asyncio
async def test_a_retry_of_a_denied_task_asks_for_approval_again(gated: Rig, rig_cli: Any) -> None:
    denied = gated.add("scripted", payload={"outcome": ok()})
    assert rig_cli(gated, "deny", str(denied.task_id), "--reason", "not now").code == 0
    retried = rig_cli(gated, "task", "retry", str(denied.task_id), "--json").json()
    assert retried["status"] == "pending" and retried["awaiting_approval"]
    assert [a["task_id"] for a in rig_cli(gated, "approvals", "--json").json()] == [denied.task_id]


@pytest.mark.asyncio
async def test_a_retry_of_a_task_canceled_while_it_waited_asks_for_approval_again(gated: Rig, rig_cli: Any) -> None:
    canceled = gated.add("scripted", payload={"outcome": ok()})
    assert rig_cli(gated, "task", "cancel", str(canceled.task_id)).code == 0
    assert rig_cli(gated, "task", "retry", str(canceled.task_id)).code == 0
    assert gated.store.get_task_or_raise(canceled.task_id).awaiting_approval


@pytest.mark.asyncio
async def test_a_retry_of_an_approved_task_that_failed_runs_without_asking_again(gated: Rig, rig_cli: Any) -> None:
    failing = gated.add(
        "scripted", payload={"outcome": {**ok(), "status": "permanent_failure", "machine_status": "failed"}}
    )
    assert rig_cli(gated, "approve", str(failing.task_id)).code == 0
    await gated.drain()
    assert gated.store.get_task_or_raise(failing.task_id).status == "permanent_failure"
    assert rig_cli(gated, "task", "retry", str(failing.task_id)).code == 0
    assert not gated.store.get_task_or_raise(failing.task_id).awaiting_approval


@pytest.mark.parametrize(
    ("paths", "problem"),
    [
        ({"workspace": "state/workspace", "run_dir": "run"}, "paths.workspace: expected a folder outside state_dir"),
        ({"workspace": "ws", "run_dir": "state/runs"}, "paths.run_dir: expected a folder outside state_dir"),
        ({"workspace": "ws"}, "paths.run_dir: required with dispatch.run_as"),
    ],
)
@pytest.mark.asyncio
async def test_a_run_user_needs_its_folders_outside_the_state_dir(
    tmp_path: Path, paths: dict[str, str], problem: str
) -> None:
    def mutate(raw: dict[str, Any]) -> None:
        raw["dispatch"]["run_as"] = "nobody"
        raw["paths"].pop("run_dir", None)
        raw["paths"].update({key: str(tmp_path / value) for key, value in paths.items()})

    with pytest.raises(ConfigError) as refused:
        load_config(write_config(tmp_path, mutate))
    assert problem in str(refused.value)


def _run_as_nobody(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    def mutate(raw: dict[str, Any]) -> None:
        raw["dispatch"]["run_as"] = "nobody"
        raw["paths"]["workspace"] = str(tmp_path / "area" / "workspace")
        raw["paths"]["run_dir"] = str(tmp_path / "area" / "runs")
        change(raw)

    return write_config(tmp_path, mutate)


def _handler(argv: list[str]) -> Callable[[dict[str, Any]], None]:
    def change(raw: dict[str, Any]) -> None:
        raw["message_handlers"] = [{"handler_id": "notify", "kind": "command", "argv": argv}]

    return change


@pytest.mark.parametrize(
    ("case", "problem"),
    [
        # The agent's workspace holding the state dir and the config: the run user could rename the state
        # dir away and put its own in its place, or edit the TOML that decides its approvals.
        ("a workspace above everything", "paths.state_dir: expected a path outside paths.workspace"),
        ("a workspace above everything", "the identity TOML: expected a path outside paths.workspace"),
        ("a workspace above everything", "constitution.soul_path: expected a path outside paths.workspace"),
        ("the run dir in the workspace", "paths.run_dir: expected a path outside paths.workspace"),
        ("the run dir is the workspace", "paths.run_dir: expected a path outside paths.workspace"),
        ("skills linked into the workspace", "paths.skills_dir: expected a path outside paths.workspace"),
        # A command handler runs as the services' user: a script the agent can rewrite is the operator's power.
        ("a handler's script in the workspace", "message_handlers.notify.argv[1]: expected a path outside"),
        ("a handler's command in the run dir", "message_handlers.notify.argv[0]: expected a path outside paths.run"),
        ("an adapter's env_file in the workspace", "adapters.script.env_file: expected a path outside paths.workspace"),
    ],
)
def test_nothing_the_operator_decides_lies_where_the_run_user_can_write(
    tmp_path: Path, case: str, problem: str
) -> None:
    area = tmp_path / "area"
    changes: dict[str, Callable[[dict[str, Any]], None]] = {
        "a workspace above everything": lambda raw: raw["paths"].update(workspace=str(tmp_path)),
        "the run dir in the workspace": lambda raw: raw["paths"].update(run_dir=str(area / "workspace" / "runs")),
        "the run dir is the workspace": lambda raw: raw["paths"].update(run_dir=str(area / "workspace")),
        "skills linked into the workspace": lambda raw: raw["paths"].update(skills_dir=str(tmp_path / "skills")),
        "a handler's script in the workspace": _handler(["/usr/bin/python3", str(area / "workspace" / "n.py")]),
        "a handler's command in the run dir": _handler([str(area / "runs" / "notify")]),
        "an adapter's env_file in the workspace": lambda raw: raw["adapters"][0].update(
            env_file=str(area / "workspace" / "secrets.env")
        ),
    }
    (area / "workspace").mkdir(parents=True)
    shutil.copytree(REPO / "skills", area / "workspace" / "skills")  # what the run user may rewrite
    (tmp_path / "skills").symlink_to(area / "workspace" / "skills")
    (area / "workspace" / "secrets.env").write_text("KEY=value\n")
    (area / "workspace" / "secrets.env").chmod(0o600)
    with pytest.raises(ConfigError) as refused:
        load_config(_run_as_nobody(tmp_path, changes[case]))
    assert problem in str(refused.value), str(refused.value)


def test_the_layout_agentd_install_makes_keeps_the_run_user_to_its_area(tmp_path: Path) -> None:
    """Control: the state dir and the config beside each other, the workspace and the run dir in a run area."""
    assert load_config(_run_as_nobody(tmp_path, lambda raw: None)).dispatch.run_as == "nobody"


@pytest.mark.asyncio
async def test_status_says_whether_the_boundary_holds(rig_factory: Callable[..., Rig], rig_cli: Any) -> None:
    rig = rig_factory()
    shown = rig_cli(rig, "status")
    assert "boundary attempts run as this service's own user" in shown.out and "are advisory" in shown.out
    assert rig_cli(rig, "status", "--json").json()["boundary"]["enforced"] is False


@pytest.mark.asyncio
async def test_status_names_the_run_user_when_there_is_one(tmp_path: Path, rig_cli: Any) -> None:
    def mutate(raw: dict[str, Any]) -> None:
        raw["dispatch"]["run_as"] = "nobody"
        raw["paths"]["run_dir"] = str(tmp_path / "runs")

    config = load_config(write_config(tmp_path, mutate))
    rig = Rig(config, FakeClock())
    try:
        boundary = rig_cli(rig, "status", "--json").json()["boundary"]
    finally:
        rig.close()
    assert boundary["enforced"] is True and boundary["line"].startswith("attempts run as nobody (uid ")
    assert "sensors run as that user too" in boundary["line"], "what the user also runs, and what that costs"


@pytest.mark.process
def test_the_service_start_line_says_approvals_are_advisory_without_a_run_user(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = plain_env(tmp_path)
    config = ["--config", str(write_config(tmp_path))]
    agentd = [sys.executable, "-m", "agentd", *config]
    assert subprocess.run([*agentd, "init"], env=env, capture_output=True, timeout=60).returncode == 0
    ran = subprocess.run([*agentd, "dispatch", "--until-idle"], env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "boundary: attempts run as this service's own user" in ran.stderr and "advisory" in ran.stderr


@pytest.mark.parametrize(
    ("run_as", "said"),
    [("no-such-user-here", "dispatch.run_as: no user 'no-such-user-here'"), ("root", "expected an unprivileged user")],
)
def test_a_service_that_cannot_keep_its_boundary_does_not_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run_as: str, said: str
) -> None:
    from support import run_main

    def mutate(raw: dict[str, Any]) -> None:
        raw["dispatch"]["run_as"] = run_as
        raw["paths"]["run_dir"] = str(tmp_path / "runs")

    config = write_config(tmp_path, mutate)
    run_main(capsys, config, "init")
    refused = run_main(capsys, config, "dispatch", "--until-idle")
    assert refused.code == 2 and said in refused.err and "Traceback" not in refused.err
    assert len(refused.err.strip().splitlines()) == 1
