"""The long-running services: the dispatcher, the sensor service and its runs, the shell they share
(systemd, status, the metrics endpoint), the dispatch lock, the fleet intake, and the keyless demo model
(`agentd demo-model`).

May import: records, config, gateway, process, store, work, evidence, outlook, adapters, attempt, control.
"""
