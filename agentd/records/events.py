"""Runtime events (seed 000 §14 names, seed 002 envelope), chained by hash (docs/design.md, "Events")."""

from __future__ import annotations

from typing import Literal

from agentd.records.base import JsonObject, Record, Timestamp

# Seed 000 §14, exactly, then the events agentd adds in the same snake_case.
SEED_EVENT_TYPES = (
    "task_enqueued",
    "task_claimed",
    "bundle_compiled",
    "task_retry_scheduled",
    "task_attempt_finished",
    "task_started",
    "task_finished",
    "schedule_upserted",
    "schedule_task_created",
    "sensor_event_recorded",
    "sensor_event_deduped",
    "sensor_task_created",
    "sensor_workflow_created",
    "sensor_workflow_deduped",
    "workflow_transitioned",
    "workflow_completed",
    "workflow_task_created",
    "dispatch_idle",
    "dispatch_locked",
    "boot_sweep_reclaimed",
    "dispatch_lock_stale_cleared",
)
# What a running attempt is doing, written while it runs (docs/live.md); each has task_id and attempt_id.
LIVE_EVENT_TYPES = (
    "tool_started",
    "tool_finished",
    "model_turn_completed",
    "todos_updated",
    "attempt_progress",
    "activity_capped",
)
AGENTD_EVENT_TYPES = (
    "migration_applied",
    "task_cancel_requested",
    "task_requeued",
    "outcome_downgraded",
    "artifact_recorded",
    "outbox_applied",
    "outbox_refused",
    "message_delivery_started",
    "message_delivery_attempted",
    "message_delivered",
    "message_delivery_failed",
    "message_retry_requested",
    "workflow_started",
    "workflow_blocked",
    "schedule_removed",
    "schedule_task_refused",
    "schedule_slot_skipped",
    "sensor_event_rejected",
    "sensor_event_stale",
    "sensor_run_finished",
    "sensor_run_reclaimed",
    "dispatch_started",
    "dispatch_stopped",
    "evidence_pruned",
    "events_pruned",
    "tasks_pruned",
    "sensor_logs_pruned",
    "retention_failed",
    "constitution_proposed",
    "constitution_accepted",
    "constitution_rejected",
    "approval_requested",
    "approval_resolved",
    "dispatch_paused",
    "dispatch_resumed",
    "budget_held",
    "policy_denied",
    "workflow_signaled",
    "workflow_unblocked",
    "workflow_canceled",
    "rollback_accepted",
    "fleet_task_deferred",
    "fleet_result_reported",
    "fleet_lease_lost",
    *LIVE_EVENT_TYPES,
    "web_token_added",
    "web_token_revoked",
    "approval_handed_off",
    "approval_handoff_failed",
    "approval_handoff_retrying",
)
EVENT_TYPES = SEED_EVENT_TYPES + AGENTD_EVENT_TYPES


class RuntimeEvent(Record):
    """seed 000 §14 names in the seed 002 envelope, chained by hash (docs/design.md, "Events")."""

    schema_id = "agent-runtime/runtime.event/v1"
    event_id: str
    type: Literal[EVENT_TYPES]  # type: ignore[valid-type]
    timestamp: Timestamp
    sequence: int
    schema_version: int
    task_id: int | None
    attempt_id: str | None
    workflow_id: int | None
    schedule_id: str | None
    sensor_id: str | None
    payload: JsonObject
    refs: JsonObject
    prev_hash: str
    hash: str
