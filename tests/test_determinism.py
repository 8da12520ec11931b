"""TraceCore's determinism, classified rather than declared away (seed 001 §3–§7; docs/determinism.md): the
turns a harness may take are capped where it allows, and running out of them is budget exhaustion; the IO an
attempt's trace shows is its io_audit; `agentd version` names the specs agentd implements."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import harness_fixture

from agentd.adapters.claude import parse_claude_output
from agentd.adapters.hermes import hermes_config
from agentd.evidence.tracecore import FAILURE_TYPES, SPEC_VERSION, io_audit_of
from agentd.records import HermesAgentAdapterConfig


def step(kind: str, tool: str | None, summary: str | None = None) -> dict[str, Any]:
    return {"step": 1, "kind": kind, "tool": tool, "arguments_sha256": "ab" * 32, "summary": summary}


@pytest.mark.parametrize(
    ("kind", "tool", "expected"),
    [
        ("command", "script", {"type": "custom", "op": "exec", "tool": "script"}),
        ("tool", "Bash", {"type": "custom", "op": "exec", "tool": "Bash"}),
        ("tool", "command_execution", {"type": "custom", "op": "exec", "tool": "command_execution"}),
        ("tool", "terminal", {"type": "custom", "op": "exec", "tool": "terminal"}),
        ("tool", "Read", {"type": "fs", "op": "read", "tool": "Read"}),
        ("tool", "read_file", {"type": "fs", "op": "read", "tool": "read_file"}),
        ("tool", "Edit", {"type": "fs", "op": "write", "tool": "Edit"}),
        ("tool", "file_change", {"type": "fs", "op": "write", "tool": "file_change"}),
        ("tool", "WebFetch", {"type": "net", "op": "request", "tool": "WebFetch"}),
        ("tool", "web_search", {"type": "net", "op": "request", "tool": "web_search"}),
    ],
)
def test_the_io_a_step_shows_is_its_io_audit(kind: str, tool: str, expected: dict[str, Any]) -> None:
    [entry] = io_audit_of(step(kind, tool))
    assert {k: entry[k] for k in expected} == expected
    assert entry["arguments_sha256"] == "ab" * 32 and entry["path"] is None and entry["host"] is None


@pytest.mark.parametrize(("kind", "tool"), [("message", None), ("tool", "TodoWrite"), ("generate", None)])
def test_a_step_that_shows_no_io_has_none(kind: str, tool: str | None) -> None:
    assert io_audit_of(step(kind, tool)) == []


def test_running_out_of_claudes_turns_is_budget_exhaustion() -> None:
    parsed = parse_claude_output(harness_fixture("claude_json_error_max_turns.json").read_text())
    assert parsed.diagnostics["max_turns_reached"] is True
    assert FAILURE_TYPES["max_turns"] == "budget_exhausted"
    ok = parse_claude_output(harness_fixture("claude_json_success.json").read_text())
    assert ok.diagnostics["max_turns_reached"] is False


def test_hermes_gets_the_adapters_turn_cap() -> None:
    base = {"adapter_id": "h", "kind": "hermes-agent", "command": "hermes", "timeout_ms": 60_000}
    capped = HermesAgentAdapterConfig.model_validate({**base, "max_turns": 7})
    assert json.loads(hermes_config(capped, "m"))["agent"]["max_turns"] == 7
    uncapped = HermesAgentAdapterConfig.model_validate(base)
    assert "max_turns" not in json.loads(hermes_config(uncapped, "m"))["agent"]


def test_agentd_version_names_the_specs_it_implements(cli: Any) -> None:
    from agentd.outlook.agent_runtime import SCHEMA_VERSION

    result = cli("version", "--json")
    assert result.code == 0, result.err
    shown = result.json()
    assert shown["specs"]["tracecore"] == SPEC_VERSION == "tracecore-spec-v1.0"
    assert shown["specs"]["agent_runtime_events"] == SCHEMA_VERSION
    assert shown["specs"]["evidence_manifest"].startswith("agentd-")
    assert shown["specs"]["event_schema_version"] >= 1
    text = cli("version")
    assert text.code == 0 and "tracecore-spec-v1.0" in text.out


@pytest.mark.asyncio
async def test_an_attempt_that_ran_out_of_turns_is_budget_exhausted_in_its_evidence(rig: Any) -> None:
    """The in-process adapter reports what claude's parser says of an error_max_turns result."""
    task = rig.add("scripted", payload={"exit": 1, "diagnostics": {"max_turns_reached": True}})
    await rig.dispatcher().run_until_idle()
    [attempt] = rig.store.attempts_of(task.task_id)
    assert attempt.termination_reason == "max_turns"
    [finished] = [e for e in rig.events(task.task_id) if e.type == "task_attempt_finished"]
    assert finished.payload["failure_type"] == "max_turns"
    assert FAILURE_TYPES[finished.payload["failure_type"]] == "budget_exhausted"


# --- what each adapter kind lets agentd see (issue 42, finding 4) ------------------------------------------


def test_the_probe_says_what_each_adapter_lets_agentd_see(cli: Any) -> None:
    from agentd.adapters import _KINDS
    from agentd.adapters.probe import OBSERVABLE

    assert set(OBSERVABLE) == set(_KINDS), "every kind says what it shows"
    assert OBSERVABLE["claude-code"] == {"tools": True, "turns": True, "usage": True, "live": True}
    assert OBSERVABLE["hermes-agent"] == {"tools": True, "turns": True, "usage": True, "live": False}, "after, not live"
    assert cli("init").code == 0
    result = cli("adapters", "--probe", "--json")
    rows = result.json()
    assert rows and all(r["observable"] == OBSERVABLE[r["kind"]] for r in rows)
    shown = cli("adapters", "--probe")
    assert "OBSERVES" in shown.out
