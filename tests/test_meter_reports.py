"""The live budget meter reads only what the harness itself reports, and no report lowers its figure (issue 50,
finding 6; docs/policy.md, "Budgets while an attempt runs"). What the harness writes, the attempt's own processes
can write too: a planted rollout file, a line into claude's stdout pipe. Here the meter runs for real (its loop,
its reads, a RunTimer it ends) over files laid out as codex 0.169.0 and claude 2.1.197 write them; the real
harnesses are in test_policy_harness.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter
from support import examples

from agentd.attempt.meter import Cap, Meter, Running, codex_rollouts, meter_for, thread_spent
from agentd.process.runner import RunTimer
from agentd.records import AdapterConfig
from agentd.usage import Usage

THREAD = "01a251be-1feb-7b31-8e01-266a648eb227"  # as codex 0.169.0 names one (measured: a UUIDv7)
OTHER = "01a251be-0000-7000-8000-000000000000"
PRICES = {"m": {"input_per_mtok": 1.25, "output_per_mtok": 10.0}}
CAP = Cap(0.01, "what was left of the day's budget")  # 20 000 input tokens cost $0.025


def adapter(kind: str) -> AdapterConfig:
    return TypeAdapter(AdapterConfig).validate_python(
        {"adapter_id": "a", "kind": kind, "command": "cli", "timeout_ms": 60_000, "model": "m", "prices": PRICES}
    )


def token_count(given_in: int, given_out: int) -> str:
    info = {"total_token_usage": {"input_tokens": given_in, "cached_input_tokens": 0, "output_tokens": given_out}}
    return json.dumps({"type": "event_msg", "payload": {"type": "token_count", "info": info}})


def rollout(home: Path, day: str, thread: str, *totals: tuple[int, int], stamp: str = "2026-12-07T18-22-24") -> Path:
    """A rollout file as codex 0.169.0 writes it: sessions/YYYY/MM/DD/rollout-<local time>-<thread>.jsonl."""
    folder = home / "sessions" / day
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rollout-{stamp}-{thread}.jsonl"
    lines = [json.dumps({"type": "session_meta", "payload": {"id": thread}}), *(token_count(*t) for t in totals)]
    path.write_text("\n".join(lines) + "\n")
    return path


def codex_attempt(tmp_path: Path, thread: str | None = THREAD) -> tuple[Path, Path]:
    """(the attempt's stdout.log, its scratch HOME): codex has named `thread` in its stream."""
    stdout, scratch = tmp_path / "stdout.log", tmp_path / "home"
    (scratch / "codex").mkdir(parents=True)
    named = [json.dumps({"type": "thread.started", "thread_id": thread})] if thread else []
    stdout.write_text("\n".join([*named, '{"type":"turn.started"}']) + "\n")
    return stdout, scratch


async def stopped_within(meter: Meter, seconds: float = 5.0) -> bool:
    """Whether the meter ends the run (its loop, as the attempt runs it) within `seconds`."""
    timer = RunTimer()
    with anyio.move_on_after(seconds):
        await meter.run(timer)
    return timer.ended == "budget"


def codex_meter(stdout: Path, scratch: Path, before: Usage | None = None) -> Meter:
    meter = meter_for(adapter("codex"), "m", CAP, stdout, scratch, None, before)
    assert meter is not None
    return meter


@pytest.mark.asyncio
async def test_a_planted_newer_rollout_with_zero_totals_does_not_blind_the_meter(tmp_path: Path) -> None:
    stdout, scratch = codex_attempt(tmp_path)
    rollout(scratch / "codex", "2026/12/07", THREAD, (20_000, 100))
    rollout(scratch / "codex", "9999/12/31", OTHER, (0, 0), stamp="9999-12-31T23-59-59")  # the newest name
    meter = codex_meter(stdout, scratch)
    assert await stopped_within(meter), meter.running
    assert meter.stopped is not None and meter.stopped["input_tokens"] == 20_000
    assert [source.name for source in meter.sources] == [
        f"sessions/2026/12/07/rollout-2026-12-07T18-22-24-{THREAD}.jsonl"
    ]


@pytest.mark.asyncio
async def test_a_second_file_named_for_the_thread_can_only_raise_the_figure(tmp_path: Path) -> None:
    stdout, scratch = codex_attempt(tmp_path)
    rollout(scratch / "codex", "2026/12/07", THREAD, (20_000, 100))
    rollout(scratch / "codex", "2026/12/08", THREAD, (0, 0), stamp="2026-12-08T00-00-00")
    assert await stopped_within(codex_meter(stdout, scratch))


@pytest.mark.asyncio
async def test_a_lower_total_written_into_the_thread_s_own_file_never_lowers_the_figure(tmp_path: Path) -> None:
    stdout, scratch = codex_attempt(tmp_path)
    path = rollout(scratch / "codex", "2026/12/07", THREAD, (20_000, 100))
    meter = codex_meter(stdout, scratch)
    await anyio.to_thread.run_sync(meter._read)
    with path.open("a") as handle:  # the attempt appends a total of zero after codex's
        handle.write(token_count(0, 0) + "\n")
    await anyio.to_thread.run_sync(meter._read)
    assert meter.spent().input_tokens == 20_000


def test_nothing_is_read_until_codex_names_its_thread(tmp_path: Path) -> None:
    stdout, scratch = codex_attempt(tmp_path, thread=None)
    rollout(scratch / "codex", "2026/12/07", THREAD, (20_000, 100))
    find = codex_rollouts(scratch / "codex", stdout, None)
    assert find() == []
    stdout.write_text(json.dumps({"type": "thread.started", "thread_id": THREAD}) + "\n")
    assert len(find()) == 1


def test_a_rollout_through_a_link_or_of_another_user_is_not_read(tmp_path: Path) -> None:
    stdout, scratch = codex_attempt(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    rollout(elsewhere, "2026/12/07", THREAD, (20_000, 100))
    (scratch / "codex" / "sessions").mkdir()
    os.symlink(elsewhere / "sessions" / "2026", scratch / "codex" / "sessions" / "2026")
    assert codex_rollouts(scratch / "codex", stdout, None)() == []  # a linked folder is not entered
    assert thread_spent(scratch / "codex", THREAD, None) is None
    rollout(scratch / "codex", "2027/01/01", THREAD, (20_000, 100))
    [source] = codex_rollouts(scratch / "codex", stdout, os.getuid() + 1)()
    assert source.read() == [] and source.refused is not None and "belongs to uid" in source.refused


def test_a_planted_huge_total_in_a_non_thread_file_does_not_change_the_resumed_usage(tmp_path: Path) -> None:
    """At the interruption, where the thread's total stood is read from the thread's file only: a planted
    file's total (the newest name, a huge figure) would make the resumed attempt's usage 0."""
    _, scratch = codex_attempt(tmp_path)
    rollout(scratch / "codex", "2026/12/07", THREAD, (11, 7), (22, 14))
    rollout(scratch / "codex", "9999/12/31", OTHER, (10**12, 10**12), stamp="9999-12-31T23-59-59")
    before = thread_spent(scratch / "codex", THREAD, None)
    assert before is not None and (before.input_tokens, before.output_tokens) == (22, 14)
    running = Running("codex", before=before)
    running.feed(json.loads(token_count(33, 21)))
    assert (running.usage().input_tokens, running.usage().output_tokens) == (11, 7)


def test_two_files_named_for_the_thread_leave_nothing_to_take_off(tmp_path: Path) -> None:
    """Which one is codex's cannot be told: the resumed attempt counts the thread's whole total (the larger)."""
    _, scratch = codex_attempt(tmp_path)
    rollout(scratch / "codex", "2026/12/07", THREAD, (22, 14))
    rollout(scratch / "codex", "2026/12/08", THREAD, (10**12, 10**12), stamp="2026-12-08T00-00-00")
    assert thread_spent(scratch / "codex", THREAD, None) is None
    assert thread_spent(scratch / "codex", None, None) is None  # codex named no thread


def assistant(message_id: str, input_tokens: int, output_tokens: int = 1, block: str = "text") -> dict[str, Any]:
    """One line of claude 2.1.197's stream-json: each content block of a message is a line of its own, every
    one carrying the message's usage as it stood at its start (measured against tests/fakemodel)."""
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    return {"type": "assistant", "message": {"id": message_id, "content": [{"type": block}], "usage": usage}}


@pytest.mark.asyncio
async def test_a_forged_claude_line_re_using_a_message_id_with_zero_usage_does_not_lower_the_figure(
    tmp_path: Path,
) -> None:
    stdout = tmp_path / "stdout.log"
    real = [assistant("msg_1", 20_000), assistant("msg_1", 20_000, block="tool_use")]
    forged = assistant("msg_1", 0, 0)  # written into claude's stdout pipe by another process of the run user
    stdout.write_text("\n".join(json.dumps(line) for line in [*real, forged]) + "\n")
    meter = meter_for(adapter("claude-code"), "m", CAP, stdout, tmp_path, None)
    assert meter is not None
    assert await stopped_within(meter)
    assert meter.stopped is not None and meter.stopped["input_tokens"] == 20_000  # once: the two lines are one message


def test_the_lines_of_one_claude_message_count_once() -> None:
    running = Running("claude-code")
    for line in (assistant("a", 500), assistant("a", 500, block="tool_use"), assistant("b", 600)):
        running.feed(line)
    assert (running.usage().input_tokens, running.usage().output_tokens) == (1100, 2)


usages = st.fixed_dictionaries(
    {},
    optional={
        name: st.integers(0, 10**9)
        for name in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    },
)
records = st.one_of(
    st.builds(lambda i, u: {"type": "assistant", "message": {"id": i, "usage": u}}, st.sampled_from("abc"), usages),
    st.builds(
        lambda u: {"payload": {"type": "token_count", "info": {"total_token_usage": u}}},
        st.fixed_dictionaries({}, optional={n: st.integers(0, 10**9) for n in ("input_tokens", "output_tokens")}),
    ),
    st.just({"type": "assistant", "message": {"id": "a", "usage": {"input_tokens": "lots"}}}),
    st.just({"type": "assistant", "message": "not a message"}),
)


def counts(usage: Usage) -> tuple[int, ...]:
    return tuple(getattr(usage, kind) or 0 for kind in ("input_tokens", "output_tokens", "cache_read_tokens"))


@settings(max_examples=examples(400))
@given(st.sampled_from(["claude-code", "codex"]), st.lists(records, max_size=12), st.lists(records, max_size=12))
@example("claude-code", [assistant("a", 5)], [assistant("a", 0, 0)])
@example("codex", [json.loads(token_count(5, 5))], [json.loads(token_count(0, 9))])
def test_no_report_lowers_any_count(kind: str, first: list[dict[str, Any]], then: list[dict[str, Any]]) -> None:
    """Whatever lines follow (forged, re-used ids, lower totals, nonsense), no count of the figure goes down."""
    running = Running(kind)
    for record in first:
        running.feed(record)
    before = counts(running.usage())
    for record in then:
        running.feed(record)
    assert all(now >= was for now, was in zip(counts(running.usage()), before, strict=True))
