"""The action trace, read from the real harness outputs the project recorded (tests/fixtures/harness/,
`make record-fixtures`), from hand-made streams, and from whatever hypothesis can print."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples, harness_fixture

from agentd.adapters.hermes import USAGE_FILE
from agentd.adapters.hermes_session import SESSION_FILE, session_document
from agentd.evidence import EVIDENCE_FILES
from agentd.evidence.action_trace import (
    HERMES_SESSION_FILE,
    HERMES_USAGE_FILE,
    SUMMARY_MAX_CHARS,
    TRACE_FILE,
    Step,
    read_trace,
    trace_lines,
    trace_of,
)
from agentd.hashing import canonical_json, sha256_file, sha256_hex

KINDS = ("claude-code", "codex", "hermes-agent", "ollama-generate", "script", "subprocess")
COMMAND = "echo tool-ran-ok > /srv/agent/work/tool_marker.txt; echo tool-ran-ok"
DONE = 'Done.\n```json\n{"outcome": "success", "marker": "tool-ran-ok"}\n```'


def sample(name: str) -> Path:
    return harness_fixture(name)


def attempt(root: Path, stdout: str, **files: str) -> Path:
    """An attempt folder whose stdout.log is the named sample; `files` maps a file name to a sample."""
    shutil.copyfile(sample(stdout), root / "stdout.log")
    for name, source in files.items():
        shutil.copyfile(sample(source), root / name)
    return root


def digest(text: str) -> str:
    return sha256_hex(text.encode())


def message(step: int, text: str, summary: str | None = None) -> Step:
    shown = summary if summary is not None else text.replace("\n", "\\n")
    return Step(step, "message", None, None, digest(text), None, None, None, shown)


def write_lines(root: Path, records: list[dict[str, Any]]) -> Path:
    (root / "stdout.log").write_text("".join(json.dumps(record) + "\n" for record in records))
    return root


def test_the_files_read_are_the_ones_the_adapters_write() -> None:
    assert HERMES_USAGE_FILE == USAGE_FILE and HERMES_SESSION_FILE == SESSION_FILE
    assert {USAGE_FILE, SESSION_FILE} <= set(EVIDENCE_FILES)
    assert {"prompt.md", "stdin.json", "stdout.log"} <= set(EVIDENCE_FILES)


# claude-code


def test_claude_tool_use_gives_text_tool_and_text_in_stream_order(tmp_path: Path) -> None:
    steps = trace_of("claude-code", attempt(tmp_path, "claude_stream_json_tool_use.jsonl"))
    arguments = {"command": COMMAND, "description": "write marker"}
    assert steps == [
        message(1, "Running a command."),
        Step(
            2,
            "tool",
            "Bash",
            sha256_hex(canonical_json(arguments)),
            digest("tool-ran-ok"),
            False,
            None,  # the assistant line carries no time
            "2026-11-25T17:20:09.932000Z",  # the tool_result's line does
            COMMAND,
        ),
        message(3, DONE),
    ]


def test_claude_api_error_stream_is_one_message_not_repeated_by_the_result_record(tmp_path: Path) -> None:
    steps = trace_of("claude-code", attempt(tmp_path, "claude_stream_json_http500.jsonl"))
    assert [(s.step, s.kind) for s in steps] == [(1, "message")]
    assert steps[0].summary is not None and steps[0].summary.startswith("API Error: 500 fake server injected error")


@pytest.mark.parametrize(
    "name",
    [
        "claude_json_success.json",
        "claude_json_http429.json",
        "claude_json_http500.json",
        "claude_json_no_api_key.json",
        "claude_json_permission_denied.json",
        "claude_json_error_max_turns.json",
    ],
)
def test_claude_single_json_output_gives_its_result_as_the_one_message(tmp_path: Path, name: str) -> None:
    document = json.loads(sample(name).read_text())
    steps = trace_of("claude-code", attempt(tmp_path, name))
    expected = [document["result"]] if "result" in document else []  # error_max_turns has no result text
    assert [s.result_sha256 for s in steps] == [digest(text) for text in expected]
    assert all(s.kind == "message" for s in steps)


def test_claude_results_are_paired_with_their_call_by_id_when_calls_interleave(tmp_path: Path) -> None:
    def call(call_id: str, command: str) -> dict[str, Any]:
        block = {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}}
        return {"type": "assistant", "message": {"content": [block]}}

    def result(call_id: str, content: Any, is_error: bool) -> dict[str, Any]:
        block = {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error}
        return {"type": "user", "message": {"content": [block]}}

    records = [
        call("a", "ls /nowhere"),
        call("b", "echo hi"),
        result("b", [{"type": "text", "text": "hi"}, {"type": "image"}, {"type": "text", "text": "there"}], False),
        result("unknown", "dropped", False),
        result("a", "ls: cannot access", True),
    ]
    steps = trace_of("claude-code", write_lines(tmp_path, records))
    assert [(s.step, s.summary, s.result_sha256, s.is_error) for s in steps] == [
        (1, "ls /nowhere", digest("ls: cannot access"), True),
        (2, "echo hi", digest("hi\nthere"), False),
    ]


def test_claude_call_killed_before_its_result_has_no_result(tmp_path: Path) -> None:
    lines = sample("claude_stream_json_tool_use.jsonl").read_text().splitlines()
    (tmp_path / "stdout.log").write_text("\n".join(lines[:3]) + "\n" + lines[3][:40])  # cut inside the result
    steps = trace_of("claude-code", tmp_path)
    assert [(s.kind, s.tool, s.result_sha256, s.is_error) for s in steps] == [
        ("message", None, digest("Running a command."), None),
        ("tool", "Bash", None, None),
    ]


def test_claude_odd_inputs_still_give_steps(tmp_path: Path) -> None:
    blocks = [
        {"type": "tool_use", "id": "x", "name": "Write\x1b[31m", "input": {"bad": float("nan"), "n": 2**70}},
        {"type": "text", "text": "é" * 500},
        {"type": "tool_use", "id": ["not", "text"], "name": 7},
    ]
    stdout = json.dumps({"type": "assistant", "message": {"content": blocks}}).encode()
    (tmp_path / "stdout.log").write_bytes(b"\xff\xfe not json\n" + stdout + b"\n[1, 2]\n")
    steps = trace_of("claude-code", tmp_path)
    assert [s.kind for s in steps] == ["tool", "message", "tool"]
    assert steps[0].tool == "Write\\x1b[31m"
    assert steps[0].arguments_sha256 == sha256_hex(canonical_json({"bad": None, "n": str(2**70)}))
    assert steps[1].summary is not None and len(steps[1].summary) == SUMMARY_MAX_CHARS
    assert steps[1].summary.endswith("é… (+314 chars)")  # a cut says how much it left out
    assert (steps[2].tool, steps[2].arguments_sha256, steps[2].summary) == (None, None, None)


# codex


def test_codex_tool_use_pairs_started_and_completed_and_skips_the_warning_item(tmp_path: Path) -> None:
    steps = trace_of("codex", attempt(tmp_path, "codex_exec_json_tool_use.jsonl"))
    command = f"/bin/bash -lc '{COMMAND}'"
    assert steps == [
        message(1, "Running a command."),
        Step(2, "tool", "command_execution", digest(command), digest("tool-ran-ok\n"), False, None, None, command),
        message(3, DONE),
    ]


def test_codex_non_zero_exit_is_an_error_and_a_call_never_completed_has_no_result(tmp_path: Path) -> None:
    lines = sample("codex_exec_json_tool_use.jsonl").read_text().splitlines()
    failed = json.loads(lines[5])
    failed["item"].update(exit_code=2, status="failed", aggregated_output="boom")
    started_again = json.loads(lines[4])
    started_again["item"]["id"] = "item_9"
    (tmp_path / "stdout.log").write_text("\n".join([*lines[:5], json.dumps(failed), json.dumps(started_again)]))
    steps = trace_of("codex", tmp_path)
    assert [(s.step, s.kind, s.result_sha256, s.is_error) for s in steps] == [
        (1, "message", digest("Running a command."), None),
        (2, "tool", digest("boom"), True),
        (3, "tool", None, None),
    ]


@pytest.mark.parametrize(
    ("name", "texts"),
    [
        ("codex_exec_json_success.jsonl", ['Hi from fake. ```json\n{"outcome": "ok"}\n```']),
        ("codex_exec_json_unknown_model_warning.jsonl", ['Hi from fake. ```json\n{"outcome": "ok"}\n```']),
        ("codex_exec_json_http500.jsonl", []),
        ("codex_exec_json_http429.jsonl", []),
        ("codex_exec_json_stream_idle_timeout.jsonl", []),
    ],
)
def test_codex_streams_without_tools(tmp_path: Path, name: str, texts: list[str]) -> None:
    assert trace_of("codex", attempt(tmp_path, name)) == [message(n, t) for n, t in enumerate(texts, 1)]


def test_codex_undocumented_item_types_are_named_steps_without_digests(tmp_path: Path) -> None:
    records = [
        {"type": "item.started", "item": {"id": "i1", "type": "mcp_tool_call", "status": "in_progress"}},
        {"type": "item.completed", "item": {"id": "i0", "type": "reasoning", "text": "thinking"}},
        {"type": "item.completed", "item": {"id": "i1", "type": "mcp_tool_call", "status": "failed"}},
    ]
    steps = trace_of("codex", write_lines(tmp_path, records))
    assert steps == [Step(1, "tool", "mcp_tool_call", None, None, True, None, None, None)]


# hermes-agent


def test_hermes_is_one_message_saying_how_many_api_calls_it_made(tmp_path: Path) -> None:
    root = attempt(tmp_path, "hermes_oneshot_tool_use.txt", **{USAGE_FILE: "hermes_usage_tool_use.json"})
    summary = "hermes-usage.json: api_calls=2; final text: " + DONE.replace("\n", "\\n")
    assert trace_of("hermes-agent", root) == [message(1, DONE, summary)]


HERMES_SESSION = Path(__file__).parent / "fixtures" / "hermes" / "session_tool_use.json"  # hermes-agent 0.19.0's
# own `sessions/session_<id>.json` from a `hermes -z` run against tests/fakemodel (one terminal call, then a
# reply), its system prompt and all but the terminal tool's schema trimmed


def hermes_scratch(root: Path, *snapshots: str) -> Path:
    """An attempt's scratch dir as hermes leaves it: its session snapshots under hermes/sessions."""
    folder = root / "scratch" / "hermes" / "sessions"
    folder.mkdir(parents=True)
    for number, text in enumerate(snapshots):
        (folder / f"session_2026112{number}_000000_abcdef.json").write_text(text)
    return root / "scratch"


