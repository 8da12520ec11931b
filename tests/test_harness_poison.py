"""Every harness parser is total, and its usage goes through the one judge (issue 23, finding 1).

Stream records shaped like the recorded ones (tests/fixtures/harness/) with poison mixed in — any JSON
value where an object was expected, strings where numbers were, nesting of any depth, huge numbers,
NaN/Infinity literals, non-UTF-8 bytes — never raise out of a parser. Usage numbers that are not a
whole count or a finite cost are unknown, named in `usage_problems`, and the run's own verdict stands."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import HARNESS_FIXTURES, examples, harness_fixture
from test_adapter_builders import ctx

from agentd.adapters.base import AdapterRun
from agentd.adapters.claude import ClaudeCodeAdapter, parse_claude_output
from agentd.adapters.codex import CodexAdapter, parse_codex_events
from agentd.adapters.harness import ParsedRun
from agentd.adapters.hermes import USAGE_FILE, HermesAgentAdapter, parse_hermes
from agentd.adapters.ollama import Stream, stream_run, take_line
from agentd.edge import check_value
from agentd.evidence.action_trace import parse_trace, trace_lines, trace_of
from agentd.process.output import CapturedOutput, ProcessResult
from agentd.records import PolicyDenial
from agentd.usage import MAX_COST_USD, MAX_TOKENS, TOKEN_KINDS, Usage

PROPERTY = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
DEEP = "[" * 200_000 + "]" * 200_000  # the line: json.loads raises RecursionError on it
# Raw JSON text spliced where a value was: what json.dumps would never write, and what it would.
RAW = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-1e999",
    "-1000",
    "1" + "0" * 30,
    "9" * 5000,  # longer than Python's int parser takes: json.loads raises ValueError
    DEEP,
    "[" * 900 + "]" * 900,  # parsed, and deeper than anything agentd stores
    '"1e999"',
    '"abc"',
    '"lots"',
    "[1, 2]",
    "{}",
    '{"a": {"b": [null]}}',
    "null",
    "true",
    "1.5",
    '"\\ud800"',
    '"' + "x" * 20_000 + '"',
]


def records_of(*names: str) -> list[dict[str, Any]]:
    found = []
    for name in names:
        text = harness_fixture(name).read_text(encoding="utf-8")
        lines = [text] if name.endswith(".json") else text.splitlines()
        found += [json.loads(line) for line in lines if line.strip()]
    return found


CLAUDE = records_of(*(p.name for p in sorted(HARNESS_FIXTURES.glob("claude_*.json*"))))
CODEX = records_of(*(p.name for p in sorted(HARNESS_FIXTURES.glob("codex_exec_*.jsonl"))))
HERMES = records_of(*(p.name for p in sorted(HARNESS_FIXTURES.glob("hermes_usage_*.json"))))
OLLAMA = records_of("ollama_generate_stream.ndjson", "ollama_generate_nostream.json")


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a record a value sits (the record itself excluded), to at most six levels."""
    found: list[tuple[Any, ...]] = []
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in children:
        found.append((*prefix, key))
        if len(prefix) < 6:
            found += paths(child, (*prefix, key))
    return found


def placeholder(index: int) -> str:
    return f"\x00raw{index}\x00"


def spliced(record: Any) -> str:
    """A record as one line, each placeholder replaced by its raw text."""
    line = json.dumps(record)
    for index, raw in enumerate(RAW):
        line = line.replace(json.dumps(placeholder(index)), raw)
    return line


@st.composite
def poisoned_lines(draw: st.DrawFn, records: list[dict[str, Any]]) -> list[str]:
    """The records of one recorded run (or a mix), some values replaced by poison, some lines by junk."""
    chosen = draw(st.lists(st.sampled_from(records), min_size=1, max_size=8))
    lines = []
    for record in chosen:
        record = json.loads(json.dumps(record))  # a copy to poison
        where = paths(record)
        for _ in range(draw(st.integers(0, 3)) if where else 0):
            *parents, last = draw(st.sampled_from(where))
            target = record
            try:
                for key in parents:
                    target = target[key]
                target[last] = placeholder(draw(st.integers(0, len(RAW) - 1)))
            except (KeyError, IndexError, TypeError):  # an earlier poison replaced a parent
                pass
        lines.append(spliced(record))
        if draw(st.integers(0, 5)) == 0:
            lines.append(draw(st.sampled_from([*RAW, "{not json", '{"type": "result"', "\x1b[2J banner"])))
    return lines


