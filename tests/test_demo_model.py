"""`agentd demo-model` (docs/connect-a-model.md, issue 52): the keyless model as a command, on 127.0.0.1, in the
foreground until a signal; and its play, which writes the task's report with one tool call and then answers with
an outcome claiming it, in each harness's protocol."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.services.demomodel import RecordedRequest, Reply, ToolCall, demo_turn

pytestmark = pytest.mark.process

PAYLOAD = 'Payload:\n```json\n{\n  "note": "hi",\n  "write": "reports/claude-hello.md"\n}\n```'


def request(protocol: str, body: dict[str, Any]) -> RecordedRequest:
    return RecordedRequest("POST", "/", {}, body, protocol)


def outcome_of(turn: Any) -> dict[str, Any]:
    assert isinstance(turn, Reply), turn
    return json.loads(turn.text.split("```json\n", 1)[1].split("```", 1)[0])


def test_claude_is_asked_to_write_the_payload_s_file_in_its_working_directory_then_told_it_is_done() -> None:
    system = "You are Claude Code.\nWorking directory: /tmp/ws\n"
    asked = {"system": system, "tools": [{"name": "Bash"}, {"name": "Write"}], "messages": [
        {"role": "user", "content": [{"type": "text", "text": PAYLOAD}]}]}  # fmt: skip
    turn = demo_turn(request("anthropic", asked))
    assert isinstance(turn, ToolCall) and turn.name == "Write"
    assert turn.arguments["file_path"] == "/tmp/ws/reports/claude-hello.md"
    result = {"role": "user", "content": [{"type": "tool_result", "content": "ok"}]}
    answered = {**asked, "messages": [*asked["messages"], {"role": "assistant", "content": []}, result]}
    assert outcome_of(demo_turn(request("anthropic", answered)))["artifact_paths"] == ["reports/claude-hello.md"]


def test_codex_gets_its_shell_tool_and_a_command_that_writes_the_report() -> None:
    asked = {"tools": [{"type": "function", "name": "exec_command"}], "input": [{"role": "user", "content": PAYLOAD}]}
    turn = demo_turn(request("responses", asked))
    assert isinstance(turn, ToolCall) and turn.name == "exec_command"
    assert (
        turn.arguments["cmd"].startswith("mkdir -p reports && printf")
        and "> reports/claude-hello.md" in turn.arguments["cmd"]
    )
    answered = {**asked, "input": [*asked["input"], {"type": "function_call_output", "output": "ok"}]}
    assert outcome_of(demo_turn(request("responses", answered)))["artifact_paths"] == ["reports/claude-hello.md"]


def test_hermes_gets_its_terminal_and_without_a_write_the_default_report() -> None:
    asked = {
        "tools": [{"type": "function", "function": {"name": "terminal"}}],
        "messages": [{"role": "user", "content": "hi"}],
    }
    turn = demo_turn(request("chat", asked))
    assert (
        isinstance(turn, ToolCall) and turn.name == "terminal" and "reports/demo-model.md" in turn.arguments["command"]
    )
    answered = {**asked, "messages": [*asked["messages"], {"role": "tool", "content": "ok"}]}
    assert outcome_of(demo_turn(request("chat", answered)))["artifact_paths"] == ["reports/demo-model.md"]


def test_a_model_with_no_tools_answers_at_once_and_claims_no_file() -> None:
    outcome = outcome_of(demo_turn(request("ollama.generate", {"prompt": PAYLOAD})))
    assert outcome["status"] == "completed" and "artifact_paths" not in outcome


@given(st.text(alphabet="abc./-_", min_size=1, max_size=30))
def test_whatever_the_payload_names_the_play_never_writes_outside_the_working_folder(path: str) -> None:
    body = {"tools": [{"name": "Write"}, {"name": "exec_command"}], "messages": [
        {"role": "user", "content": f'{{"write": "{path}"}}'}]}  # fmt: skip
    turn = demo_turn(request("anthropic", body))
    if isinstance(turn, ToolCall):
        written = turn.arguments["file_path"]
        assert not written.startswith("/") and ".." not in written.split("/"), written
    else:
        assert "artifact_paths" not in outcome_of(turn)


def serve(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "agentd", "demo-model", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    data = json.dumps(body).encode()
    sent = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(sent, timeout=10) as answer:
        return dict(json.load(answer))


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_command_serves_on_loopback_says_where_in_one_line_and_stops_on_a_signal(stop: int) -> None:
    server = serve("--json")
    try:
        assert server.stdout is not None
        shown = json.loads(server.stdout.readline())
        assert shown["url"] == f"http://127.0.0.1:{shown['port']}" and shown["port"] > 0
        answer = post(f"{shown['url']}/api/generate", {"model": "any", "stream": False, "prompt": PAYLOAD})
        assert '"status": "completed"' in answer["response"]
        assert post(f"{shown['url']}/api/generate", {"model": "any", "stream": False, "prompt": "x"})["done"] is True
        server.send_signal(stop)
        server.communicate(timeout=10)
        assert server.returncode == 0
    finally:
        if server.poll() is None:
            server.kill()
        server.communicate()


def test_a_taken_port_is_one_line_and_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = serve("--port", str(port))
        _, err = server.communicate(timeout=30)
    assert server.returncode == 2
    assert err.strip().splitlines() == [
        f"agentd: demo-model: cannot listen on 127.0.0.1:{port} (Address already in use): choose --port"
    ]
