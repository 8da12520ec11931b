"""huey's tasks for the benchmarks, importable by a real `huey_consumer bench.huey_tasks.huey`
(the consumer's database is $BENCH_HUEY_DB). Only huey and the standard library: the consumer
pays for nothing of agentd's."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from huey import SqliteHuey


def run_script(script: str, result_path: str) -> Any:
    """The end-to-end workload: the no-op script through subprocess, its outcome read back (huey
    stores it as the task's result)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "AGENTD_RESULT_PATH": result_path}
    subprocess.run([script], env=env, stdin=subprocess.DEVNULL, check=True)
    with open(result_path, encoding="utf-8") as result:
        return json.load(result)


def noop() -> dict[str, str]:
    """The claim + complete workload: nothing to do, a small result to store."""
    return {"status": "completed"}


def make_huey(filename: str) -> tuple[SqliteHuey, Any, Any]:
    """SqliteHuey with its defaults on `filename`, and the two tasks registered on it."""
    huey = SqliteHuey(filename=filename)
    return huey, huey.task()(run_script), huey.task()(noop)


# The consumer's entry point; in the benchmark process it is an unused in-memory instance.
huey, _, _ = make_huey(os.environ.get("BENCH_HUEY_DB", ":memory:"))
