"""Every metric agentd exports, in one table: its name, type, labels, which service serves it and what it
means. agentd/outlook/metrics.py makes each one from its entry here, and docs/metrics.md is written from the
same table (`reference`), so the documentation cannot drift from what a scrape shows."""

from __future__ import annotations

from typing import Literal

from agentd import frozen_value

Kind = Literal["gauge", "counter", "histogram", "info"]


@frozen_value
class Spec:
    name: str  # as created; a counter is exposed with `_total`, info with `_info`
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    served_by: Literal["both", "dispatch", "sensors"] = "both"  # `both`: read from the database at scrape time

    @property
    def exposed(self) -> str:
        return self.name + {"counter": "_total", "info": "_info"}.get(self.kind, "")


# Read from the database at scrape time by either service (both agree).
TASKS = Spec("agentd_tasks", "gauge", "Tasks in the queue by status", ("status",))
TASKS_WAITING = Spec(
    "agentd_tasks_waiting",
    "gauge",
    "Waiting tasks by why, one reason each (they sum to pending + retryable_failure): claimable now, waiting for "
    "a retry's backoff, delayed (--delay/--at), held for an approval, paused by an operator, after a task not yet "
    "completed, held for the next day's budget, on a credential waiting for its provider's reset (resting)",
    ("reason",),
)
APPROVAL_OLDEST = Spec(
    "agentd_approval_oldest_age_seconds",
    "gauge",
    "How long the oldest approval request has waited for an operator (0 when none waits)",
)
TOOL_CALL_OLDEST = Spec(
    "agentd_tool_call_oldest_age_seconds",
    "gauge",
    "How long the oldest tool call held for a person has waited, its attempt paused (0 when none waits)",
)
BUDGET_SPENT = Spec(
    "agentd_budget_spent_usd",
    "gauge",
    "Spend of the current UTC day by adapter, as [budget] counts it (estimated=1: priced by agentd)",
    ("adapter", "estimated"),
)
BUDGET_HOLDING = Spec(
    "agentd_budget_holding",
    "gauge",
    "1 while past a daily cap of [budget]: less urgent tasks wait for the next UTC day",
)
PAUSED = Spec("agentd_dispatch_paused", "gauge", "1 while an operator has paused the dispatcher")
MESSAGES_FAILED = Spec(
    "agentd_messages_failed",
    "gauge",
    "External messages whose delivery failed for good and were not retried (`agentd outbox list --state failed`; "
    "`agentd outbox retry ID`)",
)
OLDEST_PENDING = Spec(
    "agentd_oldest_pending_task_age_seconds",
    "gauge",
    "How long the oldest claimable task has waited (0 when none waits); a task held for an approval or the "
    "budget is not claimable",
)
RUNNING_AGE = Spec(
    "agentd_running_attempt_age_seconds", "gauge", "How long the running attempt has run (0 when none runs)"
)
CHAIN_HEAD = Spec(
    "agentd_event_chain_head_sequence",
    "gauge",
    "The last event's sequence: a scrape history that later finds it lower means events were cut",
)
ARCHIVE_QUEUED = Spec(
    "agentd_archive_queue_length",
    "gauge",
    "Sealed attempt folders not yet uploaded to [archive]'s bucket (0 without an archive; docs/backup-and-archive.md)",
)
ARCHIVE_OLDEST = Spec(
    "agentd_archive_queue_oldest_age_seconds",
    "gauge",
    "How long the oldest sealed attempt folder not yet in the bucket has waited (0 when none waits)",
)
BACKUP_LAST = Spec(
    "agentd_backup_last_success_timestamp_seconds",
    "gauge",
    "When the last good `agentd backup` was taken, as Unix time (0: none recorded in this state dir)",
)
BACKUP_EVERY = Spec(
    "agentd_backup_interval_seconds",
    "gauge",
    "[backup] every in seconds (0: no schedule); the alert fires when the last good backup is older than twice it",
)
SERVICE_LIVE = Spec(
    "agentd_service_live",
    "gauge",
    "1 while the service's process runs and reports; 0 stale, down or stopped",
    ("service",),
)
SERVICE_QUIET = Spec(
    "agentd_service_heartbeat_age_seconds", "gauge", "Seconds since the service last updated its status", ("service",)
)
BUILD = Spec("agentd_build", "info", "agentd version and agent", ("version", "agent_id", "service"))

