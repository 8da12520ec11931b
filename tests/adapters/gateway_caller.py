#!/usr/bin/env python3
"""A claude-code stand-in for the chaos harness (tests/chaos.py): it makes three streamed model calls through what
it was given (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY: the model gateway and its token), reading each answer slowly,
half a second apart, so a dispatcher killed under it kills the gateway mid-stream; then it says it completed.
Standard library only."""

import json
import os
import sys
import time
import urllib.request

if "--version" in sys.argv:
    print("2.1.197 (Claude Code)")
    sys.exit(0)
sys.stdin.read()
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
for _ in range(3):
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    request = urllib.request.Request(
        os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages",
        data=json.dumps(body).encode(),
        headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"], "content-type": "application/json"},
    )
    with opener.open(request, timeout=30) as answer:
        while chunk := answer.read(64):
            time.sleep(0.05)
    time.sleep(0.5)
outcome = {"status": "completed", "machine_status": "ok", "operator_summary": "three calls through the gateway"}
said = "```json\n" + json.dumps(outcome) + "\n```"
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": said}), flush=True)
