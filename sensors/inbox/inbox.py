#!/usr/bin/env python3
"""Watches <workspace>/inbox/*.txt: one example task per file content (edit a file: a new task)."""

import hashlib
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

# $INBOX_DIR (sensor.toml's env), else <workspace>/inbox. Installed, a sensor cannot read the workspace (its user
# shares no group with the attempts'): give it a folder of its own to watch.
inbox = Path(os.environ.get("INBOX_DIR") or Path(os.environ["AGENTD_WORKSPACE"]) / "inbox")
try:
    found = sorted(inbox.glob("*.txt")) if inbox.is_dir() else []
except PermissionError:
    print(f"{inbox}: this sensor's user may not read it; set INBOX_DIR in sensor.toml's env", file=sys.stderr)
    found = []
now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
for path in found:
    text = path.read_text(encoding="utf-8", errors="replace")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    first_line = (text.strip().splitlines() or [""])[0][:200]
    event = {
        "event_id": f"{path.name}:{digest}",
        "observed_at": now,
        "source_ref": str(path),
        "dedupe_key": f"{path.name}:{digest}",
        "payload": {"file": path.name, "bytes": len(text)},
        "proposed_task": {
            "task_type": "example",
            "source": "inbox",
            "subject": f"inbox: {path.name}",
            "payload": {"note": first_line, "write": f"replies/{path.stem}.txt"},
        },
    }
    print(json.dumps(event))
