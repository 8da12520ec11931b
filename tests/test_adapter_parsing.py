"""Every captured harness sample (../shared/reference/harness-samples, read in place) parses right."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import SHARED

from agentd.adapters.base import Usage
from agentd.adapters.claude import parse_claude_output
from agentd.adapters.codex import parse_codex_events
from agentd.adapters.harness import RATE_LIMIT, estimate_cost
from agentd.adapters.hermes import parse_hermes
from agentd.outcome import extract_outcome
from agentd.records import TokenPrice

SAMPLES = SHARED / "reference" / "harness-samples"


def sample(name: str) -> str:
    path = SAMPLES / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: the tests read the reference samples from ../shared")
    return path.read_text(encoding="utf-8")


def test_every_sample_is_covered_here() -> None:
    covered = {
        "claude_json_error_max_turns.json",
        "claude_json_http429.json",
        "claude_json_http500.json",
        "claude_json_no_api_key.json",
        "claude_json_permission_denied.json",
        "claude_json_success.json",
        "claude_stream_json_http500.jsonl",
        "claude_stream_json_tool_use.jsonl",
        "claude_text_http500.txt",
        "codex_exec_json_http429.jsonl",
        "codex_exec_json_http500.jsonl",
        "codex_exec_json_stream_idle_timeout.jsonl",
        "codex_exec_json_success.jsonl",
        "codex_exec_json_tool_use.jsonl",
        "codex_exec_json_unknown_model_warning.jsonl",
        "codex_output_last_message.txt",
        "hermes_chat_q_quiet.txt",
        "hermes_oneshot_hang_stdout.txt",
        "hermes_oneshot_http429_stdout.txt",
        "hermes_oneshot_http500_stdout.txt",
        "hermes_oneshot_success.txt",
        "hermes_oneshot_tool_use.txt",
        "hermes_usage_hang.json",
        "hermes_usage_http500.json",
        "hermes_usage_success.json",
        "hermes_usage_tool_use.json",
        "ollama_generate_nostream.json",
        "ollama_generate_stream.ndjson",
        "ollama_tags.json",
    }
    assert {p.name for p in SAMPLES.iterdir()} == covered


# --- claude ---------------------------------------------------------------------------------------


def test_claude_success_gives_text_cost_tokens_and_model() -> None:
    run = parse_claude_output(sample("claude_json_success.json"))
    assert run.finished and run.succeeded and run.failure is None
    assert run.final_message == 'Hi from fake. ```json\n{"outcome": "ok"}\n```'
    assert run.usage == Usage(
        input_tokens=11, output_tokens=7, cache_read_tokens=0, cache_write_tokens=0, cost_usd=0.00023
    )
    assert run.model == "claude-opus-4-8"


@pytest.mark.parametrize(("name", "status"), [("claude_json_http500.json", 500), ("claude_json_http429.json", 429)])
def test_claude_api_errors_fail_although_subtype_says_success(name: str, status: int) -> None:
    run = parse_claude_output(sample(name))
    assert run.finished and not run.succeeded
    assert run.diagnostics["api_error_status"] == status
    assert run.failure and run.failure.startswith("API Error:")
    assert bool(RATE_LIMIT.search(run.failure)) == (status == 429)


def test_claude_max_turns_and_no_api_key_are_failures() -> None:
    turns = parse_claude_output(sample("claude_json_error_max_turns.json"))
    assert not turns.succeeded and turns.failure == "Reached maximum number of turns (1)"
    key = parse_claude_output(sample("claude_json_no_api_key.json"))
    assert not key.succeeded and "Not logged in" in (key.failure or "")


def test_claude_permission_denied_succeeds_but_counts_the_denial() -> None:
    run = parse_claude_output(sample("claude_json_permission_denied.json"))
    assert run.succeeded and run.diagnostics["permission_denials"] >= 1


def test_claude_stream_json_keeps_the_tool_trace() -> None:
    run = parse_claude_output(sample("claude_stream_json_tool_use.jsonl"))
    assert run.succeeded and run.diagnostics["tool_uses"] == ["Bash"]
    assert extract_outcome(None, run.final_message).problem is not None  # a ```json block, but not a TaskOutcome
    failed = parse_claude_output(sample("claude_stream_json_http500.jsonl"))
    assert not failed.succeeded and failed.diagnostics["api_error_status"] == 500


def test_claude_text_mode_and_a_cut_stream_are_not_finished() -> None:
    assert not parse_claude_output(sample("claude_text_http500.txt")).finished
    init_only = sample("claude_stream_json_tool_use.jsonl").splitlines()[0]
    cut = parse_claude_output(init_only)
    assert not cut.finished and "no result record" in (cut.failure or "")


# --- codex ----------------------------------------------------------------------------------------


def test_codex_success_gives_text_and_tokens() -> None:
    run = parse_codex_events(sample("codex_exec_json_success.jsonl"))
    assert run.finished and run.succeeded
    assert run.final_message == sample("codex_output_last_message.txt").rstrip("\n")
    assert (run.usage.input_tokens, run.usage.output_tokens, run.usage.cache_read_tokens) == (11, 7, 0)
    assert run.usage.cost_usd is None  # codex reports no cost


def test_an_error_item_alone_is_a_warning_not_a_failure() -> None:
    run = parse_codex_events(sample("codex_exec_json_unknown_model_warning.jsonl"))
    assert run.succeeded and "Model metadata for `fake-model` not found" in run.diagnostics["warnings"][0]


def test_codex_tool_use_lists_the_commands() -> None:
    run = parse_codex_events(sample("codex_exec_json_tool_use.jsonl"))
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
    run = parse_codex_events(sample(name))
    assert run.finished and not run.succeeded and run.failure
    assert bool(RATE_LIMIT.search(run.failure)) == limited


def test_codex_cut_off_before_turn_completed_is_not_finished() -> None:
    head = "\n".join(sample("codex_exec_json_success.jsonl").splitlines()[:2])
    assert not parse_codex_events(head).finished


def test_codex_cost_is_estimated_from_the_price_table() -> None:
    price = TokenPrice(input_per_mtok=2.0, output_per_mtok=8.0, cached_input_per_mtok=0.5)
    estimated = estimate_cost(Usage(input_tokens=1_000_000, output_tokens=500_000, cache_read_tokens=200_000), price)
    assert estimated.cost_usd == pytest.approx(0.8 * 2 + 0.2 * 0.5 + 0.5 * 8)
    assert estimated.cost_estimated


# --- hermes ---------------------------------------------------------------------------------------


def test_hermes_success_is_judged_by_the_usage_file() -> None:
    run = parse_hermes(sample("hermes_usage_success.json"), sample("hermes_oneshot_success.txt"))
    assert run.succeeded and run.final_message == sample("hermes_oneshot_success.txt").strip()
    assert (run.usage.input_tokens, run.usage.output_tokens) == (11, 7)
    assert run.usage.cost_usd is None and run.diagnostics["cost_status"] == "unknown"
    tool = parse_hermes(sample("hermes_usage_tool_use.json"), sample("hermes_oneshot_tool_use.txt"))
    assert tool.succeeded and extract_outcome(None, tool.final_message).source == "none"


@pytest.mark.parametrize(
    ("stdout", "limited"),
    [
        ("hermes_oneshot_http500_stdout.txt", False),
        ("hermes_oneshot_http429_stdout.txt", True),
        ("hermes_oneshot_hang_stdout.txt", False),
    ],
)
def test_hermes_exit_0_with_failed_usage_is_a_failure(stdout: str, limited: bool) -> None:
    usage = "hermes_usage_hang.json" if "hang" in stdout else "hermes_usage_http500.json"
    run = parse_hermes(sample(usage), sample(stdout))
    assert run.finished and not run.succeeded and run.final_message is None
    assert run.failure == sample(stdout).strip()
    assert bool(RATE_LIMIT.search(run.failure)) == limited


def test_hermes_without_a_usage_file_was_killed() -> None:
    run = parse_hermes(None, "")
    assert not run.finished and "no usage file" in (run.failure or "")


def test_hermes_chat_mode_banner_is_not_mistaken_for_the_answer() -> None:
    """The -Q chat mode prints a warning line first; agentd uses -z, whose stdout is the text."""
    text = sample("hermes_chat_q_quiet.txt")
    assert text.lstrip().startswith("⚠")
    assert extract_outcome(None, text).source == "none"  # its ```json block is no TaskOutcome


# --- ollama (the adapter runs against the fake server in test_adapters.py; the samples' shapes here)


def test_ollama_samples_have_the_fields_the_adapter_reads() -> None:
    import json

    lines = [json.loads(line) for line in sample("ollama_generate_stream.ndjson").splitlines() if line.strip()]
    assert lines[-1]["done"] and {"prompt_eval_count", "eval_count"} <= lines[-1].keys()
    assert "".join(line.get("response", "") for line in lines)
    whole = json.loads(sample("ollama_generate_nostream.json"))
    assert whole["done"] and whole["response"]
    assert json.loads(sample("ollama_tags.json"))["models"][0]["name"]


def test_sample_dir_is_the_shared_reference() -> None:
    assert SAMPLES.resolve().is_relative_to(Path(SHARED).resolve())