def sane_usage(usage: Usage) -> None:
    for key in TOKEN_KINDS:
        value = getattr(usage, key)
        assert value is None or (type(value) is int and 0 <= value <= MAX_TOKENS), (key, value)
    assert usage.cost_usd is None or (type(usage.cost_usd) is float and 0 <= usage.cost_usd <= MAX_COST_USD)
    assert math.isfinite(usage.cost_usd or 0.0)


def sane(run: ParsedRun | AdapterRun) -> None:
    """What every parser hands on is something every later step can hold."""
    sane_usage(run.usage)
    check_value(run.diagnostics, "diagnostics")  # what the commit stores: no NaN, no depth, int64
    json.dumps(run.diagnostics, allow_nan=False)
    for text in (run.final_message, run.failure, run.model):
        assert text is None or isinstance(text, str)
    assert all(isinstance(d, PolicyDenial) for d in run.denials)
    problems = run.diagnostics.get("usage_problems", [])
    assert isinstance(problems, list) and all(isinstance(p, str) and len(p) < 1000 for p in problems)


@PROPERTY
@given(poisoned_lines(CLAUDE))
def test_the_claude_parser_is_total(lines: list[str]) -> None:
    sane(parse_claude_output("\n".join(lines)))


@PROPERTY
@given(poisoned_lines(CODEX))
def test_the_codex_parser_is_total(lines: list[str]) -> None:
    sane(parse_codex_events("\n".join(lines)))


@PROPERTY
@given(poisoned_lines(HERMES), st.text(max_size=50))
def test_the_hermes_parser_is_total(lines: list[str], stdout: str) -> None:
    sane(parse_hermes(lines[0], stdout))
    sane(parse_hermes("\n".join(lines), stdout))


@PROPERTY
@given(poisoned_lines(OLLAMA), st.booleans())
def test_the_ollama_parser_is_total(lines: list[str], timed_out: bool) -> None:
    stream = Stream()
    for line in lines:
        if not take_line(line, stream):
            break
    sane(stream_run(stream, "fake-model", timed_out, 0.5))


# --- through the adapters: bytes as the process wrote them, non-UTF-8 included ---------------------------


def finished(tmp_path: Path, stdout: bytes) -> ProcessResult:
    out = tmp_path / "attempt" / "stdout.log"
    out.write_bytes(stdout)
    captured = CapturedOutput(out, len(stdout), len(stdout))
    return ProcessResult(4242, 0, None, False, None, captured, captured, 0.1)


BYTES_POISON = [b"\xff\xfe", b"\xed\xa0\x80", b"\x00", b"\x1b[2J", b"\xc3", b"\n"]


@st.composite
def poisoned_bytes(draw: st.DrawFn, records: list[dict[str, Any]]) -> bytes:
    """Poisoned lines as bytes, with bytes no UTF-8 decoder takes spliced in at random places."""
    data = "\n".join(draw(poisoned_lines(records))).encode("utf-8", "surrogatepass")
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from(BYTES_POISON)) + data[at:]
    return data


