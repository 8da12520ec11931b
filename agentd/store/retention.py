"""Retention's SQL: the attempts whose evidence may go, marking it gone, and deleting finished tasks
nothing refers to any more. What is old enough is decided above (agentd/evidence/retention.py) and passed in."""

from __future__ import annotations

from datetime import datetime

from agentd import frozen_value
from agentd.records import TERMINAL_STATUSES
from agentd.store.base import StoreBase, ts

TERMINAL = ", ".join(f"'{status}'" for status in TERMINAL_STATUSES)
SHOWN_IDS = 100  # task ids an event names; the rest are counted

# A task may be deleted once it is finished (terminal) before the cutoff, is not a step of a workflow
# still running or resumable, has no events left after `through` (:through 0: none at all), no evidence
# left on disk (unless :evidence_cutoff says this pass would prune it), and no pending side effect or
# approval. Its sensor_events row stays (task_id cleared): the sensor's dedupe key is never freed.
DELETABLE_TASKS = f"""
    SELECT t.id FROM tasks t LEFT JOIN workflows w ON w.id = t.workflow_id
    WHERE t.finished_at < :cutoff AND t.status IN ({TERMINAL})
      AND (t.workflow_id IS NULL OR w.status IN ('completed', 'canceled'))
      AND NOT EXISTS (SELECT 1 FROM events e WHERE e.task_id = t.id AND e.sequence > :through)
      AND NOT EXISTS (SELECT 1 FROM task_attempts a WHERE a.task_id = t.id AND a.evidence_dir IS NOT NULL
                      AND a.evidence_pruned_at IS NULL
                      AND NOT (:evidence_cutoff IS NOT NULL AND t.finished_at < :evidence_cutoff))
      AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.task_id = t.id AND o.status IN ('pending', 'awaiting_handler'))
      AND NOT EXISTS (SELECT 1 FROM approvals p WHERE p.task_id = t.id AND p.status = 'pending')
      AND NOT EXISTS (SELECT 1 FROM fleet_leases f WHERE f.task_id = t.id AND f.state = 'held')
      AND NOT EXISTS (SELECT 1 FROM task_links l JOIN tasks a ON a.id = l.after_id
                      WHERE l.before_id = t.id AND a.status NOT IN ({TERMINAL}))
    ORDER BY t.id LIMIT :limit"""
TASK_ROWS = (  # children first: each statement leaves no row referring to a task about to go
    "DELETE FROM artifacts WHERE task_id = ?",
    "DELETE FROM outbox WHERE task_id = ?",
    "DELETE FROM approvals WHERE task_id = ?",
    "DELETE FROM fleet_leases WHERE task_id = ?",
    "DELETE FROM task_pauses WHERE task_id = ?",
    "DELETE FROM task_links WHERE after_id = ?1 OR before_id = ?1",
    "UPDATE sensor_events SET task_id = NULL WHERE task_id = ?",
    "DELETE FROM task_attempts WHERE task_id = ?",
    "DELETE FROM tasks WHERE id = ?",
)


@frozen_value
class PrunableEvidence:
    task_id: int
    attempt_id: str


class RetentionVerbs(StoreBase):
    def prunable_evidence(self, cutoff: datetime, limit: int = -1) -> list[PrunableEvidence]:
        """Ended attempts of tasks finished (terminal) before `cutoff` whose evidence is still on disk,
        oldest first; `limit` -1: all of them."""
        rows = self.tx.execute(
            f"""SELECT a.task_id, a.attempt_id FROM tasks t JOIN task_attempts a ON a.task_id = t.id
                WHERE t.finished_at < ? AND t.status IN ({TERMINAL}) AND a.ended_at IS NOT NULL
                  AND a.evidence_dir IS NOT NULL AND a.evidence_pruned_at IS NULL
                  AND NOT EXISTS (SELECT 1 FROM archive_queue q WHERE q.attempt_id = a.attempt_id)
                ORDER BY t.finished_at, a.attempt_id LIMIT ?""",
            (ts(cutoff), limit),
        ).fetchall()
        return [PrunableEvidence(r[0], r[1]) for r in rows]

    def mark_evidence_pruned(self, pruned: list[PrunableEvidence], now: datetime) -> None:
        """The attempts' evidence directories are gone: say when, and record it."""
        if not pruned:
            return
        with self.transaction():
            self.tx.executemany(
                "UPDATE task_attempts SET evidence_pruned_at = ? WHERE attempt_id = ? AND evidence_pruned_at IS NULL",
                [(ts(now), item.attempt_id) for item in pruned],
            )
            task_ids = sorted({item.task_id for item in pruned})
            self.tx.event(
                "evidence_pruned",
                now,
                payload={"attempts": len(pruned), "tasks": len(task_ids), "task_ids": task_ids[:SHOWN_IDS]},
            )

    def deletable_tasks(
        self, cutoff: datetime, *, through: int = 0, evidence_cutoff: datetime | None = None, limit: int = -1
    ) -> list[int]:
        """Finished tasks that may be deleted (DELETABLE_TASKS); `through` and `evidence_cutoff` say what
        this pass would prune first (for --dry-run)."""
        params = {"cutoff": ts(cutoff), "through": through, "evidence_cutoff": ts(evidence_cutoff), "limit": limit}
        return [r[0] for r in self.tx.execute(DELETABLE_TASKS, params).fetchall()]

    def delete_tasks(self, cutoff: datetime, now: datetime, limit: int = 500) -> list[int]:
        """Delete up to `limit` deletable tasks with their attempts, artifacts, settled outbox rows and
        approvals, in one transaction that checks again that each still may go."""
        with self.transaction():
            params = {"cutoff": ts(cutoff), "through": 0, "evidence_cutoff": None, "limit": limit}
            task_ids = [r[0] for r in self.tx.execute(DELETABLE_TASKS, params).fetchall()]
            if not task_ids:
                return []
            for statement in TASK_ROWS:
                self.tx.executemany(statement, [(task_id,) for task_id in task_ids])
            self.tx.event(
                "tasks_pruned",
                now,
                payload={
                    "removed": len(task_ids),
                    "finished_before": ts(cutoff),
                    "task_ids": task_ids[:SHOWN_IDS],
                },
            )
        return task_ids
