#!/usr/bin/python3
"""The system test's adapters, installed in the machine as /usr/local/lib/agentd-standin/{claude,hold}
(docs/testing.md, "The system test"). Only the machine's own python3 and nothing else: it runs as the
agent's run user under the shipped units.

- `claude`: a stand-in for the claude CLI (what `make test-harness` runs for real needs Node and a model
  server): `--version`, then on a prompt the stream-json a real session prints, one Bash tool call and a
  final text whose ```json block is the outcome. It writes `standin-<task>.txt` into its working dir
  (the workspace) and names it as an artifact.
- `hold`: a script adapter that writes `held-<task>.txt` and waits until the file its payload's "hold"
  names exists in the workspace (the test makes it: the attempt is then "in flight" for as long as the
  test wants), at most 10 minutes, then completes."""

import json
import os
import sys
import time
from pathlib import Path

task = os.environ.get("AGENTD_TASK_ID", "0")


def reach_the_host():
    """What the attempt's own network lets it reach (docs/gateway.md): the dispatcher's metrics port on the host's
    loopback (refused, in a network of its own), and the gateway agentd serves inside it (HTTPS_PROXY's port and
    ANTHROPIC_BASE_URL's)."""
    import socket
    from urllib.parse import urlsplit

    said = []
    targets = [("host-metrics", 9478)]
    for name, variable in (("gateway", "ANTHROPIC_BASE_URL"), ("proxy", "HTTPS_PROXY")):
        if os.environ.get(variable):
            targets.append((name, urlsplit(os.environ[variable]).port or 80))
    for name, port in targets:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=3).close()
            said.append(f"{name} {port} connected")
        except OSError as exc:
            said.append(f"{name} {port} refused {type(exc).__name__}")
    return "\n".join(said) + "\n"


def claude():
    if "--version" in sys.argv:
        print("2.1.197 (Claude Code)")
        return 0
    sys.stdin.read()
    Path(f"standin-{task}.txt").write_text(f"written by the claude stand-in as uid {os.getuid()}\n")
    Path(f"network-{task}.txt").write_text(reach_the_host())
    outcome = {
        "status": "completed",
        "machine_status": "ok",
        "operator_summary": "the stand-in harness ran one tool call",
        "artifact_paths": [f"standin-{task}.txt"],
    }
    session = "00000000-0000-4000-8000-0000000000" + task.zfill(2)[-2:]
    tool = {"type": "tool_use", "id": "toolu_standin", "name": "Bash", "input": {"command": "true"}}
    lines = [
        {"type": "system", "subtype": "init", "session_id": session, "model": "claude-sonnet-4-5", "cwd": os.getcwd()},
        {"type": "assistant", "session_id": session, "message": {"role": "assistant", "content": [tool]}},
        {
            "type": "user",
            "session_id": session,
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_standin", "content": ""}],
            },
        },
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "num_turns": 2,
            "session_id": session,
            "result": "Done.\n```json\n" + json.dumps(outcome) + "\n```",
            "total_cost_usd": 0.0003,
            "usage": {"input_tokens": 22, "output_tokens": 14},
            "modelUsage": {"claude-sonnet-4-5": {"inputTokens": 22, "outputTokens": 14, "costUSD": 0.0003}},
            "permission_denials": [],
        },
    ]
    for line in lines:
        print(json.dumps(line), flush=True)
    return 0


def hold():
    payload = json.loads(sys.stdin.read() or "{}")
    Path(f"held-{task}.txt").write_text(f"held as uid {os.getuid()}\n")
    release = Path(os.environ["AGENTD_WORKSPACE"]) / payload.get("hold", f"release-{task}")
    deadline = time.monotonic() + 600
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    outcome = {
        "status": "completed",
        "machine_status": "ok",
        "operator_summary": f"held until {release.name}",
        "artifact_paths": [f"held-{task}.txt"],
    }
    Path(os.environ["AGENTD_RESULT_PATH"]).write_text(json.dumps(outcome))
    return 0


sys.exit(claude() if Path(sys.argv[0]).name == "claude" else hold())
