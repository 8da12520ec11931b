#!/usr/bin/env python3
"""A stand-in for claude-code, codex or a script that shows what it does while it runs (docs/live.md).

$LIVE_DIR holds its script: `before.jsonl` (lines it writes to stdout — or, run as a script, appends to
$AGENTD_PROGRESS_PATH — one at a time, flushed), then it waits (at most 30 s) for `release` to exist in
that folder (the test makes it once it has seen the live events), then writes `after.jsonl` to stdout and
exits 0. A script run writes its outcome to $AGENTD_RESULT_PATH."""

import json
import os
import sys
import time
from pathlib import Path

if "--version" in sys.argv:
    print("2.1.197 (Claude Code)")
    sys.exit(0)
sys.stdin.read()
folder = Path(os.environ["LIVE_DIR"])
as_script = "exec" not in sys.argv and "-p" not in sys.argv
progress = open(os.environ["AGENTD_PROGRESS_PATH"], "a") if as_script else sys.stdout  # noqa: SIM115
for line in (folder / "before.jsonl").read_text().splitlines(keepends=True):
    progress.write(line)
    progress.flush()
deadline = time.monotonic() + 30
while not (folder / "release").exists() and time.monotonic() < deadline:
    time.sleep(0.02)
after = folder / "after.jsonl"
sys.stdout.write(after.read_text() if after.exists() else "")
if as_script:
    outcome = {"status": "completed", "machine_status": "ok", "operator_summary": "showed its progress"}
    Path(os.environ["AGENTD_RESULT_PATH"]).write_text(json.dumps(outcome))
