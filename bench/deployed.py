"""The as-deployed row (issue #43): the end-to-end drain on an agent laid out as `agentd install` lays
one out — the dispatcher as its service user with the units' capabilities in a delegated cgroup,
each attempt as the run user (`run_as`) in a cgroup of its own — made with real users by the tests'
own helper (tests/privsep.py; needs root, useradd and a writable cgroup v2). Its folders are on tmpfs,
so the row compares with the tmpfs row: what deployment adds, the disk taken out."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.agent import ANY_OBJECT, NOOP_SCRIPT, REPO

sys.path.insert(0, str(REPO / "tests"))  # tests/privsep.py imports its neighbours by name, as pytest runs it
import privsep


def why_not() -> str | None:
    return privsep.missing()


def noop_type(script: Path) -> Any:
    def mutate(raw: dict[str, Any]) -> None:
        raw["adapters"].append({"adapter_id": "noop", "kind": "script", "command": str(script), "timeout_ms": 30_000})
        raw["task_types"].append(
            {"task_type": "noop", "payload_schema_id": ANY_OBJECT, "default_profile_id": "operator",
             "default_adapter_id": "noop"}
        )  # fmt: skip

    return mutate


# A claude-code stand-in that does nothing but say it completed: an attempt of a harness kind, which as deployed runs
# through the model gateway in a network of its own (docs/gateway.md), against the no-op script beside it.
NOOP_HARNESS = """#!/bin/sh
[ "$1" = "--version" ] && { echo "2.1.197 (Claude Code)"; exit 0; }
cat > /dev/null
printf '{"status":"completed","machine_status":"ok","operator_summary":"ok"}' > "$AGENTD_RESULT_PATH"
echo '{"type":"result","subtype":"success","is_error":false,"result":"ok"}'
"""


def harness_type(script: Path) -> Any:
    def mutate(raw: dict[str, Any]) -> None:
        raw["adapters"].append(
            {"adapter_id": "noop", "kind": "claude-code", "command": str(script), "timeout_ms": 30_000,
             "env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}}
        )  # fmt: skip
        raw["task_types"].append(
            {"task_type": "noop", "payload_schema_id": ANY_OBJECT, "default_profile_id": "operator",
             "default_adapter_id": "noop"}
        )  # fmt: skip

    return mutate


def dispatch_per_s(tmpfs: Path, count: int, harness: bool = False) -> float:
    """Tasks/s of `agentd dispatch --until-idle` as the service runs it, over `count` queued no-op tasks (`harness`:
    of a claude-code stand-in, each attempt through the gateway in a network of its own)."""
    with tempfile.TemporaryDirectory(prefix="agentd-bench-deployed-", dir=tmpfs) as tmp:
        folder = Path(tmp)
        folder.chmod(0o755)
        script = folder / "noop.sh"
        script.write_text(NOOP_HARNESS if harness else NOOP_SCRIPT, encoding="utf-8")
        script.chmod(0o755)
        lines = folder / "tasks.jsonl"
        lines.write_text("".join(json.dumps({"task_type": "noop", "payload": {}}) + "\n" for _ in range(count)))
        lines.chmod(0o644)
        with privsep.priv_agent((harness_type if harness else noop_type)(script), under=tmpfs) as agent:
            checked(agent.as_service("init"), "init")
            checked(agent.as_operator("task", "add", "--batch", str(lines)), "task add --batch")
            started = time.perf_counter()
            checked(agent.as_service("dispatch", "--until-idle", timeout=600), "dispatch --until-idle")
            elapsed = time.perf_counter() - started
            listed = checked(
                agent.as_operator("task", "list", "--json", "--status", "completed", "--limit", str(count + 1)),
                "task list",
            )
            done = len(json.loads(listed))
    if done != count:
        raise RuntimeError(f"as deployed, agentd dispatch completed {done} of {count} tasks")
    return count / elapsed


def checked(ran: Any, what: str) -> str:
    if ran.returncode != 0:
        raise RuntimeError(
            f"as deployed, agentd {what}: exit {ran.returncode}\n{ran.stdout[-1000:]}{ran.stderr[-2000:]}"
        )
    return str(ran.stdout)
