"""A database older than what happened (docs/evidence.md, "A database older than what happened").

A restored backup, or a -wal lost after a crash, takes the database back to before work that already
ran: the attempts' evidence folders stay under attempts/, and the event chain falls behind the head the
services published outside the database (`<state_dir>/chain_head`, written after a durable commit at
every status refresh and attempt end; the journal's `chain_head` lines are the copy off the machine).
A service acting on it would run completed work again. So at start both services look for that
evidence and refuse to act (DatabaseBehind, exit 2) until the operator looks and accepts the rollback
(`agentd evidence accept-rollback`): an event records it, the folders no row names are moved aside
(kept, under rolled-back/), and the published head becomes this database's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from dataclasses import field
from datetime import datetime
from pathlib import Path
from typing import Any

from agentd import frozen_value
from agentd.clock import to_utc
from agentd.edge import whole_number
from agentd.errors import DatabaseBehind
from agentd.evidence.verify import parse_head
from agentd.process.files import hand_over, private_folders
from agentd.store import Store

logger = logging.getLogger(__name__)

HEAD_FILE = "chain_head"  # SEQ:HASH, as `agentd evidence verify --expect-head` takes it
SET_ASIDE = "rolled-back"  # <state_dir>/rolled-back/<time>/<task>/<attempt>: what an accepted rollback kept
SHOWN = 3  # folders named in the one line (all of them in the event)


def published_head(state_dir: Path) -> tuple[int, str] | None:
    """The head last published beside the database, or None (none yet, or unreadable: said in the log,
    since a file cut short by a power cut proves nothing either way)."""
    try:
        text = (state_dir / HEAD_FILE).read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        logger.warning("%s cannot be read (%s); the chain head is not checked", state_dir / HEAD_FILE, exc)
        return None
    try:
        return parse_head(text)
    except ValueError as exc:
        logger.warning("%s: %s; the chain head is not checked", state_dir / HEAD_FILE, exc)
        return None


def publish_head(state_dir: Path, head: tuple[int, str], *, force: bool = False) -> None:
    """Write `head` beside the database, durably (temp file, fsync, rename, folder fsync), unless the file
    already names a later one (the other service wrote it; `force`: an accepted rollback moves it back).
    Only a head a durable commit returned may be published: it must never be ahead of the database."""
    current = published_head(state_dir)
    if not force and current is not None and current[0] >= head[0]:
        return
    fd, temp = tempfile.mkstemp(dir=state_dir, prefix=f".{HEAD_FILE}.")
    try:
        hand_over(fd, state_dir)  # published by an operator as root: still the services' to read
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(f"{head[0]}:{head[1]}\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, state_dir / HEAD_FILE)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    folder = os.open(state_dir, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


@frozen_value
class Behind:
    """What says the database is older than what happened: attempt folders it does not name, and what is
    wrong with the chain head against the published one."""

    folders: list[Path] = field(default_factory=list)
    head: str | None = None
    published: tuple[int, str] | None = None

    def __bool__(self) -> bool:
        return bool(self.folders) or self.head is not None

    def describe(self) -> str:
        parts = []
        if self.folders:
            shown = ", ".join(str(f) for f in self.folders[:SHOWN]) + (", …" if len(self.folders) > SHOWN else "")
            parts.append(f"{len(self.folders)} attempt folder(s) no attempt in it names ({shown})")
        if self.head is not None:
            parts.append(self.head)
        return " and ".join(parts)


def find_rollback(store: Store, state_dir: Path) -> Behind:
    """The evidence that the database is older than what happened, or an empty Behind. The folders are
    listed before the rows are read: a running dispatcher commits an attempt's row before it makes the
    folder, so a folder listed first has its row by the time the rows are read."""
    folders = _attempt_folders(state_dir / "attempts")
    known = store.attempt_folder_keys()
    unknown = [path for key, path in folders if key not in known]
    published = published_head(state_dir)
    return Behind(unknown, _head_problem(store, published), published)


def refuse_if_behind(store: Store, state_dir: Path) -> None:
    """DatabaseBehind, in one line naming what was found and what to do, if the database is older than
    what happened; what a service calls before it acts at all (nothing is written either way)."""
    behind = find_rollback(store, state_dir)
    if behind:
        raise DatabaseBehind(
            f"{store.path}: the database is older than what happened (a restored backup? a lost -wal?): "
            f"{behind.describe()}; nothing was done. Look first (`agentd evidence verify`, `agentd task list`), "
            "then `agentd evidence accept-rollback --reason TEXT` to go on from this database"
        )


@frozen_value
class AcceptedRollback:
    behind: Behind
    moved_to: Path | None  # where the folders went (relative to the state dir), None if there were none
    head: tuple[int, str] | None  # the head published now


def accept_rollback(store: Store, state_dir: Path, *, by: str, reason: str, now: datetime) -> AcceptedRollback:
    """The operator looked and goes on from this database: `rollback_accepted` records what was found,
    who and why; the folders no row names move to rolled-back/<time>/ (kept for an auditor, out of the
    way of the next check); the published head becomes this database's. Nothing to accept: nothing done."""
    behind = find_rollback(store, state_dir)
    if not behind:
        return AcceptedRollback(behind, None, published_head(state_dir))
    moved_to = Path(SET_ASIDE) / to_utc(now).strftime("%Y%m%dT%H%M%S%fZ") if behind.folders else None
    store.record_event("rollback_accepted", now, _payload(behind, moved_to, by, reason, store.chain_head()))
    for folder in behind.folders:  # recorded first: an accept cut short is found, and finished, by the next
        target = state_dir / (moved_to or "") / folder.parent.name / folder.name
        private_folders(target.parent, state_dir)  # the services' even when root accepts
        os.rename(folder, target)
    head = store.chain_head()
    if head is not None:
        publish_head(state_dir, head, force=True)
    return AcceptedRollback(behind, moved_to, head)