@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_every_harness_adapter_and_its_trace_read_any_bytes(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    kinds: dict[str, tuple[Callable[[], Any], list[dict[str, Any]]]] = {
        "claude-code": (ClaudeCodeAdapter, CLAUDE),
        "codex": (CodexAdapter, CODEX),
        "hermes-agent": (HermesAgentAdapter, HERMES),
    }
    kind = data.draw(st.sampled_from(sorted(kinds)))
    make, records = kinds[kind]
    context = ctx(tmp_path_factory.mktemp("poison"), {"kind": kind})
    stdout = data.draw(poisoned_bytes(records))
    if kind == "hermes-agent":
        context.paths.reported(USAGE_FILE).parent.mkdir(parents=True, exist_ok=True)
        context.paths.reported(USAGE_FILE).write_bytes(data.draw(poisoned_bytes(HERMES)))
    sane(make().parse(context, finished(context.paths.root.parent, stdout)))
    steps = trace_of(kind, context.paths.root)  # the action trace reads the same stream
    assert parse_trace(trace_lines(steps).encode()) == [step.as_dict() for step in steps]


# --- the issue's own examples: the work's verdict stands, the number is unknown and said ----------------


CLAUDE_SUCCESS = json.loads(harness_fixture("claude_json_success.json").read_text())


@pytest.mark.parametrize(
    ("where", "raw"),
    [
        (("total_cost_usd",), '"1e999"'),
        (("total_cost_usd",), "1e999"),
        (("total_cost_usd",), "-1000"),
        (("usage", "input_tokens"), "Infinity"),
        (("usage", "input_tokens"), '"abc"'),
        (("usage", "output_tokens"), "1" + "0" * 30),
        (("usage", "cache_read_input_tokens"), '"lots"'),
        (("usage", "cache_creation_input_tokens"), "[1, 2]"),
        (("usage",), '"lots"'),
        (("modelUsage",), "[1, 2]"),
        (("modelUsage", "claude-opus-4-8[1m]", "costUSD"), "NaN"),
    ],
)
def test_a_bad_claude_number_is_unknown_usage_and_the_run_still_succeeds(where: tuple[str, ...], raw: str) -> None:
    record = json.loads(json.dumps(CLAUDE_SUCCESS))
    target = record
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = "\x00mark\x00"
    run = parse_claude_output(json.dumps(record).replace(json.dumps("\x00mark\x00"), raw))
    assert run.finished and run.succeeded and run.final_message, run
    sane(run)
    if where[0] in ("total_cost_usd", "usage"):
        assert any(where[-1] in problem for problem in run.diagnostics["usage_problems"]), run.diagnostics
        assert run.usage.input_tokens is None or run.usage.input_tokens == 11


def test_a_string_message_and_a_line_nested_200k_deep_leave_the_verdict_standing() -> None:
    lines = harness_fixture("claude_stream_json_tool_use.jsonl").read_text().splitlines()
    noise = ['{"type": "assistant", "message": "a string, not an object"}', DEEP, "{" + DEEP[:1000], '{"a": ' + DEEP]
    run = parse_claude_output("\n".join([*lines[:-1], *noise, lines[-1]]))
    assert run.finished and run.succeeded and run.diagnostics["tool_uses"] == ["Bash"], run
    assert run.diagnostics["unusable_lines"] == 3  # the string message, the two deep lines starting with {
    sane(run)


@pytest.mark.parametrize("raw", ["Infinity", '"abc"', "-5", "1" + "0" * 30, "[1, 2]", "1.5"])
def test_codex_hermes_and_ollama_counts_are_judged_too(raw: str) -> None:
    codex = (
        harness_fixture("codex_exec_json_success.jsonl")
        .read_text()
        .replace('"input_tokens":11', f'"input_tokens":{raw}')
    )
    assert raw in codex
    run = parse_codex_events(codex)
    assert run.succeeded and run.usage.input_tokens is None and run.usage.output_tokens == 7
    assert "codex turn.completed.usage.input_tokens" in run.diagnostics["usage_problems"][0]
    hermes = (
        harness_fixture("hermes_usage_success.json")
        .read_text()
        .replace('"output_tokens": 7', f'"output_tokens": {raw}')
    )
    assert raw in hermes
    run = parse_hermes(hermes, "done")
    assert run.succeeded and run.usage.output_tokens is None and run.usage.input_tokens == 11
    assert "hermes usage file.output_tokens" in run.diagnostics["usage_problems"][0]
    stream = Stream()
    done = (
        harness_fixture("ollama_generate_nostream.json").read_text().replace('"eval_count": 7', f'"eval_count": {raw}')
    )
    assert raw in done and take_line(done, stream)
    adapter_run = stream_run(stream, "m", False, 0.1)
    assert adapter_run.ok and adapter_run.usage.output_tokens is None and adapter_run.usage.input_tokens == 11
    assert "ollama done record.eval_count" in adapter_run.diagnostics["usage_problems"][0]
