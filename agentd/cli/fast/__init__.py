"""The CLI's fast path: `status`, `task add`, `task list`, `task show`, `events`, `approvals`, `approve` and
`deny` answered without pydantic from a cached view of the config (docs/decisions.md, "Start-up": why a
second path remains, and what it costs). Everything of it is in this room: the view and its key
(view.py, cache.py), the commands (commands.py) and the rows they print (events.py, tasks.py); the
rows themselves are read and written by agentd/store/plain.py, which the full path shares.
"""