def _payload(
    behind: Behind, moved_to: Path | None, by: str, reason: str, head: tuple[int, str] | None
) -> dict[str, Any]:
    return {
        "by": by,
        "reason": reason,
        "folders": len(behind.folders),
        "folder_names": [f"{f.parent.name}/{f.name}" for f in behind.folders[:200]],
        "moved_to": str(moved_to) if moved_to else None,
        "head_problem": behind.head,
        "published_head": f"{behind.published[0]}:{behind.published[1]}" if behind.published else None,
        "database_head": f"{head[0]}:{head[1]}" if head else None,
    }


def _attempt_folders(root: Path) -> list[tuple[tuple[int, str], Path]]:
    """((task id, attempt id), path) of every folder attempts/<task>/<attempt>, by name."""
    found = []
    for task_dir in _entries(root):
        task_id = whole_number(task_dir.name)
        if task_id is not None:
            found += [((task_id, a.name), Path(a.path)) for a in _entries(Path(task_dir.path))]
    return found


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as entries:
            return sorted((e for e in entries if e.is_dir(follow_symlinks=False)), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _head_problem(store: Store, published: tuple[int, str] | None) -> str | None:
    """What is wrong with the chain against the head published outside the database, or None."""
    if published is None:
        return None
    sequence, wanted = published
    found = store.event_hash(sequence)
    if found == wanted:
        return None
    if found is not None:
        return f"event {sequence} is not the one agentd published ({found[:12]}…; {HEAD_FILE} says {wanted[:12]}…)"
    checkpoint = store.latest_event_checkpoint()
    if checkpoint is not None and sequence <= checkpoint.through_sequence:  # pruned: only its end can be checked
        if sequence < checkpoint.through_sequence or checkpoint.through_hash == wanted:
            return None
        return f"event {sequence} is not the one agentd published (pruned through it with another hash)"
    head = store.chain_head()
    last = head[0] if head else 0
    if sequence > last:
        return f"the event chain ends at event {last} where agentd published {sequence}:{wanted[:12]}… ({HEAD_FILE})"
    return f"event {sequence}, which agentd published, is missing from the chain"
