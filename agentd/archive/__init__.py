"""The evidence archive off the VM (docs/backup-and-archive.md, "Archive", "Witnessed head"): every sealed attempt
folder uploaded to an S3-compatible bucket with its manifest hash, the event chain in segments and the chain head
witnessed there (and in the fleet's PostgreSQL), and the auditor's verify from the bucket alone.

May import: records, config, gateway, process, store, work, evidence, outlook, adapters, attempt, control.

May call: archive_due, archive_failed, archive_progress, chain_archived, chain_head, chain_rows, event_hash,
folders_archived, head_witnessed, latest_event_checkpoint, set_archiving.

Only agentd/archive/bucket.py imports boto3 (the `archive` extra), and only when an archive is used: a command that
does not touch one never loads it.
"""
