"""A long session keeps its verdict (issue 23, finding 9a): an attempt's output cap keeps the head and
the tail of the stream around a marked gap, so the final record the judge needs survives; the action
trace is capped too, and what it dropped is counted in the manifest and the diagnostics."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from support import harness_fixture
from test_adapter_builders import ctx
from test_usage import completed_on_claude, fake_claude, outcome

from agentd.adapters.claude import ClaudeCodeAdapter
from agentd.evidence.action_trace import MAX_TRACE_STEPS, capped, trace_of
from agentd.process.output import CappedFile


def numbered(count: int) -> bytes:
    return b"".join(b'{"line": %d}\n' % n for n in range(count))


def test_the_cap_keeps_the_head_and_the_whole_lines_of_the_tail(tmp_path: Path) -> None:
    path, data = tmp_path / "out", numbered(2000)
    sink = CappedFile(path, 1000, tail_bytes=400)
    for at in range(0, len(data), 333):  # in chunks, as a pipe gives them
        sink.write(data[at : at + 333])
    captured = sink.close()
    text = path.read_bytes()
    assert text.startswith(data[:600] + b"\n[agentd: output capped at 1000 bytes: the first 600 and the last ")
    gap, kept_tail = text[600:].split(b"]\n", 1)
    assert kept_tail and data.endswith(kept_tail) and kept_tail.startswith(b'{"line": ')  # whole lines only
    assert len(kept_tail) <= 400 and gap.endswith(b" dropped"), gap
    assert captured.bytes_seen == len(data) and captured.truncated
    assert captured.bytes_kept == 600 + len(kept_tail)


def test_under_the_cap_nothing_changes_and_without_a_tail_the_head_is_kept(tmp_path: Path) -> None:
    whole = CappedFile(tmp_path / "whole", 1000, tail_bytes=400)
    whole.write(numbered(40))  # past the head's 600 bytes, under the cap: the tail follows on, whole
    whole.write(numbered(30))
    expected = numbered(40) + numbered(30)
    assert whole.close().bytes_kept == len(expected) and (tmp_path / "whole").read_bytes() == expected
    head = CappedFile(tmp_path / "head", 100)
    head.write(numbered(100))
    head.close()
    assert (tmp_path / "head").read_bytes().startswith(numbered(100)[:100] + b"\n[agentd: output capped at 100")


@pytest.mark.asyncio
@pytest.mark.process
async def test_a_claude_session_longer_than_the_cap_keeps_its_result_record(tmp_path: Path) -> None:
    fixture = harness_fixture("claude_stream_json_tool_use.jsonl").read_text().splitlines()
    final = json.loads(fixture[-1])
    final["result"] = "Done.\n```json\n" + json.dumps(outcome(None)) + "\n```"
    chatter = json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": "x" * 900}]}})
    cli = fake_claude(tmp_path, [*fixture[:-1], *[chatter] * 3000, json.dumps(final)])  # ~2.8 MB
    context = ctx(tmp_path, {"kind": "claude-code", "command": str(cli)})  # a 1 MiB cap

    async def started(pid: int | None) -> None:
        return None

    run = await ClaudeCodeAdapter().execute(context, started)
    assert run.process is not None and run.process.stdout.truncated
    assert run.ok and run.final_message == final["result"], run.failure
    assert run.usage.cost_usd == final["total_cost_usd"]
    assert b"[agentd: output capped at" in context.paths.stdout.read_bytes()


def test_a_trace_keeps_its_first_and_last_steps_and_counts_the_rest(tmp_path: Path) -> None:
    calls = [
        json.dumps({"type": "assistant", "message": {"content": [{"type": "tool_use", "id": f"t{n}", "name": "Bash"}]}})
        for n in range(MAX_TRACE_STEPS + 500)
    ]
    (tmp_path / "stdout.log").write_text("\n".join(calls) + "\n")
    steps = trace_of("claude-code", tmp_path)
    kept, dropped = capped(steps)
    assert len(steps) == MAX_TRACE_STEPS + 500 and dropped == 500 and len(kept) == MAX_TRACE_STEPS
    numbers = [step.step for step in kept]
    assert numbers[0] == 1 and numbers[-1] == MAX_TRACE_STEPS + 500  # the gap shows in the numbers
    assert numbers[MAX_TRACE_STEPS // 2] - numbers[MAX_TRACE_STEPS // 2 - 1] == 501
    assert capped(steps[:10]) == (steps[:10], 0)


@pytest.mark.asyncio
@pytest.mark.process
async def test_an_attempt_records_what_its_trace_dropped(rig_factory: Callable[..., Rig], tmp_path: Path) -> None:
    fixture = harness_fixture("claude_stream_json_tool_use.jsonl").read_text().splitlines()
    final = json.loads(fixture[-1])
    final["result"] = "Done.\n```json\n" + json.dumps(outcome(None)) + "\n```"
    calls = [
        json.dumps({"type": "assistant", "message": {"content": [{"type": "tool_use", "id": f"t{n}", "name": "Bash"}]}})
        for n in range(MAX_TRACE_STEPS + 20)
    ]
    cli = fake_claude(tmp_path, [*calls, json.dumps(final)])

    def mutate(raw: dict[str, Any]) -> None:
        raw["adapters"].append(
            {"adapter_id": "claude", "kind": "claude-code", "command": str(cli), "timeout_ms": 60_000}
        )

    row = await completed_on_claude(rig_factory(mutate))
    assert row.diagnostics is not None and row.diagnostics["action_trace_steps_dropped"] == 21  # and the message
    manifest = json.loads((Path(row.evidence_dir or "") / "manifest.json").read_text())
    assert manifest["action_trace"]["steps"] == MAX_TRACE_STEPS and manifest["action_trace"]["steps_dropped"] == 21
    trace = (Path(row.evidence_dir or "") / "action_trace.jsonl").read_text().splitlines()
    assert len(trace) == MAX_TRACE_STEPS
