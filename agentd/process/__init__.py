"""The operating system's side: spawning and containing processes, finding and signalling them, who an
attempt runs as, the files between the service and its attempts, the doorbell that wakes a service.

May import: records, config, gateway.
"""
