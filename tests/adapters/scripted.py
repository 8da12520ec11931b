#!/usr/bin/env python3
"""A test adapter driven by its payload: {"outcome": {...}, "stdout": "...", "sleep_s": N,
"files": {"path": "text"}, "exit": N, "env_dump": true, "once_marker": "path",
"stubborn": true (ignore SIGTERM, start a grandchild that ignores it too, write both pids to pids.txt)}."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

payload = json.loads(sys.stdin.read() or "{}")
marker = payload.get("once_marker")
if marker and not Path(marker).exists():
    Path(marker).write_text(os.environ["AGENTD_ATTEMPT_ID"])
    time.sleep(payload.get("sleep_first_s", 600))
if payload.get("stubborn"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    grandchild = subprocess.Popen([sys.executable, "-c", stubborn])
    Path("pids.txt").write_text(f"{os.getpid()} {grandchild.pid}")
for path, text in payload.get("files", {}).items():
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
if payload.get("env_dump"):
    print(json.dumps(dict(os.environ)))
if "stdout" in payload:
    print(payload["stdout"])
sys.stdout.flush()
time.sleep(payload.get("sleep_s", 0))
if "outcome" in payload:
    Path(os.environ["AGENTD_RESULT_PATH"]).write_text(json.dumps(payload["outcome"]))
sys.exit(payload.get("exit", 0))
