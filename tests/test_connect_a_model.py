"""docs/connect-a-model.md walked as written with the real, pinned claude and codex CLIs against `agentd demo-model`
(issue 52, finding 1; `make test-harness`, inside tests/harness/isolated.sh): every TOML block and command of its
demo-model, claude-code and codex sections runs in a fresh clone, and what the page says follows holds: each task
completes, its report is in the workspace, `task show` reads as the page shows it (tokens included), and `agentd
run` without the waiver exits 2 with the words the page quotes. Without `sandbox`, claude's own permissions refuse
the write that agentd's policy allowed, and `task show` names both layers. The ollama section is run by
tests/test_doc_commands.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import REPO
from test_doc_commands import Step, differs, fresh_clone, reader_env
from test_docs import BIN

pytestmark = [pytest.mark.harness, pytest.mark.process, pytest.mark.timeout(600)]

PAGE = REPO / "docs" / "connect-a-model.md"
CACHE = Path(os.environ.get("AGENTD_HARNESS_CACHE") or REPO / ".cache" / "harness")
CLI_BIN = CACHE / "npm" / "node_modules" / ".bin"
PAGE_URL = "http://127.0.0.1:8765"


def section(heading: str) -> list[tuple[str, str]]:
    """(language, text) of each fenced block under the page's `## heading` or `### heading`, up to the next such
    heading (a TOML comment's `#` is no heading)."""
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(rf"^#{{2,3}} {re.escape(heading)}\n(.*?)(?=^#{{2,3}} |\Z)", text, re.MULTILINE | re.DOTALL)
    assert found is not None, f"docs/connect-a-model.md has no section {heading!r}"
    return re.findall(r"^```(\w*)\n(.*?)^```", found.group(1), re.MULTILINE | re.DOTALL)


def blocks(heading: str, lang: str) -> list[str]:
    return [body for found, body in section(heading) if found == lang]


def commands(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture
def demo_model() -> Iterator[str]:
    """`agentd demo-model` on a port the OS picks; its URL."""
    server = subprocess.Popen([BIN / "agentd", "demo-model", "--json"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        yield json.loads(server.stdout.readline())["url"]
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)
    assert server.returncode == 0


class Reader:
    """A reader at a fresh clone's top, in their terminal: the venv and the CLIs on PATH, the example config."""

    def __init__(self, root: Path, url: str) -> None:
        if not os.access(CLI_BIN / "claude", os.X_OK) or not os.access(CLI_BIN / "codex", os.X_OK):
            pytest.fail(f"{CLI_BIN} has no claude or codex: `make test-harness` installs the pinned CLIs first")
        self.clone, self.url = fresh_clone(root), url
        self.env = reader_env(root) | {"PATH": f"{BIN}:{CLI_BIN}:/usr/bin:/bin"}
        self.config = self.clone / "config" / "identity.example.toml"

    def add_toml(self, toml: str) -> None:
        """A block added to the identity TOML, the demo model's address the one the OS gave it."""
        assert PAGE_URL in toml or "prices" in toml, toml
        self.config.write_text(self.config.read_text() + "\n" + toml.replace(PAGE_URL, self.url))

    def run(self, command: str, timeout: int = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command], cwd=self.clone, env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def run_all(self, block: str) -> dict[str, str]:
        """Each command of a block, in order, each exiting 0; what each printed on stdout."""
        printed = {}
        for command in commands(block):
            done = self.run(command)
            assert done.returncode == 0, f"$ {command}\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
            printed[command] = done.stdout
        return printed


def shown_like_the_page(heading: str, printed: dict[str, str]) -> None:
    """The section's `task show N` printed what its `text` block shows (a `…` line: any lines)."""
    [shown] = blocks(heading, "text")
    [show] = [command for command in printed if re.fullmatch(r"agentd task show \d+", command)]
    problem = differs(Step(show, tuple(shown.rstrip("\n").splitlines())), printed[show])
    assert problem is None, problem


def test_the_demo_model_prints_the_line_the_page_shows() -> None:
    [started] = blocks("Try it without a key", "sh")[:1]
    command, said = started.strip().splitlines()
    assert command == "agentd demo-model --port 8765" and said.startswith("# ")
    server = subprocess.Popen([BIN / "agentd", "demo-model"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline().rstrip("\n")
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)
    assert re.fullmatch(re.escape(said[2:]).replace("8765", r"\d+"), line), line


def test_claude_code_and_codex_run_the_example_task_as_the_page_says(demo_model: str, tmp_path: Path) -> None:
    reader = Reader(tmp_path, demo_model)
    reader.run_all(blocks("Try it without a key", "sh")[1])  # the key file the adapters read
    [claude] = blocks("claude-code", "toml")
    reader.add_toml(claude)
    [steps] = blocks("claude-code", "sh")
    printed = reader.run_all(steps)
    shown_like_the_page("claude-code", printed)
    assert (reader.clone / "var/demo/workspace/reports/claude-hello.md").is_file()
    assert "written by a tool call" in printed["cat var/demo/workspace/reports/claude-hello.md"]
    [prices] = blocks("The key never reaches the attempt", "toml")
    reader.add_toml(prices)  # right after claude's table, as the page says
    [codex] = blocks("codex", "toml")
    reader.add_toml(codex)
    [steps] = blocks("codex", "sh")
    printed = reader.run_all(steps)
    shown_like_the_page("codex", printed)
    assert "written by a tool call" in printed["cat var/demo/workspace/reports/codex-hello.md"]
    check = reader.run("agentd config check")
    assert check.returncode == 0, check.stderr
    # What `make run` runs, without the waiver: refused, in the words the page quotes.
    refused = reader.run("agentd run", timeout=60)
    quoted = re.search(r"exits 2 with `([^`]+)`", " ".join(PAGE.read_text().split()))
    assert quoted is not None and refused.returncode == 2
    assert quoted.group(1) in refused.stderr, refused.stderr


def test_without_its_sandbox_claude_refuses_what_agentd_allowed_and_task_show_says_so(
    demo_model: str, tmp_path: Path
) -> None:
    reader = Reader(tmp_path, demo_model)
    reader.run_all(blocks("Try it without a key", "sh")[1])
    [claude] = blocks("claude-code", "toml")
    without = "\n".join(line for line in claude.splitlines() if not line.startswith("sandbox ="))
    reader.add_toml(without)
    [steps] = blocks("claude-code", "sh")
    for command in commands(steps)[:4]:  # config check, init, task add, dispatch
        assert reader.run(command).returncode == 0, command
    shown = reader.run("agentd task show 1").stdout
    assert "task 1  retryable_failure" in shown
    assert "artifact 'reports/claude-hello.md' does not exist" in shown
    said = re.search(r"`agentd task show` prints `(denials: [^`]+)`", " ".join(PAGE.read_text().split()))
    assert said is not None and said.group(1) in shown, shown
    events = [json.loads(line) for line in reader.run("agentd events --task 1 --json").stdout.splitlines()]
    allowed = [e["payload"]["tool_use_id"] for e in events if e["type"] == "tool_call_allowed"]
    [refused] = [e["payload"] for e in events if e["type"] == "policy_denied"]
    assert refused["refused_by"] == "harness" and refused["agentd_decision"] == "allowed"
    assert refused["call_id"] in allowed


@pytest.mark.parametrize("kind", ["claude-code", "codex", "hermes-agent", "ollama-generate"])
def test_the_demo_model_s_play_completes_a_task_on_every_adapter_it_speaks_to(kind: str, tmp_path: Path) -> None:
    """What `agentd demo-model` promises beyond the page: hermes and ollama too. A harness writes the report the
    payload names and the task's gate finds it; ollama, with no tools, answers at once and claims nothing."""
    from fakemodel import FakeModelServer
    from test_adapter_contract import Harness

    from agentd.services.demomodel import demo_turn

    def writable(raw: dict[str, Any]) -> None:  # claude's Write needs it, as the page says
        next(a for a in raw["adapters"] if a["adapter_id"] == "a")["sandbox"] = "workspace-write"

    with FakeModelServer(respond=demo_turn) as fake:
        harness = Harness(tmp_path / kind, kind, fake, 120_000, writable if kind == "claude-code" else None)
        try:
            task, attempt, _ = harness.run({"write": "reports/demo.md"})
        finally:
            harness.store.close()
    assert task.status == "completed", (task.last_error, attempt.diagnostics)
    claimed = task.outcome.artifact_paths if task.outcome else None
    if kind == "ollama-generate":
        assert not claimed
    else:
        assert claimed == ["reports/demo.md"] and (harness.workspace / "reports/demo.md").is_file()
