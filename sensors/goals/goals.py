#!/usr/bin/env python3
"""Watches <workspace>/goals/*.txt: each file is a goal; its name is the workflow's instance key."""

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path

goals = Path(os.environ["AGENTD_WORKSPACE"]) / "goals"
now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
for path in sorted(goals.glob("*.txt")) if goals.is_dir() else []:
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
