#!/usr/bin/env python3
"""A claude-code stand-in for the chaos harness (tests/chaos.py): a stream-json session whose result
record reports poisoned usage — Infinity, a negative or absurd cost, text and lists where numbers go —
among lines no parser can use (a string message, a line nested 200k deep). Its work completes: agentd
must record it completed with its usage unknown (docs/adapters.md, "Usage and cost")."""

import json
import os
import random
import sys

POISON = ['"1e999"', "Infinity", "-Infinity", "NaN", "1e999", "-1000", "1" + "0" * 30, '"lots"', "[1, 2]"]

if "--version" in sys.argv:
    print("2.1.197 (Claude Code)")
    sys.exit(0)
sys.stdin.read()
rng = random.Random(os.environ.get("AGENTD_ATTEMPT_ID", ""))
outcome = {"status": "completed", "machine_status": "ok", "operator_summary": "spent a poisoned amount"}
result = {
    "type": "result",
    "subtype": "success",
    "is_error": False,
    "num_turns": "\x00num_turns",
    "result": "Done.\n```json\n" + json.dumps(outcome) + "\n```",
    "total_cost_usd": "\x00cost",
    "usage": {"input_tokens": "\x00input", "output_tokens": 7, "cache_read_input_tokens": "\x00cache"},
    "modelUsage": {"claude-sonnet-4-5": {"costUSD": "\x00model_cost"}},
}
line = json.dumps(result)
for mark in ("num_turns", "cost", "input", "cache", "model_cost"):
    line = line.replace(json.dumps("\x00" + mark), rng.choice(POISON))
tool = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "true"}}
lines = [
    json.dumps({"type": "system", "subtype": "init", "model": "claude-sonnet-4-5"}),
    json.dumps({"type": "assistant", "message": {"content": [tool]}}),
    json.dumps({"type": "assistant", "message": "a string, not an object"}),
    "[" * 200_000 + "]" * 200_000,
    line,
]
sys.stdout.write("\n".join(lines) + "\n")
