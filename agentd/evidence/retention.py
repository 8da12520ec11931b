"""Retention ([retention], docs/operate.md, "Retention"): what agentd deletes once it is old enough, in this order —
the evidence of finished tasks, sensors' stale logs, the oldest events (as a prefix the chain continues
from), then finished tasks nothing refers to any more. Nothing of a task that is still live goes.

`apply_retention` runs on the store's thread (the sensor service calls it through AsyncStore, `agentd
prune` directly). The service's passes are `bounded`, so it never holds the database for long; a pass
that stopped at its bound says `more`, and the next one follows soon.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from agentd import frozen_value
from agentd.clock import format_ts
from agentd.config import Config
from agentd.config.settings import RetentionSection
from agentd.evidence import attempt_paths
from agentd.store import PrunableEvidence, Store

logger = logging.getLogger(__name__)

MARK_BATCH = 500  # evidence directories marked per transaction
EVENT_BATCH = 50_000  # events removed per transaction
TASK_BATCH = 500  # tasks deleted per transaction
BOUNDED_EVIDENCE = 2 * MARK_BATCH  # a bounded pass: this many evidence directories, one batch of events and
BOUNDED_EVENTS = EVENT_BATCH  # one of tasks (each a short transaction)
BOUNDED_TASKS = TASK_BATCH
SENSOR_LOGS = ("stdout.log", "stderr.log")  # a sensor's last run; its state/ folder is the sensor's own


@frozen_value
class Cutoffs:
    """Per kind, what is older than this may go; None keeps that kind forever."""

    evidence: datetime | None
    sensor_logs: datetime | None
    events: datetime | None
    tasks: datetime | None

    @classmethod
    def configured(cls, section: RetentionSection, now: datetime) -> Cutoffs:
        def ago(days: int) -> datetime | None:
            return now - timedelta(days=days) if days else None

        return cls(
            ago(section.evidence_days), ago(section.sensor_logs_days), ago(section.events_days), ago(section.tasks_days)
        )

    @classmethod
    def before(cls, moment: datetime) -> Cutoffs:
        """One cutoff for every kind (`agentd prune --before`)."""
        return cls(moment, moment, moment, moment)


@dataclass
class RetentionReport:
    cutoffs: Cutoffs
    dry_run: bool
    evidence_dirs: int = 0
    evidence_failed: list[str] = field(default_factory=list)  # directories that could not be deleted
    sensor_logs: int = 0
    events: int = 0
    events_through: int = 0
    tasks: int = 0
    more: bool = False  # the pass stopped at its limit: more is old enough

    @property
    def removed(self) -> int:
        return self.evidence_dirs + self.sensor_logs + self.events + self.tasks

    def as_dict(self) -> dict[str, Any]:
        cutoff = {k: None if v is None else format_ts(v) for k, v in vars(self.cutoffs).items()}
        return {
            "dry_run": self.dry_run,
            "evidence": {
                "attempts": self.evidence_dirs,
                "older_than": cutoff["evidence"],
                "failed": self.evidence_failed,
            },
            "sensor_logs": {"files": self.sensor_logs, "older_than": cutoff["sensor_logs"]},
            "events": {"removed": self.events, "through_sequence": self.events_through, "older_than": cutoff["events"]},
            "tasks": {"removed": self.tasks, "older_than": cutoff["tasks"]},
            "more": self.more,
        }


def apply_retention(
    store: Store, config: Config, cutoffs: Cutoffs, now: datetime, *, dry_run: bool = False, bounded: bool = False
) -> RetentionReport:
    """Delete what is older than the cutoffs (dry_run: only count it); `bounded`: one pass's worth."""
    report = RetentionReport(cutoffs, dry_run)
    if cutoffs.evidence is not None:
        _prune_evidence(store, config, cutoffs.evidence, now, report, BOUNDED_EVIDENCE if bounded else -1)
    if cutoffs.sensor_logs is not None:
        _prune_sensor_logs(store, config.paths.state_dir, cutoffs.sensor_logs, now, report)
    if cutoffs.events is not None:
        _prune_events(store, cutoffs.events, now, report, BOUNDED_EVENTS if bounded else -1)
    if cutoffs.tasks is not None:
        _prune_tasks(store, cutoffs.tasks, cutoffs.evidence, now, report, BOUNDED_TASKS if bounded else -1)
    return report


