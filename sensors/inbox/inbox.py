#!/usr/bin/env python3
"""Watches <workspace>/inbox/*.txt: one example task per file content (edit a file: a new task)."""

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path

inbox = Path(os.environ["AGENTD_WORKSPACE"]) / "inbox"
now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
for path in sorted(inbox.glob("*.txt")) if inbox.is_dir() else []:
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
