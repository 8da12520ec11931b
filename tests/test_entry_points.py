"""What a newcomer runs: `make run`, and `agentd events --follow` as a live process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from queue import Empty, Queue

import pytest
from support import EXAMPLE_CONFIG, REPO

from agentd.store.migrations import available_migrations

pytestmark = pytest.mark.process


def line_reader(stream: object) -> Queue[str]:
    lines: Queue[str] = Queue()

    def pump() -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def rest_of(lines: Queue[str], quiet_s: float) -> str:
    """What `lines` still brings, until it has said nothing for `quiet_s` seconds."""
    seen = ""
    while True:
        try:
            seen += lines.get(timeout=quiet_s)
        except Empty:
            return seen


def make_run(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """`make run ARGS…` in the repo, in a session of its own (a Ctrl-C is sent to the whole group), its
    stdout and stderr one text pipe."""
    return subprocess.Popen(
        ["make", "--no-print-directory", *args, "run"],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_events_follow_streams_new_events(tmp_path: Path) -> None:
    env = {**os.environ, "AGENTD_PATHS__STATE_DIR": str(tmp_path / "s"), "AGENTD_PATHS__WORKSPACE": str(tmp_path / "w")}
    agentd = [sys.executable, "-m", "agentd", "--config", str(EXAMPLE_CONFIG)]
    subprocess.run([*agentd, "init"], env=env, check=True, capture_output=True, timeout=60)
    with subprocess.Popen(
        [*agentd, "events", "--follow", "--after", "0", "--json"], env=env, stdout=subprocess.PIPE, text=True
    ) as follower:
        try:
            lines = line_reader(follower.stdout)
            for _ in available_migrations():
                assert '"migration_applied"' in lines.get(timeout=20)
            add = [*agentd, "task", "add", "--type", "example", "--subject", "live"]
            subprocess.run(add, env=env, check=True, capture_output=True, timeout=60)
            assert '"task_enqueued"' in lines.get(timeout=20)
            with pytest.raises(Empty):
                lines.get(timeout=0.2)  # nothing more happened, so nothing more is printed
        finally:
            follower.terminate()


def session_members(session_id: int) -> list[int]:
    """Processes (not zombies) still running in a session."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == session_id and fields[0] != "Z":
                members.append(int(entry.name))
    return members


@pytest.mark.skipif(not (REPO / ".venv" / ".installed").exists(), reason="make test bootstraps .venv first")
def test_make_run_works_end_to_end_and_ctrl_c_stops_both_services(tmp_path: Path) -> None:
    """The embedded default: the example sensors' events become tasks and a goal-loop workflow,
    the script adapter runs them, evidence appears, and Ctrl-C stops everything."""
    state, workspace = tmp_path / "s", tmp_path / "w"
    env = {**os.environ, "AGENTD_PATHS__STATE_DIR": str(state), "AGENTD_PATHS__WORKSPACE": str(workspace)}
    with make_run(env=env) as make:
        lines = line_reader(make.stdout)
        seen = ""
        while "workflow_completed" not in seen:
            seen += lines.get(timeout=60)
        os.killpg(make.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        make.wait(timeout=60)
        seen += rest_of(lines, 5)
    assert "sensor_task_created" in seen and "sensor_workflow_created" in seen
    assert "task_finished" in seen and "dispatch_stopped" in seen
    assert "Traceback" not in seen
    assert session_members(make.pid) == [], "Ctrl-C left something running"
    assert (workspace / "replies" / "hello.txt").read_text() == "hello from make run\n"
    assert list((state / "attempts").glob("*/*/manifest.json")), "evidence appears under the state dir"
