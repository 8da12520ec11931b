#!/usr/bin/env python3
"""The demo agent behind the embedded default's script adapter.

It reads the task payload (JSON) on stdin, does a small job in the workspace (its cwd), and
reports a TaskOutcome as JSON in the file named by $AGENTD_RESULT_PATH (with what the attempt cost,
when the payload asks for a `cost_usd`: budgets count a script's own report).
"""

import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    payload = json.loads(sys.stdin.read() or "{}")
    task_type = os.environ.get("AGENTD_TASK_TYPE", "example")
    time.sleep(float(payload.get("sleep_s", 0)))
    failure = payload.get("fail")
    if failure == "no-outcome":
        print("finished, but reporting nothing")
        return 0
    if failure in ("retryable", "permanent"):
        return report(
            status="retryable_failure" if failure == "retryable" else "permanent_failure",
            machine_status="needs_retry" if failure == "retryable" else "failed",
            summary=f"asked to fail ({failure})",
            cost_usd=payload.get("cost_usd"),
        )
    report_file = Path("reports") / f"task-{os.environ['AGENTD_TASK_ID']}.md"
    report_file.parent.mkdir(parents=True, exist_ok=True)
    report_file.write_text(f"# {task_type}\n\n{payload.get('note', 'done')}\n", encoding="utf-8")
    artifacts = [str(report_file)]
    if payload.get("write"):
        target = Path(payload["write"])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(payload.get("note", "written by the demo agent") + "\n", encoding="utf-8")
        artifacts.append(str(target))
    signal = {"plan": "ok", "execute": "ok", "verify": verify_signal(payload)}.get(task_type)
    return report(
        status="completed",
        machine_status="ok",
        summary=f"{task_type} done" + (f": {payload['note']}" if payload.get("note") else ""),
        artifact_paths=artifacts,
        workflow_signal=signal,
        cost_usd=payload.get("cost_usd"),
    )


def verify_signal(payload: dict) -> str:
    """complete once execute has run `iterations` times (default 1).

    Iterations count state entries: plan is 1, then each execute/verify pair adds 2, so the
    verify after the k-th execute is iteration 2k + 1.
    """
    iteration = int(os.environ.get("AGENTD_WORKFLOW_ITERATION", "1"))
    return "complete" if iteration >= 2 * int(payload.get("iterations", 1)) + 1 else "continue"


def report(*, status, machine_status, summary, artifact_paths=(), workflow_signal=None, cost_usd=None) -> int:
    outcome = {"status": status, "machine_status": machine_status, "operator_summary": summary}
    if cost_usd is not None:
        outcome["usage"] = {"cost_usd": cost_usd, "input_tokens": 0, "output_tokens": 0}
    if artifact_paths:
        outcome["artifact_paths"] = list(artifact_paths)
    if workflow_signal:
        outcome["workflow_signal"] = workflow_signal
    Path(os.environ["AGENTD_RESULT_PATH"]).write_text(json.dumps(outcome), encoding="utf-8")
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
