"""What a task is and becomes, as rules: admission (intake), what a tick acts on (intents), workflows'
transitions, and the whole configuration's cross-check (`load_config`).

May import: records, config, gateway, process, store.

May call: enqueue_tasks.
"""
