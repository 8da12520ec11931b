"""agentd's benchmark suite (`make bench`, `make bench-quick`): agentd measured side by side with
raw sqlite3, huey, persist-queue and a bare spawn; bench/run.py is the entry point."""
