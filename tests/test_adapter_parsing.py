"""Every recorded harness output parses right: the project's own fixtures (tests/fixtures/harness/, recorded
from the pinned CLIs by `make record-fixtures`), and the third-party reference samples where they are at hand."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from harness.record import Clis, record_all
from harness.scenarios import SCENARIOS
from pydantic import TypeAdapter
from support import REPO, harness_fixture, harness_sample, reference_dir, serve_in_thread, write_config
from test_adapter_builders import ctx
from test_fixtures import MANIFEST, REFERENCE_SAMPLES

from agentd.adapters.base import Usage
from agentd.adapters.claude import parse_claude_output
from agentd.adapters.codex import parse_codex_events
from agentd.adapters.harness import RATE_LIMIT, ParsedRun, estimate_cost
from agentd.adapters.hermes import HermesAgentAdapter, parse_hermes
from agentd.adapters.ollama import OllamaGenerateAdapter
from agentd.adapters.probe import probe_adapters
from agentd.attempt.outcome import extract_outcome
from agentd.records import AdapterConfig, TokenPrice
from agentd.work.validation import load_config

# --- claude ---------------------------------------------------------------------------------------


def test_claude_success_gives_text_cost_tokens_and_model() -> None:
    run = parse_claude_output(harness_sample("claude_json_success.json"))
    assert run.finished and run.succeeded and run.failure is None
    assert run.final_message == 'Hi from fake. ```json\n{"outcome": "ok"}\n```'
    assert run.usage == Usage(
        input_tokens=11, output_tokens=7, cache_read_tokens=0, cache_write_tokens=0, cost_usd=0.00023
    )
    assert run.model == "claude-opus-4-8"


@pytest.mark.parametrize(("name", "status"), [("claude_json_http500.json", 500), ("claude_json_http429.json", 429)])
def test_claude_api_errors_fail_although_subtype_says_success(name: str, status: int) -> None:
    run = parse_claude_output(harness_sample(name))
    assert json.loads(harness_sample(name))["subtype"] == "success"
    assert run.finished and not run.succeeded
    assert run.diagnostics["api_error_status"] == status
    assert run.failure and run.failure.startswith("API Error:")
    assert bool(RATE_LIMIT.search(run.failure)) == (status == 429)


def test_claude_max_turns_and_no_api_key_are_failures() -> None:
    turns = parse_claude_output(harness_sample("claude_json_error_max_turns.json"))
    assert not turns.succeeded and turns.failure == "Reached maximum number of turns (1)"
    key = parse_claude_output(harness_sample("claude_json_no_api_key.json"))
    assert not key.succeeded and "Not logged in" in (key.failure or "")


def test_claude_permission_denied_succeeds_but_counts_the_denial() -> None:
    run = parse_claude_output(harness_sample("claude_json_permission_denied.json"))
    assert run.succeeded and run.diagnostics["permission_denials"] >= 1


def test_claude_stream_json_keeps_the_tool_trace() -> None:
    run = parse_claude_output(harness_sample("claude_stream_json_tool_use.jsonl"))
    assert run.succeeded and run.diagnostics["tool_uses"] == ["Bash"]
    assert run.model == "claude-sonnet-4-5" and run.usage.cost_usd == pytest.approx(0.000276)
    assert extract_outcome(None, run.final_message).problem is not None  # a ```json block, but not a TaskOutcome
    failed = parse_claude_output(harness_sample("claude_stream_json_http500.jsonl"))
    assert not failed.succeeded and failed.diagnostics["api_error_status"] == 500


def test_claude_text_mode_and_a_cut_stream_are_not_finished() -> None:
    assert not parse_claude_output(harness_sample("claude_text_http500.txt")).finished
    init_only = harness_sample("claude_stream_json_tool_use.jsonl").splitlines()[0]
    cut = parse_claude_output(init_only)
    assert not cut.finished and "no result record" in (cut.failure or "")


# --- codex ----------------------------------------------------------------------------------------


def test_codex_success_gives_text_and_tokens() -> None:
    run = parse_codex_events(harness_sample("codex_exec_json_success.jsonl"))
    assert run.finished and run.succeeded
    assert run.final_message == harness_sample("codex_output_last_message.txt").rstrip("\n")
    assert (run.usage.input_tokens, run.usage.output_tokens, run.usage.cache_read_tokens) == (11, 7, 0)
    assert run.usage.cost_usd is None  # codex reports no cost


def test_an_error_item_alone_is_a_warning_not_a_failure() -> None:
    run = parse_codex_events(harness_sample("codex_exec_json_unknown_model_warning.jsonl"))
    assert run.succeeded and "Model metadata for `fake-model` not found" in run.diagnostics["warnings"][0]


def test_codex_tool_use_lists_the_commands() -> None:
    run = parse_codex_events(harness_sample("codex_exec_json_tool_use.jsonl"))
    assert run.succeeded and "tool_marker.txt" in run.diagnostics["commands"][0]
    assert run.final_message and run.final_message.startswith("Done.")


@pytest.mark.parametrize(
    ("name", "limited"),
    [
        ("codex_exec_json_http500.jsonl", False),
        ("codex_exec_json_http429.jsonl", True),
        ("codex_exec_json_stream_idle_timeout.jsonl", False),
    ],
)
def test_codex_turn_failed_is_a_failure(name: str, limited: bool) -> None:
    run = parse_codex_events(harness_sample(name))
    assert run.finished and not run.succeeded and run.failure
    assert bool(RATE_LIMIT.search(run.failure)) == limited


def test_codex_cut_off_before_turn_completed_is_not_finished() -> None:
    head = "\n".join(harness_sample("codex_exec_json_success.jsonl").splitlines()[:2])
    assert not parse_codex_events(head).finished


def test_codex_cost_is_estimated_from_the_price_table() -> None:
    price = TokenPrice(input_per_mtok=2.0, output_per_mtok=8.0, cached_input_per_mtok=0.5)
    estimated = estimate_cost(Usage(input_tokens=1_000_000, output_tokens=500_000, cache_read_tokens=200_000), price)
    assert estimated.cost_usd == pytest.approx(0.8 * 2 + 0.2 * 0.5 + 0.5 * 8)
    assert estimated.cost_estimated


# --- hermes ---------------------------------------------------------------------------------------


def test_hermes_success_is_judged_by_the_usage_file() -> None:
    run = parse_hermes(harness_sample("hermes_usage_success.json"), harness_sample("hermes_oneshot_success.txt"))
    assert run.succeeded and run.final_message == harness_sample("hermes_oneshot_success.txt").strip()
    assert (run.usage.input_tokens, run.usage.output_tokens) == (11, 7)
    assert run.usage.cost_usd is None and run.diagnostics["cost_status"] == "unknown"
    tool = parse_hermes(harness_sample("hermes_usage_tool_use.json"), harness_sample("hermes_oneshot_tool_use.txt"))
    assert tool.succeeded and extract_outcome(None, tool.final_message).source == "none"
    assert tool.diagnostics["api_calls"] == 2


@pytest.mark.parametrize(
    ("stdout", "usage", "limited"),
    [
        ("hermes_oneshot_http500_stdout.txt", "hermes_usage_http500.json", False),
        ("hermes_oneshot_http429_stdout.txt", "hermes_usage_http429.json", True),
        ("hermes_oneshot_hang_stdout.txt", "hermes_usage_hang.json", False),
    ],
)
def test_hermes_exit_0_with_failed_usage_is_a_failure(stdout: str, usage: str, limited: bool) -> None:
    run = parse_hermes(harness_sample(usage), harness_sample(stdout))
    assert run.finished and not run.succeeded and run.final_message is None
    assert run.failure == harness_sample(stdout).strip()
    assert bool(RATE_LIMIT.search(run.failure)) == limited


def test_hermes_without_a_usage_file_was_killed() -> None:
    run = parse_hermes(None, "")
    assert not run.finished and "no usage file" in (run.failure or "")


def test_hermes_chat_mode_banner_is_not_mistaken_for_the_answer(tmp_path: Path) -> None:
    """The -Q chat mode prints a warning line before the text; agentd asks for -z, whose stdout is the
    text, and never takes a chat-mode transcript's ```json block for a TaskOutcome."""
    built = HermesAgentAdapter().build(ctx(tmp_path, {"kind": "hermes-agent", "base_url": "http://127.0.0.1:9/v1"}))
    assert built.argv[1] == "-z" and "-Q" not in built.argv
    chat = harness_sample("hermes_chat_q_quiet.txt")
    run = parse_hermes(harness_sample("hermes_usage_success.json"), chat)
    assert run.final_message == chat.strip() and extract_outcome(None, run.final_message).source == "none"