def kept_session(root: Path, *snapshots: str) -> Path:
    """What the hermes adapter keeps of them: the evidence folder with hermes-session.json."""
    document = session_document(hermes_scratch(root, *snapshots), None)
    evidence = root / "evidence"
    evidence.mkdir()
    (evidence / SESSION_FILE).write_text(json.dumps(document))
    return evidence


def test_hermes_session_snapshot_gives_its_tool_call_with_result_then_its_reply(tmp_path: Path) -> None:
    evidence = kept_session(tmp_path, HERMES_SESSION.read_text())
    tool, reply = trace_of("hermes-agent", evidence)
    call = json.loads(HERMES_SESSION.read_text())["messages"][1]["tool_calls"][0]["function"]
    assert (tool.kind, tool.tool, tool.summary, tool.is_error) == ("tool", "terminal", "echo hi > made.txt", False)
    assert tool.arguments_sha256 == sha256_hex(canonical_json(json.loads(call["arguments"])))
    assert tool.result_sha256 == digest('{"output": "", "exit_code": 0, "error": null}')
    assert reply == message(2, "all done")


def test_hermes_sessions_are_read_in_order_and_a_failed_or_unanswered_call_says_so(tmp_path: Path) -> None:
    def snapshot(messages: list[dict[str, Any]]) -> str:
        return json.dumps({"session_id": "s", "messages": messages})

    def call(call_id: str, command: str) -> dict[str, Any]:
        arguments = json.dumps({"command": command})
        return {"id": call_id, "type": "function", "function": {"name": "terminal", "arguments": arguments}}

    first = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "trying", "tool_calls": [call("a", "false"), call("b", "sleep 9")]},
        {"role": "tool", "tool_call_id": "a", "content": json.dumps({"output": "", "exit_code": 1, "error": None})},
    ]
    second = [{"role": "tool", "tool_call_id": "zzz", "content": "an answer to no call"}, {"role": "assistant"}]
    steps = trace_of("hermes-agent", kept_session(tmp_path, snapshot(first), snapshot(second), "not json"))
    assert [(s.kind, s.summary, s.is_error, s.result_sha256 is None) for s in steps] == [
        ("message", "trying", None, False),
        ("tool", "false", True, False),
        ("tool", "sleep 9", None, True),
    ]
    problems = json.loads((tmp_path / "evidence" / SESSION_FILE).read_text())["problems"]
    assert problems == ["session_20261122_000000_abcdef.json: not JSON"]


