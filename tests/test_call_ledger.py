"""Every call a harness reports, held to the decision agentd made (agentd/attempt/ledger.py; docs/policy.md,
"Every call accounted for"), and claude's own permissions under a policy (agentd/adapters/posture.py): the
pure parts, fed the stream lines the real CLIs print (tests/test_policy_unkillable.py runs them for real)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.adapters.posture import claude_would_allow
from agentd.attempt.ledger import CallLedger
from agentd.config.tool_policy import Call
from agentd.config.unhooking import hook_problems, unhooking
from agentd.records import ClaudeCodeAdapterConfig, CodexAdapterConfig


def line(record: dict[str, Any]) -> bytes:
    return json.dumps(record).encode() + b"\n"


def tool_use(call_id: str, tool: str = "Bash", command: str = "ls") -> bytes:
    block = {"type": "tool_use", "id": call_id, "name": tool, "input": {"command": command}}
    return line({"type": "assistant", "message": {"id": "msg_1", "content": [block]}})


def tool_result(call_id: str, is_error: bool = False, content: Any = "ok") -> bytes:
    block = {"type": "tool_result", "tool_use_id": call_id, "is_error": is_error, "content": content}
    return line({"type": "user", "message": {"role": "user", "content": [block]}})


def result(*denied: str) -> bytes:
    return line({"type": "result", "permission_denials": [{"tool_name": "Bash", "tool_use_id": d} for d in denied]})


def started(command: str) -> bytes:
    item = {"id": "item_3", "type": "command_execution", "command": command, "status": "in_progress"}
    return line({"type": "item.started", "item": item})


class Kept:
    def __init__(self, kind: str) -> None:
        self.stopped: list[dict[str, Any]] = []
        self.ledger = CallLedger(kind, self.stopped.append)


async def ledger_of(kind: str) -> Kept:
    return Kept(kind)


def test_a_decided_call_that_ran_is_accounted_for() -> None:
    async def main() -> None:
        kept = await ledger_of("claude-code")
        kept.ledger.tap(tool_use("toolu_1"))
        kept.ledger.decide("toolu_1", True, "ls")
        kept.ledger.tap(tool_result("toolu_1"))
        kept.ledger.tap(result())
        assert kept.ledger.ended() == [] and kept.stopped == [] and kept.ledger.calls == 1

    anyio.run(main)


@pytest.mark.parametrize(
    ("decision", "said"),
    [(None, "ran without a decision from agentd"), (False, "ran although agentd denied it")],
    ids=["undecided", "denied"],
)
def test_a_call_that_ran_without_an_allow_stops_the_run_at_once(decision: bool | None, said: str) -> None:
    async def main() -> None:
        kept = await ledger_of("claude-code")
        kept.ledger.tap(tool_use("toolu_1"))
        if decision is not None:
            kept.ledger.decide("toolu_1", decision, "ls")
        kept.ledger.tap(tool_result("toolu_1"))
        assert kept.stopped == [{"tool": "Bash", "call_id": "toolu_1", "what": said}]

    anyio.run(main)


def test_claude_s_own_refusal_is_no_violation_and_an_unexplained_error_is() -> None:
    async def main() -> None:
        kept = await ledger_of("claude-code")
        refusal = "Permission to use Bash has been denied because Claude Code is running in don't ask mode."
        for call_id in ("toolu_1", "toolu_2", "toolu_3"):
            kept.ledger.tap(tool_use(call_id))
        kept.ledger.tap(tool_result("toolu_1", True, [{"type": "text", "text": refusal}]))
        kept.ledger.tap(tool_result("toolu_2", True, "Exit code 1\nPermission to use Bash has been denied"))
        kept.ledger.tap(tool_result("toolu_3", True, "Exit code 1\n"))
        kept.ledger.tap(result("toolu_3"))  # claude says it refused this one
        assert kept.stopped == []  # errors wait for the end: claude's result may explain them
        assert [v["call_id"] for v in kept.ledger.ended()] == ["toolu_2"]

    anyio.run(main)


def test_a_line_cut_across_chunks_is_read_whole() -> None:
    async def main() -> None:
        kept = await ledger_of("claude-code")
        data = tool_use("toolu_9") + tool_result("toolu_9")
        for at in range(0, len(data), 7):
            kept.ledger.tap(data[at : at + 7])
        assert [v["call_id"] for v in kept.stopped] == ["toolu_9"]

    anyio.run(main)


def test_codex_commands_must_each_match_an_allowed_decision() -> None:
    async def main() -> None:
        kept = await ledger_of("codex")
        script = "python3 -c \"print('x')\"; echo $HOME"
        kept.ledger.decide(None, True, script)
        kept.ledger.tap(started("/bin/bash -lc \"python3 -c \\\"print('x')\\\"; echo \"'$HOME'"))  # as codex quotes
        kept.ledger.tap(started("/bin/bash -lc 'touch m2'"))
        assert [v["what"] for v in kept.stopped] == ["started without a decision from agentd: /bin/bash -lc 'touch m2'"]
        kept.ledger.decide(None, True, "ls")
        kept.ledger.tap(started("/bin/bash -lc ls"))
        kept.ledger.tap(started("/bin/bash -lc ls"))  # one decision, one run
        assert len(kept.stopped) == 2 and kept.ledger.calls == 4

    anyio.run(main)


def test_the_gate_waits_for_claude_s_announcement_of_a_call() -> None:
    async def main() -> None:
        kept = await ledger_of("claude-code")
        async with anyio.create_task_group() as group:

            async def announce() -> None:
                await anyio.sleep(0.1)
                kept.ledger.tap(tool_use("toolu_late", "Write"))

            group.start_soon(announce)
            assert await kept.ledger.announcement("toolu_late", 5) == "Write"
        assert await kept.ledger.announcement("toolu_never", 0.1) is None

    anyio.run(main)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20), st.sampled_from(["claude-code", "codex"]))
def test_whatever_the_stream_holds_the_ledger_never_raises(chunks: list[bytes], kind: str) -> None:
    async def main() -> None:
        kept = await ledger_of(kind)
        for chunk in chunks:
            kept.ledger.tap(chunk)
        kept.ledger.ended()

    anyio.run(main)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["type", "message", "item", "content", "id"]),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
            max_leaves=10,
        ),
    )
)
def test_whatever_a_record_holds_the_ledger_never_raises(record: dict[str, Any]) -> None:
    async def main() -> None:
        for kind in ("claude-code", "codex"):
            kept = await ledger_of(kind)
            kept.ledger.tap(json.dumps(record).encode() + b"\n")
            kept.ledger.ended()

    anyio.run(main)


def claude(**settings_: Any) -> ClaudeCodeAdapterConfig:
    base = {"adapter_id": "a", "kind": "claude-code", "command": "claude", "timeout_ms": 60_000}
    return ClaudeCodeAdapterConfig.model_validate({**base, **settings_})


def call(tool: str, workspace: Path, **given: Any) -> Call:
    return Call(tool, given, str(workspace), str(workspace))


@pytest.mark.parametrize(
    ("adapter", "tool", "given", "allowed"),
    [
        ({}, "Read", {"file_path": "notes.txt"}, True),
        ({}, "Read", {"file_path": "/etc/passwd"}, False),  # outside: claude would ask, so it is claude's to refuse
        ({}, "Write", {"file_path": "out.md"}, False),
        ({"sandbox": "workspace-write"}, "Write", {"file_path": "out.md"}, True),
        ({"sandbox": "workspace-write"}, "Write", {"file_path": "../escape.md"}, False),
        ({"sandbox": "read-only"}, "Edit", {"file_path": "out.md"}, False),
        ({}, "Bash", {"command": "ls"}, False),
        ({"allowed_tools": ["Bash"]}, "Bash", {"command": "rm -rf build"}, True),
        ({"allowed_tools": ["Bash(git status:*)"]}, "Bash", {"command": "git status --short"}, True),
        ({"allowed_tools": ["Bash(git status:*)"]}, "Bash", {"command": "git status; rm -rf ~"}, False),
        ({"allowed_tools": ["Bash(git status:*)"]}, "Bash", {"command": "git statusx"}, False),
        ({"autonomy": {"profile": "trusted-vm"}}, "WebFetch", {"url": "https://example.com"}, True),
    ],
)
def test_what_claude_s_own_settings_would_allow(
    tmp_path: Path, adapter: dict[str, Any], tool: str, given: dict[str, Any], allowed: bool
) -> None:
    assert claude_would_allow(claude(**adapter), call(tool, tmp_path, **given)) is allowed


def test_a_codex_adapter_is_never_claude() -> None:
    codex = _codex()
    assert claude_would_allow(codex, Call("Read", {}, "/w", "/w")) is False


@pytest.mark.parametrize(
    ("kind", "args"),
    [
        ("claude-code", ["--permission-mode", "bypassPermissions"]),
        ("claude-code", ["--allowedTools=Bash"]),
        ("claude-code", ["--dangerously-skip-permissions"]),
        ("codex", ["--dangerously-bypass-approvals-and-sandbox"]),
        ("codex", ["--yolo"]),
        ("codex", ["-s", "danger-full-access"]),
        ("codex", ["-c", "sandbox_workspace_write.writable_roots=['/']"]),
    ],
)
def test_arguments_that_would_let_a_harness_run_calls_of_its_own_accord_are_refused(kind: str, args: list[str]) -> None:
    assert unhooking(kind, args) is not None
    adapter = (claude if kind == "claude-code" else _codex)(autonomy={"profile": "trusted-vm", "required_args": args})
    [(where, what)] = hook_problems({"a": adapter}, ["deny"])
    assert where == "adapters.a.extra_args" and "agentd sets the harness's permissions itself" in what
    assert hook_problems({"a": adapter}, ["allow"]) == []


def _codex(**settings_: Any) -> CodexAdapterConfig:
    base = {"adapter_id": "c", "kind": "codex", "command": "codex", "timeout_ms": 60_000}
    return CodexAdapterConfig.model_validate({**base, **settings_})


def test_the_manifest_says_what_was_enforced_not_what_was_configured(tmp_path: Path) -> None:
    from agentd.adapters.base import AdapterRun
    from agentd.attempt.manifest import tool_policy_held
    from agentd.process.output import CappedFile, ProcessResult

    configured = {"enforced": "at each call, by claude's PreToolUse hook", "rules": 1, "default": "allow"}
    out = CappedFile(tmp_path / "o", 0).close()
    never = ProcessResult(None, None, None, False, "the run user cannot run the hook", out, out, 0.0)
    refused = AdapterRun("error", False, "x", None, process=never)
    assert tool_policy_held(configured, refused)["enforced"] == "nothing ran: the attempt did not start"
    violation = {"tool": "Bash", "call_id": "toolu_1", "what": "ran without a decision from agentd"}
    found = {"tool_calls_reported": 3, "tool_calls": [{}, {}], "policy_violations": [violation]}
    ran = AdapterRun("error", False, "x", None, diagnostics=found)
    held = tool_policy_held(configured, ran)
    assert held == {**configured, "calls_reported": 3, "calls_decided": 2, "violations": [violation]}
    assert tool_policy_held(configured, AdapterRun("ok", True, None, "done")) == configured  # no ledger: a script
