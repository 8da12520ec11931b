"""`agentd demo-model`: a model on 127.0.0.1 that needs no key and no network, speaking the Anthropic Messages,
OpenAI Responses and Chat Completions, and Ollama APIs, so a claude-code, codex, hermes-agent or ollama adapter
can be tried end to end (docs/connect-a-model.md). It writes the task's report with one tool call, then answers
with a TaskOutcome (agentd/services/demomodel/playbook.py)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from agentd.cli.common import add_command, wants_json
from agentd.errors import InputError

PROTOCOLS = ("anthropic", "openai-responses", "openai-chat", "ollama")
HISTORY = 32  # requests kept in memory: a demo server may run for days


def register(commands: Any) -> None:
    demo = add_command(
        commands,
        "demo-model",
        cmd_demo_model,
        "serve a keyless fake model on 127.0.0.1 for claude, codex, hermes and ollama adapters until Ctrl-C",
    )
    demo.add_argument("--port", type=port_number, default=0, help="the port on 127.0.0.1 (default 0: a free one)")


def port_number(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, found {text!r}")
    return int(text)


def cmd_demo_model(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM; the handlers only set a flag, this thread stops the server."""
    from agentd.services.demomodel import FakeModelServer, demo_turn

    server = FakeModelServer(respond=demo_turn, models=("demo",), port=args.port, history=HISTORY)
    try:
        server.start()
    except OSError as exc:
        raise InputError(f"demo-model: cannot listen on 127.0.0.1:{args.port} ({exc.strerror}): choose --port") from exc
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    if wants_json(args):
        print(json.dumps({"url": server.url, "port": server.port, "protocols": list(PROTOCOLS)}), flush=True)
    else:
        print(f"demo-model: serving {server.url} (no key needed; Ctrl-C stops it)", flush=True)
    try:
        while not stopping.wait(1.0):
            pass
    finally:
        server.stop()
    print("demo-model: stopped", file=sys.stderr)
    return 0