# Counted by the dispatcher.
ATTEMPTS = Spec(
    "agentd_attempts",
    "counter",
    "Attempts that ended, by adapter, outcome (completed, retryable_failure, permanent_failure, blocked, "
    "operator_canceled, rate_limited, interrupted, crashed_runtime) and the adapter's exit status",
    ("adapter", "outcome", "exit_status"),
    "dispatch",
)
ATTEMPT_DURATION = Spec(
    "agentd_attempt_duration_seconds", "histogram", "Wall-clock duration of attempts", ("adapter",), "dispatch"
)
COST = Spec(
    "agentd_cost_usd",
    "counter",
    "Model cost reported (or estimated) by the adapters, in USD",
    ("adapter", "model"),
    "dispatch",
)
TOKENS = Spec(
    "agentd_tokens",
    "counter",
    "Model tokens by kind (input, output, cache_read, cache_write)",
    ("adapter", "model", "kind"),
    "dispatch",
)
SCHEDULE_TASKS = Spec(
    "agentd_schedule_tasks_created", "counter", "Tasks enqueued by recurring schedules", ("schedule",), "dispatch"
)
WORKFLOW_MOVES = Spec(
    "agentd_workflow_transitions",
    "counter",
    "Workflow moves: transition, complete or block",
    ("workflow_type", "kind"),
    "dispatch",
)
LOCK_HELD = Spec(
    "agentd_dispatch_lock_held", "gauge", "1 while this dispatcher holds the dispatch lock", served_by="dispatch"
)
LAST_SUCCESS = Spec(
    "agentd_last_successful_attempt_timestamp_seconds",
    "gauge",
    "When an attempt last completed its task (unix time)",
    served_by="dispatch",
)
BOOT_SWEEP = Spec(
    "agentd_boot_sweep_reclaimed", "counter", "Attempts reclaimed by the boot sweep", served_by="dispatch"
)
MESSAGES = Spec(
    "agentd_messages",
    "counter",
    "External messages: each delivery attempt's result (delivered, retry, failed) by handler, and messages "
    "refused before any attempt (handler none)",
    ("handler", "outcome"),
    "dispatch",
)

# This agent's side of a fleet (docs/fleet.md), counted by the dispatcher that runs its intake. Shown
# once the intake has run. No `agent` label: the scrape job's target label names the agent on every series
# (an exported one would collide with it and come back as exported_agent; monitoring/README.md).
FLEET_LEASES = Spec(
    "agentd_fleet_leases_held",
    "gauge",
    "Fleet leases this agent holds: tasks it took from the fleet that wait, run or await their report",
    served_by="dispatch",
)
FLEET_CLAIMED = Spec(
    "agentd_fleet_claimed", "counter", "Fleet tasks this agent claimed (each with a new token)", served_by="dispatch"
)
FLEET_LOST = Spec(
    "agentd_fleet_lease_lost",
    "counter",
    "Fleet leases lost: the fleet refused this agent's token (the lease expired and the task went to another "
    "agent, or it was canceled); the local work does not count",
    served_by="dispatch",
)
FLEET_REPORTED = Spec(
    "agentd_fleet_reported",
    "counter",
    "Results written back to the fleet by status (completed, failed; refused: the task could not run here)",
    ("status",),
    "dispatch",
)
FLEET_CLAIM_SECONDS = Spec(
    "agentd_fleet_claim_seconds",
    "histogram",
    "How long a claim against the fleet's PostgreSQL took, found something or not",
    served_by="dispatch",
)
FLEET_REACHABLE = Spec(
    "agentd_fleet_reachable",
    "gauge",
    "1 while the fleet's PostgreSQL answered this agent's last request; 0 while it cannot be reached",
    served_by="dispatch",
)

# Counted by the sensor service.
SENSOR_RUNS = Spec(
    "agentd_sensor_runs",
    "counter",
    "Sensor runs by kind (ok, failed, timeout, start_failed, internal_error)",
    ("sensor", "result"),
    "sensors",
)
SENSOR_EVENTS = Spec(
    "agentd_sensor_events",
    "counter",
    "Sensor events by result (created, recorded, deduped, stale, rejected)",
    ("sensor", "result"),
    "sensors",
)

CATALOGUE: tuple[Spec, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Spec))

INTRO = """\
# Metrics

<!-- Generated from agentd/outlook/metric_specs.py, the table agentd makes its metrics from; do not edit by hand:
`make docs-reference` writes it again, and a test fails while the two differ. -->

Each service serves Prometheus metrics on its own loopback port (`[metrics]`; `agentd install` gives every
agent its own pair). The queue gauges are read from the database at scrape time, so both services report the
same numbers (take them with `max by (agent)`); counters count what happens inside the service that serves
them. The alert rules and the dashboard in `monitoring/` use only these.

| metric | type | served by | meaning |
|---|---|---|---|
"""


def reference() -> str:
    """The metrics table as Markdown (docs/metrics.md)."""
    rows = []
    for spec in CATALOGUE:
        labels = "{" + ",".join(spec.labels) + "}" if spec.labels else ""
        served = {"both": "both (from the database)", "dispatch": "dispatch", "sensors": "sensors"}[spec.served_by]
        meaning = spec.help.replace("|", "\\|")
        rows.append(f"| `{spec.exposed}{labels}` | {spec.kind} | {served} | {meaning} |")
    return INTRO + "\n".join(rows) + "\n"
