"""The one process spawner, against real children: groups, caps, timeouts, cancellation."""

from __future__ import annotations

import os
import resource
import signal
import sys
from pathlib import Path

import anyio
import pytest
from support import alive, gone

from agentd.process import containment, runner
from agentd.process.child import Child, pidfds_work
from agentd.process.containment import RunGroup
from agentd.process.runner import ProcessSpec, run_process

pytestmark = [pytest.mark.process, pytest.mark.asyncio]


@pytest.fixture(autouse=True, params=["pidfd", "asyncio"])
def spawner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs both ways a child can be started: on a pidfd (agentd/process/child.py, where
    the kernel has them) and through asyncio's subprocess transports (where it does not)."""
    if request.param == "pidfd" and not pidfds_work():
        pytest.skip("this kernel gives no pidfds")
    monkeypatch.setattr(runner, "LEAN_SPAWN", request.param == "pidfd")
    return str(request.param)


def spec(tmp_path: Path, code: str, **overrides: object) -> ProcessSpec:
    fields: dict[str, object] = {
        "argv": [sys.executable, "-c", code],
        "cwd": tmp_path,
        "env": {"PATH": os.environ["PATH"]},
        "stdout_path": tmp_path / "stdout.log",
        "stderr_path": tmp_path / "stderr.log",
        "timeout_s": 30.0,
        "kill_grace_s": 1.0,
    }
    fields.update(overrides)
    return ProcessSpec(**fields)  # type: ignore[arg-type]


async def test_output_stdin_and_exit_code(tmp_path: Path) -> None:
    code = "import sys; data = sys.stdin.read(); print('got', data); print('oops', file=sys.stderr); sys.exit(3)"
    result = await run_process(spec(tmp_path, code, stdin=b'{"x": 1}'))
    assert result.exit_code == 3 and not result.timed_out and result.signal is None
    assert (tmp_path / "stdout.log").read_text() == 'got {"x": 1}\n'
    assert (tmp_path / "stderr.log").read_text() == "oops\n"
    assert oct((tmp_path / "stdout.log").stat().st_mode & 0o777) == "0o600"


async def test_a_megabyte_of_stdin_reaches_a_child_that_reads_it_slowly(tmp_path: Path) -> None:
    """More than a pipe holds: the rest is written as the child reads, while its output is read."""
    payload = bytes(range(256)) * 4096
    code = (
        "import sys, time, hashlib\n"
        "h = hashlib.sha256()\n"
        "while chunk := sys.stdin.buffer.read(65536):\n"
        "    h.update(chunk); print(len(chunk)); time.sleep(0.001)\n"
        "print(h.hexdigest())\n"
    )
    result = await run_process(spec(tmp_path, code, stdin=payload))
    assert result.ok
    assert (tmp_path / "stdout.log").read_text().splitlines()[-1] == __import__("hashlib").sha256(payload).hexdigest()


async def test_a_child_that_never_reads_its_stdin_ends_the_run_all_the_same(tmp_path: Path) -> None:
    result = await run_process(spec(tmp_path, "print('ignored it')", stdin=b"x" * (4 * 1024 * 1024)))
    assert result.exit_code == 0
    assert (tmp_path / "stdout.log").read_text() == "ignored it\n"


