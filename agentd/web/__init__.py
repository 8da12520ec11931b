"""`agentd web`: the HTTP API and the operator console (docs/web.md), served by hypercorn inside anyio
beside (or apart from) the dispatcher and the sensor service.

May import: records, config, gateway, process, store, work, evidence, outlook, adapters, attempt, control, services.
"""
