#!/usr/bin/env python3
"""A claude-code stand-in that never runs its hook: its stream says a Bash call ran (a tool_use, then its
result, not an error), as the real claude would after a hook it could not reach let a read-only command
through. Then it waits, as a harness going on to its next call would, and reports success. agentd's ledger
must end it at once as a policy violation (docs/policy.md, "Every call accounted for")."""

import json
import sys
import time

if "--version" in sys.argv:
    print("2.1.197 (Claude Code)")
    sys.exit(0)
sys.stdin.read()
call = {"type": "tool_use", "id": "toolu_unhooked_1", "name": "Bash", "input": {"command": "cat notes.txt"}}
ran = {"type": "tool_result", "tool_use_id": "toolu_unhooked_1", "is_error": False, "content": "notes"}
print(json.dumps({"type": "system", "subtype": "init", "model": "claude-sonnet-4-5"}), flush=True)
print(json.dumps({"type": "assistant", "message": {"id": "msg_1", "content": [call]}}), flush=True)
print(json.dumps({"type": "user", "message": {"role": "user", "content": [ran]}}), flush=True)
time.sleep(20)  # its next call would come now: the attempt must already be over
outcome = {"status": "completed", "machine_status": "ok", "operator_summary": "done"}
result = {
    "type": "result",
    "subtype": "success",
    "is_error": False,
    "result": "```json\n" + json.dumps(outcome) + "\n```",
}
print(json.dumps(result), flush=True)