@pytest.mark.parametrize("spawner", ["pidfd"], indirect=True)  # the pidfd spawner's own test
async def test_where_pidfds_work_a_child_gets_no_asyncio_transports(
    tmp_path: Path, spawner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cheap way is the one taken where it can be (~0.35 ms less CPU per attempt): the child is a
    plain one (agentd/process/child.py), its pipes read with add_reader, its exit seen on a pidfd."""
    monkeypatch.setattr(runner, "LEAN_SPAWN", None)  # as a service starts: found out at the first spawn
    started: list[object] = []
    real = runner._spawn

    async def seen(process_spec: ProcessSpec) -> object:
        process = await real(process_spec)
        started.append(process)
        return process

    monkeypatch.setattr(runner, "_spawn", seen)
    result = await run_process(spec(tmp_path, "print('hi')"))
    assert result.ok and (tmp_path / "stdout.log").read_text() == "hi\n"
    assert [type(p) for p in started] == [Child]


async def test_environment_is_exactly_what_was_given(tmp_path: Path) -> None:
    code = "import os, json; print(json.dumps(dict(os.environ)))"
    result = await run_process(spec(tmp_path, code, env={"PATH": os.environ["PATH"], "ONLY": "this"}))
    assert result.ok
    env = __import__("json").loads((tmp_path / "stdout.log").read_text())
    assert env.get("ONLY") == "this" and "HOME" not in env


async def test_a_missing_command_is_a_start_error(tmp_path: Path) -> None:
    result = await run_process(spec(tmp_path, "", argv=[str(tmp_path / "nope")]))
    assert result.start_error is not None and "no such file" in result.start_error
    assert result.pid is None and not result.ok


async def test_timeout_kills_a_term_ignoring_child_and_its_grandchild(tmp_path: Path) -> None:
    code = (
        "import os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])\n"
        "print(os.getpid(), child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    started = anyio.current_time()
    result = await run_process(spec(tmp_path, code, timeout_s=1.5, kill_grace_s=0.5))
    elapsed = anyio.current_time() - started
    assert result.timed_out and result.signal == signal.SIGKILL
    assert elapsed < 1.5 + 0.5 + 1.5
    leader, grandchild = map(int, (tmp_path / "stdout.log").read_text().split())
    assert gone(leader) and gone(grandchild)


async def test_stragglers_are_killed_when_the_leader_exits(tmp_path: Path) -> None:
    code = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
        " stdout=sys.stdout)\n"
        "print(child.pid, flush=True)\n"
    )
    result = await run_process(spec(tmp_path, code, timeout_s=30))
    assert result.exit_code == 0 and result.elapsed_s < 10  # did not wait for the sleeper's pipe
    assert gone(int((tmp_path / "stdout.log").read_text()))


async def test_cancelling_the_caller_kills_the_group(tmp_path: Path) -> None:
    code = "import os, time; print(os.getpid(), flush=True); time.sleep(600)"
    pids: list[int] = []

    async def started(pid: int) -> None:
        pids.append(pid)

    with anyio.move_on_after(1.0):
        await run_process(spec(tmp_path, code, timeout_s=600), on_started=started)
    assert pids and gone(pids[0])


async def test_a_gigabyte_of_output_is_capped_without_growing_memory(tmp_path: Path) -> None:
    code = "import sys\nblock = b'x' * (1 << 20)\nfor _ in range(1024): sys.stdout.buffer.write(block)\n"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = await run_process(spec(tmp_path, code, output_cap_bytes=1 << 20, timeout_s=120))
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert result.exit_code == 0
    assert result.stdout.bytes_seen == 1 << 30 and result.stdout.bytes_kept == 1 << 20
    assert result.stdout.truncated
    log = tmp_path / "stdout.log"
    assert log.stat().st_size < (1 << 20) + 200
    assert log.read_bytes().endswith(b"bytes; 1072693248 more dropped]\n")
    assert grown_kib < 64 * 1024, f"the dispatcher grew by {grown_kib} KiB"


async def test_a_process_that_left_the_group_with_setsid_still_dies_with_the_run(tmp_path: Path) -> None:
    """The harness CLIs start their tools in a new session; killpg cannot reach those."""
    code = (
        "import subprocess, sys\n"
        "escapee = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
        "print(escapee.pid, flush=True)\n"
    )
    env = {"PATH": os.environ["PATH"], "AGENTD_ATTEMPT_ID": "01TESTMARKER"}
    result = await run_process(spec(tmp_path, code, env=env, group=group(tmp_path, "01TESTMARKER")))
    assert result.exit_code == 0 and result.stragglers >= 1
    escapee = int((tmp_path / "stdout.log").read_text())
    assert gone(escapee), "a process the run started outlived it"


def group(tmp_path: Path, run_id: str) -> RunGroup:
    return containment.attempt_group(tmp_path / "state", run_id)


# A tool that daemonises for real: double fork, setsid, and an empty environment (no marker). The
# leader waits until the daemon has written its pid (daemon.pid), then exits: the run ends with the
# daemon alive and detached.
DAEMON = (
    "import os, subprocess, sys, time\n"
    "code = 'import os, time\\nif os.fork(): os._exit(0)\\nos.setsid()\\nif os.fork(): os._exit(0)\\n"
    'open("daemon.pid.tmp", "w").write(str(os.getpid())); os.rename("daemon.pid.tmp", "daemon.pid")\\n'
    "time.sleep(600)\\n'\n"
    "subprocess.run([sys.executable, '-c', code], env={}, check=True)\n"
    "while not os.path.exists('daemon.pid'): time.sleep(0.01)\n"
)


@pytest.mark.skipif(containment.cgroups() is None, reason="no writable cgroup v2 here: the marker fallback applies")
async def test_an_empty_environment_setsid_daemon_dies_with_its_run(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "AGENTD_ATTEMPT_ID": "01DAEMON"}
    result = await run_process(spec(tmp_path, DAEMON, env=env, group=group(tmp_path, "01DAEMON")))
    assert result.exit_code == 0
    daemon = int((tmp_path / "daemon.pid").read_text())
    assert gone(daemon), "a daemon with no marker escaped its run"
    found = containment.cgroups()
    run_dir = found.run_dir(group(tmp_path, "01DAEMON")) if found else None
    assert run_dir is not None and run_dir.parent.name == containment.namespace_for(tmp_path / "state")
    assert not run_dir.exists(), "the run's cgroup is removed with it"


async def test_without_cgroups_the_documented_limit_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/reliability.md, "No escapees": without a writable cgroup a process that both leaves the session and
    clears its environment escapes until the service stops; one that keeps the marker is still found."""
    monkeypatch.setitem(containment._CGROUPS, os.getpid(), None)
    monkeypatch.setattr(runner, "PIPE_DRAIN_S", 0.2)  # the daemon holds the pipes; the drain is not tested here
    env = {"PATH": os.environ["PATH"], "AGENTD_ATTEMPT_ID": "01NOCG"}
    await run_process(spec(tmp_path, DAEMON, env=env, group=group(tmp_path, "01NOCG")))
    daemon = int((tmp_path / "daemon.pid").read_text())
    try:
        assert alive(daemon)
    finally:
        os.kill(daemon, signal.SIGKILL)


async def test_without_a_run_group_only_the_process_group_is_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "PIPE_DRAIN_S", 0.2)  # the escapee holds the pipes; the drain is not tested here
    code = (
        "import subprocess, sys\n"
        "escapee = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
        "print(escapee.pid, flush=True)\n"
    )
    await run_process(spec(tmp_path, code))
    escapee = int((tmp_path / "stdout.log").read_text())
    try:
        assert alive(escapee)  # which is why every attempt and sensor run has a run group
    finally:
        os.kill(escapee, signal.SIGKILL)


