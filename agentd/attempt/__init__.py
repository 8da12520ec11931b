"""One attempt from claim to outcome: prepare (bundle, paths), run, judge, conclude (seal and commit),
the boot sweep of attempts a dead dispatcher left, and replay.

May import: records, config, gateway, process, store, work, evidence, outlook, adapters.
"""
