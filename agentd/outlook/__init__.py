"""What the agent is doing, as every reader sees it: status, the metrics and their catalogue, the read
model rebuilt from events, the Agent Runtime (seed 002) export.

May import: records, config, gateway, process, store, work, evidence.

May call: archive_queue, attempts_by_task, boundary_waiver, budget_held_ids, budget_waiting, chain_head, deliveries_of,
dispatch_lock_holder, dispatch_pause, failed_message_count, follow_ups_of, get_task_or_raise, idle_outlook, links_of,
list_tasks, pending_approvals, pending_calls, queue_summary, read_events, recent_violations, resting_credentials,
running_now, service_statuses, snapshot, spend_since.
"""
