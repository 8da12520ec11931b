"""A hook that cannot start is a refusal, never silence (docs/policy.md, "When the hook cannot start"): the
hook's `--check`, the check as the run user, the dispatcher that refuses the attempt before its harness
starts, `config check` and `status` that say why, and the success kept for the next attempt."""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import privsep
import pytest
from rig import Rig
from support import alive, ran_ok, wait_until

from agentd.adapters.base import PolicyHook
from agentd.process import hook
from agentd.process.hook_check import HookChecks, hook_problem
from agentd.process.privilege import RunUser, run_user

DENY = {"decision": "deny", "tool": "Bash", "command": "*touch denied_marker*", "reason": "not here"}


def hook_command(python: str, script: str = hook.__file__, socket: str = "/run/x/policy.sock") -> str:
    """The hook's command line as PolicyHook.command makes it, with another interpreter or script."""
    return shlex.join([python, "-I", script, "claude", "--socket", socket, "--within", "75"])


# --- the hook's --check -------------------------------------------------------------------------------


@pytest.mark.process
def test_the_hook_s_check_parses_its_arguments_says_its_python_and_answers_nothing() -> None:
    command = [*shlex.split(PolicyHook.of(Path("/run/x"), 60).command("codex")), "--check"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("agentd hook ok: Python ") and done.stdout.count("\n") == 1
    wrong = subprocess.run([sys.executable, "-I", hook.__file__, "claude", "--check"], capture_output=True, text=True)
    assert wrong.returncode == 2 and "the hook was called as" in wrong.stderr and wrong.stdout == ""


# --- the check, as this user --------------------------------------------------------------------------


@pytest.mark.process
def test_the_check_passes_for_the_hook_as_the_harness_runs_it() -> None:
    assert hook_problem(PolicyHook.of(Path("/run/x"), 60).command("claude"), None) is None


@pytest.mark.process
def test_the_check_names_what_could_not_run_where_and_the_fix(tmp_path: Path) -> None:
    missing = hook_problem(hook_command(str(tmp_path / "gone" / "python3")), None)
    assert missing is not None and missing.startswith(f"this service's user cannot run {tmp_path}/gone/python3: ")
    assert "no such file" in missing and "install agentd where" in missing and "docs/install-and-deploy.md" in missing
    no_script = hook_problem(hook_command(sys.executable, str(tmp_path / "hook.py")), None)
    assert no_script is not None and f"{tmp_path}/hook.py" in no_script and "No such file" in no_script
    not_python = tmp_path / "not-python"
    not_python.write_text("#!/bin/sh\necho segfault-ish >&2\nexit 139\n")
    not_python.chmod(0o755)
    broken = hook_problem(hook_command(str(not_python)), None)
    assert broken is not None and "segfault-ish" in broken


def sleeping_python(folder: Path) -> Path:
    """An interpreter that never answers, and leaves a child of its own behind (their pids in `pid`)."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o777)  # whoever runs it writes the pids
    python = folder / "python3"
    python.write_text(f"#!/bin/sh\necho $$ > {folder}/pid\nsleep 300 &\necho $! >> {folder}/pid\nsleep 300\n")
    python.chmod(0o755)
    return python


def assert_gone(pids: Path) -> None:
    for pid in pids.read_text().split():
        wait_until(lambda pid=int(pid): not alive(pid), 10, f"process {pid} to be killed")


@pytest.mark.process
def test_a_hook_that_does_not_answer_its_check_is_a_problem_and_its_processes_are_killed(tmp_path: Path) -> None:
    python = sleeping_python(tmp_path / "slow")
    said = hook_problem(hook_command(str(python)), None, within_s=0.5)
    assert said is not None and "did not pass its check within 0.5s" in said
    assert_gone(tmp_path / "slow" / "pid")


def logging_python(folder: Path, log: Path, then: str) -> Path:
    """An interpreter that notes each start in `log`, then runs `then` with the same arguments."""
    folder.mkdir(parents=True, exist_ok=True)
    python = folder / "python3"
    python.write_text(f'#!/bin/sh\necho started >> {shlex.quote(str(log))}\nexec {then} "$@"\n')
    python.chmod(0o755)
    return python


def starts(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.mark.process
def test_a_success_is_kept_until_a_file_or_folder_on_its_way_changes_and_a_failure_is_checked_again(
    tmp_path: Path,
) -> None:
    log = tmp_path / "starts.log"
    python = logging_python(tmp_path / "bin", log, sys.executable)
    checks = HookChecks()
    for attempt in ("a", "b", "c"):  # each attempt has its own socket: the same check all the same
        assert checks.problem(hook_command(str(python), socket=f"/run/{attempt}/policy.sock"), None) is None
    assert starts(log) == 1 and checks.runs == 1 and checks.failed is None
    (tmp_path / "bin").chmod(0o750)  # a folder above the interpreter changed: checked again
    assert checks.problem(hook_command(str(python)), None) is None
    assert starts(log) == 2

    failing_log = tmp_path / "failing.log"
    failing = logging_python(tmp_path / "broken", failing_log, "/bin/false")
    for _ in range(2):
        said = checks.problem(hook_command(str(failing)), None)
        assert said is not None and "exited with 1" in said and checks.failed == said
    assert starts(failing_log) == 2, "a failure was kept"
    assert checks.problem(hook_command(str(python)), None) is None and checks.failed is None


@pytest.mark.asyncio
@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
async def test_a_second_attempt_does_not_check_again(rig_factory: Any) -> None:
    """Two claude attempts under a policy that can deny: one check (its success kept), both run."""

    def claude(raw: dict[str, Any]) -> None:
        claude = {"adapter_id": "claude", "kind": "claude-code", "command": "claude", "timeout_ms": 30_000}
        raw["adapters"].append(claude)
        raw["task_types"][0]["default_adapter_id"] = "claude"
        raw["policy"] = {"rules": [DENY]}

    rig: Rig = rig_factory(claude)
    first, second = rig.add(), rig.add()
    dispatcher = rig.dispatcher()
    assert await dispatcher.run_until_idle() == 2
    assert [rig.store.get_task_or_raise(t.task_id).status for t in (first, second)] == ["completed", "completed"]
    assert dispatcher.attempts.preparer.hooks.runs == 1


# --- with real users ----------------------------------------------------------------------------------


@contextmanager
def private_agentd(agent: privsep.PrivAgent) -> Iterator[Path]:
    """An agentd installed where only the services' user may enter (as a pyenv under /root is): its bin
    folder. The services run from it; the run user cannot start its interpreter."""
    shared = privsep.agentd_bin().parent
    root = agent.base / "private"
    shutil.copytree(shared, root, symlinks=True)
    python = root / "bin" / "python"
    (root / "bin" / "agentd").write_text(f"#!{python}\nimport sys\nfrom agentd.cli import main\nsys.exit(main())\n")
    service = pwd.getpwnam(agent.service)
    for path in [root, *root.rglob("*")]:
        os.chown(path, service.pw_uid, service.pw_gid, follow_symlinks=False)
    root.chmod(0o700)
    yield root / "bin"


@pytest.mark.process
def test_the_run_user_cannot_start_an_interpreter_or_read_a_hook_it_cannot_reach() -> None:
    privsep.require()
    with privsep.priv_agent() as agent, private_agentd(agent) as private:
        user = run_user(agent.run)
        assert isinstance(user, RunUser)
        python = str(private / "python")
        said = hook_problem(hook_command(python), user)
        assert said == (
            f"the run user {agent.run} cannot run {python}: permission denied; install agentd where the run user "
            f'{agent.run} can read it (docs/install-and-deploy.md, "When the hook cannot start")'
        )
        assert hook_problem(hook_command(python), None) is None  # root can: only the run user is refused
        hidden = agent.base / "hidden"
        hidden.mkdir(mode=0o700)
        shutil.copy(hook.__file__, hidden / "hook.py")
        unreadable = hook_problem(hook_command(str(privsep.reachable_python()), str(hidden / "hook.py")), user)
        assert unreadable is not None and f"{hidden}/hook.py" in unreadable and "Permission denied" in unreadable
        assert hook_problem(hook_command(str(privsep.reachable_python())), user) is None  # one it can reach
        slow = sleeping_python(agent.base / "slow")  # killed by a process of the run user (no CAP_KILL needed)
        said = hook_problem(hook_command(str(slow)), user, within_s=0.5)
        assert said is not None and f"the run user {agent.run} started {slow}" in said
        assert_gone(agent.base / "slow" / "pid")


def _claude_that_marks(raw: dict[str, Any], agent: privsep.PrivAgent) -> None:
    """A claude-code adapter whose "claude" only leaves a marker: if it ran, the harness started."""
    claude = agent.base / "etc" / "claude"
    claude.write_text(f"#!/bin/sh\ntouch {agent.workspace}/harness-started\nexit 1\n")
    claude.chmod(0o755)
    raw["adapters"].append(
        {"adapter_id": "claude", "kind": "claude-code", "command": str(claude), "timeout_ms": 30_000}
    )
    raw["task_types"].append(
        {
            "task_type": "governed",
            "payload_schema_id": "agent-runtime/payload.any-object/v1",
            "default_profile_id": "operator",
            "default_adapter_id": "claude",
        }
    )
    raw["policy"] = {"rules": [DENY]}


def _rewrite(agent: privsep.PrivAgent, change: Any) -> None:
    """The agent's config, changed after priv_agent wrote it (a change that needs its folders' names)."""
    raw = privsep.tomllib.loads(agent.config.read_text())
    change(raw)
    agent.config.write_text(privsep.tomli_w.dumps(raw))
    agent.readable(agent.base / "etc")


@pytest.mark.deep
@pytest.mark.process
@pytest.mark.timeout(180)
def test_an_attempt_whose_hook_the_run_user_cannot_start_never_starts_and_every_view_says_why() -> None:
    privsep.require()
    with privsep.priv_agent() as agent:
        _rewrite(agent, lambda raw: _claude_that_marks(raw, agent))
        with private_agentd(agent) as private:
            agent.bin = private
            ran_ok(agent.as_service("init"))
            added = json.loads(ran_ok(agent.as_operator("task", "add", "--type", "governed", "--json")))
            dispatcher = subprocess.Popen(agent.service_argv("dispatch"), env=agent.env(), stderr=subprocess.PIPE)
            try:
                shown = wait_until(lambda: _ended(agent, added["task_id"]), 60, "the task's first attempt to end")
                status = ran_ok(agent.as_operator("status"))
                checked = agent.as_operator("config", "check")
            finally:
                dispatcher.send_signal(signal.SIGTERM)
                _, stderr = dispatcher.communicate(timeout=60)
            python = f"{private}/python"
            problem = f"the run user {agent.run} cannot run {python}: permission denied"
            assert not (agent.workspace / "harness-started").exists(), "the harness ran without its hook"
            [attempt] = shown["attempts"]
            assert attempt["termination_reason"] == "start_failed", attempt
            assert problem in shown["task"]["last_error"], shown["task"]["last_error"]
            assert shown["task"]["last_error"].startswith("not started, as its tool calls could not be judged")
            assert "REFUSING attempts whose tool calls are judged: " + problem in status, status
            assert checked.returncode == 2 and problem in checked.stderr, checked.stdout + checked.stderr
            assert b"hook_check_failed" in stderr
            verified = agent.as_operator("evidence", "verify")
            assert verified.returncode == 0, verified.stdout + verified.stderr


def _ended(agent: privsep.PrivAgent, task_id: int) -> dict[str, Any] | None:
    shown = json.loads(ran_ok(agent.as_operator("task", "show", str(task_id), "--json")))
    return shown if shown["attempts"] and shown["attempts"][0].get("ended_at") else None


@pytest.mark.process
def test_config_check_checks_the_run_user_or_says_it_could_not() -> None:
    privsep.require()
    with privsep.priv_agent() as agent:
        _rewrite(agent, lambda raw: _claude_that_marks(raw, agent))
        said = ran_ok(agent.as_operator("config", "check"))
        assert f"tool-call hook: the run user {agent.run} can start it" in said
        as_service = ["setpriv", f"--reuid={agent.service}", f"--regid={agent.service}", "--init-groups"]
        argv = [*as_service, str(agent.agentd), "--config", str(agent.config), "config", "check"]
        unprivileged = subprocess.run(argv, capture_output=True, text=True, env=agent.env(), timeout=60, check=False)
        assert unprivileged.returncode == 0, unprivileged.stderr
        assert f"tool-call hook: not checked: this process cannot start processes as {agent.run}" in unprivileged.stdout
