#!/usr/bin/env python3
"""One event per UTC hour; the hour is the dedupe key, so five-minute runs create one task an hour."""

import json
from datetime import UTC, datetime, timedelta

now = datetime.now(UTC)
hour = now.replace(minute=0, second=0, microsecond=0)
print(json.dumps({
    "event_id": f"heartbeat:{hour:%Y-%m-%dT%H}",
    "observed_at": now.isoformat().replace("+00:00", "Z"),
    "source_ref": "clock",
    "dedupe_key": f"{hour:%Y-%m-%dT%H}",
    "freshness_deadline": (hour + timedelta(hours=1)).isoformat().replace("+00:00", "Z"),
    "payload": {},
    "proposed_task": {"task_type": "example", "source": "heartbeat", "subject": f"heartbeat {hour:%Y-%m-%d %H}:00",
                      "priority": 9, "payload": {"note": "still here"}},
}))
