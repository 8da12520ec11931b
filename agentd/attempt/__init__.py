"""One attempt from claim to outcome: prepare (bundle, paths), run, judge, conclude (seal and commit),
the boot sweep of attempts a dead dispatcher left, and replay.

May import: records, config, gateway, process, store, work, evidence, outlook, adapters.

May call: bundle_history, cancel_requested, close_calls, decide_call, end_attempt, get_attempt, get_task_or_raise,
get_workflow_or_raise, held_call, hold_call, mark_attempt_started, record_activity, record_bundle, record_call,
record_egress, record_gate_event, record_model_call, running_attempts, sealed_manifests, spend_since.
"""
