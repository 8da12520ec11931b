"""The long-running services: the dispatcher, the sensor service and its runs, the shell they share
(systemd, status, the metrics endpoint), the dispatch lock, the fleet intake, and the keyless demo model
(`agentd demo-model`).

May import: records, config, gateway, process, store, work, evidence, outlook, adapters, attempt, control, archive.

May call: acquire_dispatch_lock, begin_sensor_run, chain_head, claim_next_task, create_step_tasks, defer_fleet_tasks,
dispatch_lock_holder, drop_fleet_leases, due_schedules, find_workflow, finish_sensor_run, fleet_lease_lost,
fleet_lease_reported, fleet_leases_confirmed, fleet_leases_held, fleet_task_facts, heartbeat_dispatch_lock,
last_successful_attempt_at, open_sensor_runs, reclaim_sensor_run, record_event, record_fleet_claims,
record_provider_reset, record_schedule_runs, record_sensor_events, release_dispatch_lock, report_service_status,
resting_credentials, sealed_manifests, sensor_states, tick_intents, upsert_config_schedules, workflows_awaiting_step.
"""
