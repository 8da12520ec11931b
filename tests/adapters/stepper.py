#!/usr/bin/env python3
"""A workflow step that answers with the signal its workflow context scripts for it.

Context (the step's payload): {"answers": {"verify": ["continue", "complete"], ...}, "fail": "execute"}.
The n-th time a state runs in a workflow it answers answers[state][n-1] (the last one repeats;
"ok" if the state has no answers; null to give no signal). A state named in "fail" fails permanently.
"""

import json
import os
import sys
from pathlib import Path

payload = json.loads(sys.stdin.read() or "{}")
state = os.environ["AGENTD_WORKFLOW_STATE"]
counter = Path(f".stepper-{os.environ['AGENTD_WORKFLOW_ID']}-{state}")
runs = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(runs))
if payload.get("fail") == state:
    outcome = {"status": "permanent_failure", "machine_status": "failed", "operator_summary": f"{state} failed"}
else:
    answers = payload.get("answers", {}).get(state, ["ok"])
    signal = answers[min(runs, len(answers)) - 1]
    outcome = {"status": "completed", "machine_status": "ok", "operator_summary": f"{state} #{runs}: {signal}"}
    if signal is not None:
        outcome["workflow_signal"] = signal
Path(os.environ["AGENTD_RESULT_PATH"]).write_text(json.dumps(outcome))
