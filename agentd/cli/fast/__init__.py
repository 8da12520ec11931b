"""The CLI's fast path: `task add`, `approve` and `deny` answered without pydantic from a cached view of the
config (docs/decisions.md, "Start-up": why a second path remains, and what it costs), and the view every
reading command reads the config by (view.py, cache.py). `status`, `events`, `task list`, `task show` and
`approvals` have one path: the view and the store's own plain records (docs/decisions.md, "One shape per fact").
"""