def test_hermes_snapshot_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(HERMES_SESSION.read_text())
    scratch = hermes_scratch(tmp_path)
    (scratch / "hermes" / "sessions" / "session_1.json").symlink_to(secret)
    document = session_document(scratch, None)
    assert document is not None and document["sessions"] == [] and "cannot read it" in document["problems"][0]
    assert session_document(tmp_path / "nowhere", None) is None


def test_hermes_without_a_usage_file_or_output(tmp_path: Path) -> None:
    steps = trace_of("hermes-agent", attempt(tmp_path, "hermes_oneshot_http500_stdout.txt"))
    assert [s.summary for s in steps] == [
        "hermes-usage.json: api_calls=unknown; final text: API call failed after 1 retries: HTTP 500: "
        "fake server injected error 500"
    ]
    (tmp_path / "stdout.log").write_text("\n")
    assert trace_of("hermes-agent", tmp_path) == []


# ollama-generate and script


def test_ollama_is_one_generate_step_with_the_attempt_times(tmp_path: Path) -> None:
    root = attempt(tmp_path, "ollama_generate_stream.ndjson")
    (root / "prompt.md").write_text("Say hello.\n")
    steps = trace_of("ollama-generate", root, started_at="2026-11-22T10:00:00Z", ended_at="2026-11-22T10:00:01Z")
    assert steps == [
        Step(
            1,
            "generate",
            None,
            sha256_file(root / "prompt.md"),
            sha256_file(root / "stdout.log"),
            False,
            "2026-11-22T10:00:00.000000Z",
            "2026-11-22T10:00:01.000000Z",
            "Say hello.\\n",
        )
    ]
    (root / "stdout.log").write_text('{"error": "model not found"}\n')
    assert [s.is_error for s in trace_of("ollama-generate", root)] == [True]