@pytest.mark.skipif(containment.cgroups() is None, reason="no writable cgroup v2 here: the marker fallback applies")
@pytest.mark.parametrize(
    ("command", "said"), [("no-such-command-here", "no such file"), ("data.txt", "not executable")]
)
async def test_a_command_that_cannot_run_is_a_start_error_inside_a_cgroup_too(
    tmp_path: Path, command: str, said: str
) -> None:
    (tmp_path / "data.txt").write_text("not a program\n")  # 0644: no one may execute it
    argv = [str(tmp_path / command) if command == "data.txt" else command]
    result = await run_process(spec(tmp_path, "", argv=argv, group=group(tmp_path, "01NOEXEC")))
    assert result.start_error is not None and said in result.start_error.lower()
    found = containment.cgroups()
    assert found is not None and not found.run_dir(group(tmp_path, "01NOEXEC")).exists()


@pytest.mark.skipif(containment.cgroups() is None, reason="no writable cgroup v2 here: the marker fallback applies")
async def test_releasing_the_namespace_leaves_no_cgroup_unless_a_run_is_in_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    found = containment.cgroups()
    assert found is not None
    namespace = found.own / containment.namespace_for(state)
    await run_process(spec(tmp_path, "pass", group=group(tmp_path, "01DONE")))
    assert namespace.is_dir(), "runs share their agent's namespace"
    held = found.make(group(tmp_path, "01HELD"))  # a run the agent's other service is still starting
    assert held is not None
    containment.release_namespace(state)
    assert namespace.is_dir(), "a namespace still holding a run stays"
    held.rmdir()
    containment.release_namespace(state)
    assert not namespace.exists()
    await run_process(spec(tmp_path, "pass", group=group(tmp_path, "01AGAIN")))  # made again on demand
    containment.release_namespace(state)
    assert not namespace.exists()


@pytest.mark.skipif(containment.cgroups() is None, reason="no writable cgroup v2 here: the marker fallback applies")
async def test_a_spawn_right_after_a_priming_still_lands_in_its_run_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`prime` (the dispatcher's, as a tick begins) moves this process into its own cgroup in a thread of its
    own to warm the kernel's lock; a spawn that follows at once waits for that move before its own, so the
    run's process is forked in the run's cgroup, never in the service's (docs/decisions.md)."""
    monkeypatch.setattr(containment, "PRIME_AFTER_S", 0.0)  # prime every time, as after an idle spell
    code = "import os; print(open(f'/proc/{os.getpid()}/cgroup').read(), flush=True)"
    for n in range(5):
        containment.prime()
        run = group(tmp_path, f"01PRIMED{n}")
        result = await run_process(spec(tmp_path, code, group=run, stdout_path=tmp_path / f"out{n}.log"))
        assert result.exit_code == 0
        shown = (tmp_path / f"out{n}.log").read_text()
        assert f"/{containment.namespace_for(tmp_path / 'state')}/attempt-01PRIMED{n}" in shown, shown
    found = containment.cgroups()
    assert found is not None and str(os.getpid()) in (found.home / "cgroup.procs").read_text().split()


@pytest.mark.skipif(containment.cgroups() is None, reason="no writable cgroup v2 here: the marker fallback applies")
async def test_no_priming_starts_while_a_spawn_holds_the_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """While a spawn holds the lock the service may sit in a run's cgroup: a move home then would fork the
    run's process outside it, so `prime` starts nothing."""
    monkeypatch.setattr(containment, "PRIME_AFTER_S", 0.0)
    monkeypatch.setattr(containment, "_priming", [])
    async with containment._spawn_lock():
        containment.prime()
        assert containment._priming == []
    containment.prime()
    assert len(containment._priming) == 1
    containment._priming[0].join()
