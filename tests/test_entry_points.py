"""What a newcomer runs: `make run`, and `agentd events --follow` as a live process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from queue import Empty, Queue

import pytest

from support import EXAMPLE_CONFIG, REPO


def line_reader(stream: object) -> Queue[str]:
    lines: Queue[str] = Queue()

    def pump() -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def test_events_follow_streams_new_events(tmp_path: Path) -> None:
    env = {**os.environ, "AGENTD_PATHS__STATE_DIR": str(tmp_path / "s"), "AGENTD_PATHS__WORKSPACE": str(tmp_path / "w")}
    agentd = [sys.executable, "-m", "agentd", "--config", str(EXAMPLE_CONFIG)]
    subprocess.run([*agentd, "init"], env=env, check=True, capture_output=True, timeout=60)
    with subprocess.Popen(
        [*agentd, "events", "--follow", "--json"], env=env, stdout=subprocess.PIPE, text=True
    ) as follower:
        try:
            lines = line_reader(follower.stdout)
            assert '"migration_applied"' in lines.get(timeout=20)
            add = [*agentd, "task", "add", "--type", "example", "--subject", "live"]
            subprocess.run(add, env=env, check=True, capture_output=True, timeout=60)
            assert '"task_enqueued"' in lines.get(timeout=20)
            with pytest.raises(Empty):
                lines.get(timeout=0.2)  # nothing more happened, so nothing more is printed
        finally:
            follower.terminate()


@pytest.mark.skipif(not (REPO / ".venv" / ".installed").exists(), reason="make test bootstraps .venv first")
def test_make_run_starts_on_the_embedded_default(tmp_path: Path) -> None:
    env = {**os.environ, "AGENTD_PATHS__STATE_DIR": str(tmp_path / "s"), "AGENTD_PATHS__WORKSPACE": str(tmp_path / "w")}
    result = subprocess.run(
        ["make", "--no-print-directory", "run"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "task 1 enqueued" in result.stdout
    assert (tmp_path / "s" / "agentd.db").is_file()