# --- the exit codes the CLIs gave, against agentd's verdicts -------------------------------------------


def parsed_fixture(scenario: str) -> ParsedRun:
    files = MANIFEST[scenario]["files"]
    return PARSERS[MANIFEST[scenario]["cli"]](lambda suffix: harness_sample(next(f for f in files if suffix in f)))


PARSERS: dict[str, Callable[[Callable[[str], str]], ParsedRun]] = {
    "claude": lambda read: parse_claude_output(read("claude_")),
    "codex": lambda read: parse_codex_events(read("codex_exec_")),
    "hermes": lambda read: parse_hermes(read("hermes_usage_"), read("hermes_oneshot_")),
}


@pytest.mark.parametrize(
    "scenario",
    [n for n, s in SCENARIOS.items() if s.cli in ("claude", "codex") and "hermes_chat_q_quiet.txt" not in s.files],
)
def test_agentd_agrees_with_the_exit_code_where_the_cli_means_it(scenario: str) -> None:
    """claude and codex exit 0 exactly when agentd reads success. (hermes exits 0 whatever happened,
    which is why agentd judges it by its usage file: test_hermes_exit_0_with_failed_usage_is_a_failure.)"""
    recorded = MANIFEST[scenario]["exit_code"]
    assert (recorded == 0) == parsed_fixture(scenario).succeeded, recorded


