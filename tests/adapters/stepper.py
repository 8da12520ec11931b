#!/usr/bin/env python3
"""A workflow step that answers with the signal its workflow context scripts for it.

Context (the step's payload): {"answers": {"verify": ["continue", "complete"], ...}, "fail": "execute"}.
The n-th time a state runs in a workflow it answers answers[state][n-1] (the last one repeats;
"ok" if the state has no answers; null to give no signal). A state named in "fail" fails permanently.
tests/inprocess.py uses `step_outcome` too, so both tiers run one rule.
"""

import json
import os
import sys
from pathlib import Path
from typing import Any


def step_outcome(payload: dict[str, Any], state: str, runs: int) -> dict[str, Any]:
    if payload.get("fail") == state:
        return {"status": "permanent_failure", "machine_status": "failed", "operator_summary": f"{state} failed"}
    answers = payload.get("answers", {}).get(state, ["ok"])
    signal = answers[min(runs, len(answers)) - 1]
    outcome = {"status": "completed", "machine_status": "ok", "operator_summary": f"{state} #{runs}: {signal}"}
    if signal is not None:
        outcome["workflow_signal"] = signal
    return outcome


def count_run(workspace: str | Path, workflow_id: str, state: str) -> int:
    counter = Path(workspace) / f".stepper-{workflow_id}-{state}"
    runs = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(runs))
    return runs


if __name__ == "__main__":
    payload = json.loads(sys.stdin.read() or "{}")
    state = os.environ["AGENTD_WORKFLOW_STATE"]
    runs = count_run(".", os.environ["AGENTD_WORKFLOW_ID"], state)
    Path(os.environ["AGENTD_RESULT_PATH"]).write_text(json.dumps(step_outcome(payload, state, runs)))
