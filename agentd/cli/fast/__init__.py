"""The CLI's fast path: `status`, `task add`, `approvals`, `approve` and `deny` answered without pydantic from a
cached view of the config (docs/decisions.md, "Start-up": why a second path remains, and what it costs), and
the view every reading command reads the config by (view.py, cache.py). `events`, `task list` and `task show`
have one path: the view and the store's own plain records (docs/decisions.md, "One shape per fact").
"""