def _prune_evidence(
    store: Store, config: Config, cutoff: datetime, now: datetime, report: RetentionReport, limit: int
) -> None:
    candidates = store.prunable_evidence(cutoff, limit)
    report.more |= len(candidates) == limit > 0
    if report.dry_run:
        report.evidence_dirs = len(candidates)
        return
    root = config.paths.state_dir / "attempts"
    for offset in range(0, len(candidates), MARK_BATCH):
        pruned = []
        for item in candidates[offset : offset + MARK_BATCH]:
            problem = delete_evidence(root, item)
            if problem:
                logger.warning("evidence of attempt %s not deleted: %s", item.attempt_id, problem)
                report.evidence_failed.append(problem)
            else:
                pruned.append(item)
        store.mark_evidence_pruned(pruned, now)
        report.evidence_dirs += len(pruned)


def delete_evidence(root: Path, item: PrunableEvidence) -> str | None:
    """Delete one attempt's evidence directory (where agentd keeps it: the row's own path is not
    trusted); None when it is gone, else why not. An empty task folder goes with its last attempt."""
    if item.attempt_id in ("", ".", "..") or "/" in item.attempt_id or "\x00" in item.attempt_id:
        return f"attempt id {item.attempt_id!r} is not a folder name"
    directory = attempt_paths(root.parent, item.task_id, item.attempt_id).root
    if directory.parent.is_symlink():
        return f"{directory.parent} is a symbolic link, not agentd's folder"
    try:
        if directory.is_symlink() or directory.is_file():
            directory.unlink()
        elif directory.exists():
            shutil.rmtree(directory)
    except OSError as exc:
        return f"{directory}: {exc.strerror or exc}"
    with contextlib.suppress(OSError):  # other attempts still there, or already gone
        directory.parent.rmdir()
    return None


def _prune_sensor_logs(store: Store, state_dir: Path, cutoff: datetime, now: datetime, report: RetentionReport) -> None:
    """A sensor's last stdout/stderr, once older than the cutoff (a sensor that no longer runs)."""
    old, oldest = [], cutoff.timestamp()
    for path in sorted(p for name in SENSOR_LOGS for p in (state_dir / "sensors").glob(f"*/{name}")):
        try:
            if path.is_file() and path.stat().st_mtime < oldest:
                if not report.dry_run:
                    path.unlink()
                old.append(path)
        except OSError as exc:
            logger.warning("sensor log %s not deleted: %s", path, exc)
    report.sensor_logs = len(old)
    if old and not report.dry_run:
        sensors = sorted({path.parent.name for path in old})
        store.record_event("sensor_logs_pruned", now, {"files": len(old), "sensors": sensors[:100]})


def _prune_events(store: Store, cutoff: datetime, now: datetime, report: RetentionReport, limit: int) -> None:
    prefix = store.prunable_event_prefix(cutoff)
    if report.dry_run or not prefix.count:
        report.events, report.events_through = prefix.count, prefix.through
        return
    budget = prefix.count if limit < 0 else min(prefix.count, limit)
    while report.events < budget:
        checkpoint = store.prune_events(prefix.through, now, min(EVENT_BATCH, budget - report.events))
        if checkpoint is None:
            break
        report.events += checkpoint.removed
        report.events_through = checkpoint.through_sequence
    report.more |= report.events_through < prefix.through


def _prune_tasks(
    store: Store, cutoff: datetime, evidence: datetime | None, now: datetime, report: RetentionReport, limit: int
) -> None:
    if report.dry_run:  # as if this pass had pruned the events and evidence it counted
        found = store.deletable_tasks(cutoff, through=report.events_through, evidence_cutoff=evidence, limit=limit)
        report.tasks = len(found)
        return
    while limit < 0 or report.tasks < limit:
        batch = TASK_BATCH if limit < 0 else min(TASK_BATCH, limit - report.tasks)
        deleted = store.delete_tasks(cutoff, now, batch)
        report.tasks += len(deleted)
        if len(deleted) < batch:
            return
    report.more = True
