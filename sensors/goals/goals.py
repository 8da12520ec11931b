#!/usr/bin/env python3
"""Watches <workspace>/goals/*.txt: each file is a goal; its name is the workflow's instance key."""

import hashlib
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

# $GOALS_DIR (sensor.toml's env), else <workspace>/goals. Installed, a sensor cannot read the workspace (its user
# shares no group with the attempts'): give it a folder of its own to watch.
goals = Path(os.environ.get("GOALS_DIR") or Path(os.environ["AGENTD_WORKSPACE"]) / "goals")
try:
    found = sorted(goals.glob("*.txt")) if goals.is_dir() else []
except PermissionError:
    print(f"{goals}: this sensor's user may not read it; set GOALS_DIR in sensor.toml's env", file=sys.stderr)
    found = []
now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
for path in found:
    text = path.read_text(encoding="utf-8", errors="replace").strip()
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    print(json.dumps({
        "event_id": f"goal:{path.stem}:{digest}",
        "observed_at": now,
        "source_ref": str(path),
        "dedupe_key": f"goal:{path.stem}",
        "payload": {"file": path.name},
        "proposed_workflow": {"template": "goal-loop", "instance_key": path.stem,
                              "context": {"goal": text[:4000], "iterations": 2}},
    }))
