"""Backup and restore (docs/backup-and-archive.md): a consistent snapshot of one agent (its database by SQLite's
online backup, its sealed evidence, its config and chain head, a manifest of sha256s) and the restore that
checks every hash before it writes. The last good backup is recorded for status, the console and the metrics.

May import: records, config, gateway, process, store, work, evidence, outlook, adapters, attempt, control, archive,
services, web.

May call: backup_attempts, chain_head, dispatch_lock_holder, forget_services, relocate_evidence_dirs, sealed_manifests,
service_statuses.
"""
