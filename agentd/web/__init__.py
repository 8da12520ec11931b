"""`agentd web`: the HTTP API and the operator console (docs/web.md), served by hypercorn inside anyio
beside (or apart from) the dispatcher and the sensor service.

May import: records, config, gateway, process, store, work, evidence, outlook, adapters, attempt, control, archive,
services.

May call: approval_context, approvals_not_handed_off, attempt_spans, attempts_by_task, attempts_of,
calls_not_handed_off, cost_per_day, due_handoffs, event_frames, event_page, event_rows, finish_handoff_attempt,
follow_ups_of, get_task_or_raise, get_workflow_or_raise, handoff_of, held_call, last_event_sequence, links_of,
list_workflows, outcomes_per_hour, outcomes_per_minute, pending_approvals, pending_calls, read_events, record_handoff,
report_service_status, snapshot, task_pause, task_spans, tasks_matching, transaction, web_token, workflow_steps.
"""