@pytest.mark.parametrize(("exit_code", "is_error"), [(0, False), (3, True), (-15, True), (None, None)])
def test_script_is_one_command_step(tmp_path: Path, exit_code: int | None, is_error: bool | None) -> None:
    (tmp_path / "stdin.json").write_text('{"n": 1}')
    (tmp_path / "stdout.log").write_bytes(b"done\n\xff")
    steps = trace_of("script", tmp_path, exit_code=exit_code, started_at="2026-11-22T10:00:00.000000Z")
    assert steps == [
        Step(
            1,
            "command",
            "script",
            sha256_hex(b'{"n": 1}'),
            sha256_hex(b"done\n\xff"),
            is_error,
            "2026-11-22T10:00:00.000000Z",
            None,
            None,
        )
    ]


def test_missing_evidence_gives_only_what_can_be_said(tmp_path: Path) -> None:
    assert trace_of("script", tmp_path, exit_code=0) == [
        Step(1, "command", "script", None, None, False, None, None, None)
    ]
    assert [trace_of(kind, tmp_path / "gone") for kind in KINDS if kind != "script"] == [[]] * 5


# the file


def test_trace_lines_are_canonical_and_read_back(tmp_path: Path) -> None:
    steps = trace_of("claude-code", attempt(tmp_path, "claude_stream_json_tool_use.jsonl"))
    text = trace_lines(steps)
    assert text.endswith("}\n") and text.count("\n") == 3
    assert text.splitlines()[0] == canonical_json(steps[0].as_dict()).decode()
    assert trace_lines([]) == ""
    (tmp_path / TRACE_FILE).write_text(text)
    assert read_trace(tmp_path / TRACE_FILE) == [s.as_dict() for s in steps]
    assert read_trace(tmp_path / "missing.jsonl") == []


@pytest.mark.parametrize("bad", ['{"step": 1', "[1]", '{"x": NaN}', '{"x": "\xff"}'])
def test_read_trace_names_the_bad_line(tmp_path: Path, bad: str) -> None:
    path = tmp_path / TRACE_FILE
    path.write_bytes(b'{"step": 1}\n\n' + bad.encode("latin-1") + b"\n")
    with pytest.raises(ValueError, match=r"^line 3: "):
        read_trace(path)


