#!/usr/bin/env python3
"""A claude-code stand-in for the model gateway's boundary test (tests/test_gateway_boundary.py): it looks for the
provider's key everywhere its user can read (its environment, every /proc/*/environ and cmdline it can open, its
HOME, the workspace, its run folder, /tmp), writing all of it to `hunt.txt` in the workspace for the test to search;
tries the upstream directly and a port the test names (`AGENTD_TEST_PROBE_PORT`), then makes one model call
through what it was given (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY), prints claude's stream-json lines and its
result with an outcome. Standard library only: it runs as the attempt's user, in the attempt's network."""

import glob
import json
import os
import socket
import sys
import urllib.request

if "--version" in sys.argv:
    print("2.1.197 (Claude Code)")
    sys.exit(0)
sys.stdin.read()
LIMIT = 2 * 1024 * 1024
found = []


def take(label, data):
    found.append(f"== {label}\n")
    found.append(data[:LIMIT].decode("utf-8", "replace") if isinstance(data, bytes) else str(data)[:LIMIT])


take("environ", json.dumps(dict(os.environ)))
for pattern in ("/proc/*/environ", "/proc/*/cmdline"):
    for path in glob.glob(pattern):
        try:
            with open(path, "rb") as handle:
                take(path, handle.read())
        except OSError:
            pass
roots = [os.environ.get("HOME", ""), os.getcwd(), os.path.dirname(os.environ.get("AGENTD_RESULT_PATH", "")), "/tmp"]
for root in filter(None, roots):
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            try:
                with open(path, "rb") as handle:
                    take(path, handle.read(LIMIT))
            except OSError:
                pass


def reach(port):
    try:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=3):
            return "connected"
    except OSError as exc:
        return f"refused: {exc.__class__.__name__}"


probes = {
    name: reach(port)
    for name, port in (
        ("upstream", os.environ.get("AGENTD_TEST_UPSTREAM_PORT", "0")),
        ("probe", os.environ.get("AGENTD_TEST_PROBE_PORT", "0")),
    )
}
with open("hunt.txt", "w", encoding="utf-8") as out:
    out.write("".join(found))
with open("probes.json", "w", encoding="utf-8") as out:
    json.dump(probes, out)
body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]})
request = urllib.request.Request(
    os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages",
    data=body.encode(),
    headers={
        "x-api-key": os.environ["ANTHROPIC_API_KEY"],
        "content-type": "application/json",
        "anthropic-version": "2023-06-01",
    },
)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the gateway, never through a proxy
answer = json.loads(opener.open(request, timeout=30).read())
print(json.dumps({"type": "system", "subtype": "init", "model": "claude-sonnet-4-5"}), flush=True)
print(
    json.dumps(
        {
            "type": "assistant",
            "message": {"id": answer.get("id"), "content": answer.get("content"), "usage": {"input_tokens": 999999}},
        }
    ),
    flush=True,
)
outcome = {"status": "completed", "machine_status": "ok", "operator_summary": "looked everywhere"}
said = "```json\n" + json.dumps(outcome) + "\n```"
print(
    json.dumps(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "result": said,
            "usage": {"input_tokens": 123456, "output_tokens": 654321},
            "total_cost_usd": 0,
        }
    ),
    flush=True,
)
