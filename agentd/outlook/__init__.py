"""What the agent is doing, as every reader sees it: status, the metrics and their catalogue, the read
model rebuilt from events, the Agent Runtime (seed 002) export.

May import: records, config, gateway, process, store, work, evidence.
"""