# --- hermes: exit 0 with a failed usage file is read as a failure, through the adapter itself --------------


HERMES_ANSWERED = {
    "hermes-success": True,
    "hermes-tool-use": True,
    "hermes-http500": False,
    "hermes-http429": False,
    "hermes-hang": False,
}


@pytest.mark.parametrize(("scenario", "answered"), HERMES_ANSWERED.items())
def test_agentd_reads_hermes_by_its_usage_file_not_its_exit_code(scenario: str, answered: bool) -> None:
    """Every hermes scenario exited 0; agentd's verdict follows what happened (the fake model answered,
    failed with an HTTP error, or never answered), which only the usage file says."""
    assert MANIFEST[scenario]["exit_code"] == 0
    assert parsed_fixture(scenario).succeeded is answered


# --- ollama: agentd's adapter and probe, over real HTTP, answered with the recorded bytes -------------


@contextmanager
def serving(routes: dict[str, bytes]) -> Iterator[str]:
    """A loopback HTTP server (port 0) answering each path with its bytes, whatever the method."""

    class Handler(BaseHTTPRequestHandler):
        def answer(self) -> None:
            body = routes.get(self.path.split("?")[0])
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(200 if body is not None else 404)
            self.send_header("content-length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        do_GET = do_POST = answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = serve_in_thread(server)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


async def no_pid(pid: int | None) -> None:
    return None


@pytest.mark.asyncio
@pytest.mark.parametrize("name", ["ollama_generate_stream.ndjson", "ollama_generate_nostream.json"])
async def test_the_ollama_adapter_reads_the_recorded_answer(tmp_path: Path, name: str) -> None:
    """Streamed, or one object from a server that ignores "stream": true: the same text and tokens."""
    recorded = harness_fixture(name).read_bytes()
    with serving({"/api/generate": recorded}) as url:
        adapter = {
            "adapter_id": "a",
            "kind": "ollama-generate",
            "endpoint": url,
            "model": "fake-model",
            "timeout_ms": 5000,
        }
        context = replace(
            ctx(tmp_path, {"kind": "script"}), adapter=TypeAdapter(AdapterConfig).validate_python(adapter), model=None
        )
        run = await OllamaGenerateAdapter().execute(context, no_pid)
    assert run.ok and run.failure is None, run.failure
    assert run.final_message == json.loads(harness_sample("ollama_generate_nostream.json"))["response"]
    assert (run.usage.input_tokens, run.usage.output_tokens) == (11, 7)
    assert run.model == "fake-model" and run.diagnostics["done_reason"] == "stop"
    assert context.paths.stdout.read_bytes().splitlines() == recorded.splitlines()  # the evidence is the answer


@pytest.mark.asyncio
@pytest.mark.parametrize(("model", "ok"), [("fake-model", True), ("other-model", False)])
async def test_the_ollama_probe_finds_the_model_in_the_recorded_tags(tmp_path: Path, model: str, ok: bool) -> None:
    with serving({"/api/tags": harness_fixture("ollama_tags.json").read_bytes()}) as url:
        adapter = {
            "adapter_id": "local",
            "kind": "ollama-generate",
            "endpoint": url,
            "model": model,
            "timeout_ms": 5000,
        }
        config = load_config(write_config(tmp_path, lambda raw: raw["adapters"].append(adapter)))
        found = (await probe_adapters(config))["local"]
    assert found["ok"] is ok and found["probe"].startswith("reachable"), found


# --- the reference's samples (captured elsewhere, with other settings) read the same way -----------------

CROSS_CHECKED = sorted(
    (name, s.cli)
    for name, s in SCENARIOS.items()
    if s.cli in PARSERS and set(s.files) <= REFERENCE_SAMPLES and "hermes_chat_q_quiet.txt" not in s.files
)


def verdict(run: ParsedRun) -> dict[str, Any]:
    """What agentd decides from a run, without what differs by capture (texts, ports, retry counts, tokens)."""
    keep = ("tool_uses", "api_error_status", "terminal_reason", "permission_denials", "cost_status", "api_calls")
    return {
        "finished": run.finished,
        "succeeded": run.succeeded,
        "has_text": bool(run.final_message),
        "rate_limited": bool(run.failure and RATE_LIMIT.search(run.failure)),
        "commands": len(run.diagnostics.get("commands") or []),
        "warnings": len(run.diagnostics.get("warnings") or []),
        "denials": [(d.tool, d.summary) for d in run.denials],
        **{key: run.diagnostics[key] for key in keep if key in run.diagnostics},
    }


@pytest.mark.parametrize(("scenario", "cli"), CROSS_CHECKED)
def test_agentd_reads_the_reference_samples_as_it_reads_its_own_fixtures(scenario: str, cli: str) -> None:
    samples = reference_dir("harness-samples")
    files = MANIFEST[scenario]["files"]

    def reference(suffix: str) -> str:
        return (samples / next(f for f in files if suffix in f)).read_text(encoding="utf-8")

    assert verdict(PARSERS[cli](reference)) == verdict(parsed_fixture(scenario))


# --- the pinned CLIs still print what their fixtures say (`make test-harness`) ----------------------------

CLI_SCENARIOS = [n for n, s in SCENARIOS.items() if s.cli in PARSERS and "hermes_chat_q_quiet.txt" not in s.files]


@pytest.mark.harness
@pytest.mark.parametrize("scenario", CLI_SCENARIOS)
def test_the_pinned_cli_still_prints_what_its_fixture_says(scenario: str, tmp_path: Path) -> None:
    """Records the scenario again, as `make record-fixtures` would, and reads it as agentd does: the same
    exit code and verdict as the committed fixture, or the fixtures are stale."""
    cli, files = MANIFEST[scenario]["cli"], MANIFEST[scenario]["files"]
    clis = Clis(Path(os.environ.get("AGENTD_HARNESS_CACHE") or REPO / ".cache" / "harness"))
    if not clis.command(cli).exists():
        pytest.fail(f"{clis.command(cli)} is not installed: `make test-harness` installs the pinned CLIs first")
    entries = record_all(clis, [scenario], tmp_path)
    assert entries[scenario]["exit_code"] == MANIFEST[scenario]["exit_code"]

    def fresh(suffix: str) -> str:
        return (tmp_path / next(f for f in files if suffix in f)).read_text(encoding="utf-8")

    assert verdict(PARSERS[cli](fresh)) == verdict(parsed_fixture(scenario))
