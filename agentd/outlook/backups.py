"""The last good backup (docs/backup-and-archive.md, "Schedule"): when, where, how big, and the schedule it
was taken on, in a small private file in the state dir that `agentd status`, the console and the metrics read.
Plain (no records): the CLI's fast path reads it too."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from agentd.clock import format_ts, parse_ts

LAST_BACKUP = "backup_last.json"


def record_success(state_dir: Path, backup_id: str, at: datetime, dest: str, size: int, every_s: float | None) -> None:
    """Write the record whole (a temporary name, then a rename), 0600."""
    from agentd.process.files import hand_over  # only a backup writes it: status, which reads it, stays light

    body = {"backup_id": backup_id, "at": format_ts(at), "dest": dest, "bytes": size, "every_s": every_s}
    path = state_dir / LAST_BACKUP
    partial = path.with_name(f".{LAST_BACKUP}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    hand_over(fd, state_dir)  # a backup run as root: still the services' to read (status, metrics)
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(body) + "\n")
    os.replace(partial, path)


def last_backup(state_dir: Path, now: datetime) -> dict[str, Any] | None:
    """The last good backup as status shows it (its age, and `overdue` once it is older than twice its
    schedule); None when there is none, or the record cannot be read."""
    try:
        fd = os.open(state_dir / LAST_BACKUP, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            body = json.loads(handle.read(64 * 1024))
        at = parse_ts(body["at"])
        every = body.get("every_s")
        every = float(every) if isinstance(every, int | float) and every > 0 else None
        shown = {"backup_id": str(body["backup_id"]), "at": format_ts(at), "dest": str(body["dest"])}
        size = int(body["bytes"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    age_s = max(0.0, (now - at).total_seconds())
    overdue = every is not None and age_s > 2 * every
    return {**shown, "bytes": size, "every_s": every, "age_s": round(age_s, 1), "overdue": overdue}