# properties

WORDS = ["assistant", "user", "result", "text", "tool_use", "tool_result", "item.started", "item.completed"]
WORDS += ["command_execution", "agent_message", "reasoning", "completed", "failed", "a", "b", "2026-11-22T03:38:49Z"]
KEYS = ["type", "message", "content", "id", "name", "input", "tool_use_id", "is_error", "text", "result", "item"]
KEYS += ["command", "aggregated_output", "exit_code", "status", "timestamp", "api_calls", "done", "error"]
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.sampled_from(WORDS) | st.text(max_size=20)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), inner),
    max_leaves=25,
)
LINES = st.lists(
    JSONISH.map(json.dumps)  # NaN and Infinity come out as their non-standard literals
    | st.tuples(JSONISH.map(json.dumps), st.integers(0, 30)).map(lambda cut: cut[0][: cut[1]])
    | st.text(max_size=40),
    max_size=12,
).map("\n".join)
CONTENT = LINES.map(str.encode) | st.binary(max_size=300) | st.text().map(lambda t: t.encode("utf-8", "surrogatepass"))


@settings(max_examples=examples(200), deadline=None)
@given(stdout=CONTENT, usage=CONTENT, exit_code=st.none() | st.integers(-255, 255))
def test_no_output_breaks_the_trace(stdout: bytes, usage: bytes, exit_code: int | None) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        files = {"stdout.log": stdout, USAGE_FILE: usage, SESSION_FILE: stdout, "prompt.md": usage, "stdin.json": usage}
        for name, data in files.items():
            (root / name).write_bytes(data)
        for kind in KINDS:
            steps = trace_of(kind, root, exit_code=exit_code, started_at="2026-11-22T10:00:00Z")
            assert [s.step for s in steps] == list(range(1, len(steps) + 1))
            for s in steps:
                assert all(d is None or (len(d) == 64 and set(d) <= set("0123456789abcdef")) for d in digests(s))
                assert s.summary is None or len(s.summary) <= SUMMARY_MAX_CHARS
            (root / TRACE_FILE).write_text(trace_lines(steps), encoding="utf-8")
            assert read_trace(root / TRACE_FILE) == [s.as_dict() for s in steps]


def digests(step: Step) -> list[str | None]:
    return [step.arguments_sha256, step.result_sha256]


@settings(max_examples=examples(100), deadline=None)
@given(outputs=st.lists(st.text(max_size=10), min_size=1, max_size=6), order=st.randoms())
def test_every_result_finds_its_own_call_in_any_order(outputs: list[str], order: Any) -> None:
    calls = [
        {"type": "assistant", "message": {"content": [{"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": n}]}}
        for n in range(len(outputs))
    ]
    results = [
        {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": out}]}}
        for n, out in enumerate(outputs)
    ]
    order.shuffle(results)
    with tempfile.TemporaryDirectory() as folder:
        steps = trace_of("claude-code", write_lines(Path(folder), calls + results))
    assert [s.result_sha256 for s in steps] == [digest(out) for out in outputs]


HERMES_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["assistant", "tool", "user", 3])},
    optional={
        "content": JSONISH | JSONISH.map(json.dumps),
        "tool_call_id": st.sampled_from(["a", "b", 1, None]),
        "tool_calls": st.lists(
            st.fixed_dictionaries(
                {"id": st.sampled_from(["a", "b", 1, None])},
                optional={"function": JSONISH | st.fixed_dictionaries({"name": JSONISH, "arguments": JSONISH})},
            )
            | JSONISH,
            max_size=3,
        ),
    },
)


@settings(max_examples=examples(200), deadline=None)
@given(sessions=st.lists(st.fixed_dictionaries({"messages": st.lists(HERMES_MESSAGE | JSONISH, max_size=6)})) | JSONISH)
def test_any_hermes_session_gives_numbered_bounded_steps(sessions: Any) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / SESSION_FILE).write_text(json.dumps({"sessions": sessions}))
        steps = trace_of("hermes-agent", root)
        assert [s.step for s in steps] == list(range(1, len(steps) + 1))
        assert all(s.kind in ("tool", "message") for s in steps)
        assert all(s.summary is None or len(s.summary) <= SUMMARY_MAX_CHARS for s in steps)
        assert all(d is None or len(d) == 64 for s in steps for d in digests(s))
