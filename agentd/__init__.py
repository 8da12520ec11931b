"""agentd: an agent runtime with a durable SQLite queue, one verified attempt at a time."""

__version__ = "0.1.0"
