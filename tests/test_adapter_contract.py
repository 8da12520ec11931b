"""One contract, every adapter kind: the same scenarios through the real `agentd dispatch`.

The model is the loopback fake server (tests/fakemodel). script and ollama-generate run in
`make test`; the real claude, codex and hermes CLIs carry the `harness` mark and run in
`make test-harness`, which installs them first and runs inside a loopback-only namespace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakemodel import Fail, FakeModelServer, Hang, Reply, ToolCall, Turn
from support import ADAPTERS, REPO, write_config

from agentd.clock import SystemClock
from agentd.evidence import verify_attempt_dir
from agentd.evidence.action_trace import read_trace
from agentd.process.procs import marked_processes
from agentd.records import TaskAttempt, TaskRecord
from agentd.store import Store, init_state_dir, migrate, open_store
from agentd.work.validation import load_config

pytestmark = pytest.mark.process

CACHE = Path(os.environ.get("AGENTD_HARNESS_CACHE", REPO / ".cache" / "harness"))
CLIS = {
    "claude-code": CACHE / "npm/node_modules/.bin/claude",
    "codex": CACHE / "npm/node_modules/.bin/codex",
    "hermes-agent": CACHE / "hermes-venv/bin/hermes",
}
SHELL_TOOL = {
    "claude-code": ("Bash", "command"),
    "codex": ("exec_command", "cmd"),
    "hermes-agent": ("terminal", "command"),
}


def shell(kind: str, command: str) -> ToolCall:
    """The tool call a harness of `kind` makes to run `command` in its shell."""
    tool, argument = SHELL_TOOL[kind]
    return ToolCall(tool, {argument: command})


# The name a tool call's step has in the action trace (codex names the item, not the model's function).
TRACE_TOOL = {"claude-code": "Bash", "codex": "command_execution", "hermes-agent": "terminal"}
STYLE = {"claude-code": "claude-like", "codex": "codex-like", "hermes-agent": "hermes-like"}
KINDS = [
    pytest.param("script", id="script"),
    pytest.param("ollama-generate", id="ollama"),
    pytest.param("claude-code", id="claude", marks=pytest.mark.harness),
    pytest.param("codex", id="codex", marks=pytest.mark.harness),
    pytest.param("hermes-agent", id="hermes", marks=pytest.mark.harness),
]


def outcome_message(**fields: Any) -> str:
    outcome = {"status": "completed", "machine_status": "ok", "operator_summary": "done by the model", **fields}
    return "Here is my report.\n```json\n" + json.dumps(outcome) + "\n```\n"


def without_gateway(more: Callable[[dict[str, Any]], None] | None = None) -> Callable[[dict[str, Any]], None]:
    """`[gateway] enabled = false` (and `more`): for a test of what holds an attempt whose model calls agentd does
    not carry, where the harness's own report is what its meter reads (docs/gateway.md, "On by default")."""

    def mutate(raw: dict[str, Any]) -> None:
        raw["gateway"] = {"enabled": False}
        if more is not None:
            more(raw)

    return mutate


class Harness:
    """An agent whose one adapter is `kind`, pointed at a fake model server."""

    def __init__(
        self,
        directory: Path,
        kind: str,
        fake: FakeModelServer,
        timeout_ms: int,
        more: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if kind in CLIS and not os.access(CLIS[kind], os.X_OK):
            pytest.fail(f"{CLIS[kind]} is not installed: `make test-harness` installs the pinned CLIs first")
        self.kind, self.fake, self.directory = kind, fake, directory
        directory.mkdir(parents=True, exist_ok=True)
        secrets = directory / "provider.env"
        secrets.write_text("ANTHROPIC_API_KEY=fake-key\nFAKE_MODEL_API_KEY=fake-key\nHERMES_KEY=fake-key\n")
        secrets.chmod(0o600)
        adapter = {"adapter_id": "a", "timeout_ms": timeout_ms, **self._adapter(kind, fake.url, secrets)}

        def mutate(raw: dict[str, Any]) -> None:
            raw["adapters"].append(adapter)
            raw["profiles"].append(
                {
                    **raw["profiles"][0],
                    "profile_id": "p",
                    "default_adapter_id": "a",
                    "style": STYLE.get(kind, "claude-like"),
                }
            )
            raw["task_types"].append(
                {
                    "task_type": "work",
                    "payload_schema_id": "agent-runtime/payload.any-object/v1",
                    "default_profile_id": "p",
                    "default_adapter_id": "a",
                }
            )
            if "run_as" not in raw["dispatch"]:  # a development rig on purpose (docs/install-and-deploy.md)
                raw["dispatch"]["boundary"] = "advisory"
            if more is not None:
                more(raw)

        self.config_path = write_config(directory, mutate)
        config = load_config(self.config_path)
        self.workspace = config.paths.workspace
        init_state_dir(config.paths.state_dir, config.paths.workspace)
        migrate(config.db_path, SystemClock())
        self.store: Store = open_store(config.db_path, SystemClock())

    @staticmethod
    def _adapter(kind: str, url: str, secrets: Path) -> dict[str, Any]:
        if kind == "script":
            return {"kind": "script", "command": str(ADAPTERS / "scripted.py")}
        if kind == "ollama-generate":
            return {"kind": "ollama-generate", "endpoint": url, "model": "fake-model"}
        common = {"kind": kind, "command": str(CLIS[kind]), "env_file": str(secrets)}
        if kind == "claude-code":
            return {
                **common,
                "model": "claude-sonnet-4-5",
                "max_turns": 4,
                "allowed_tools": ["Bash"],
                "env": {"ANTHROPIC_BASE_URL": url},
            }
        if kind == "codex":
            return {
                **common,
                "model": "gpt-5.5",
                "sandbox": "workspace-write",
                "provider": {"id": "fake", "base_url": f"{url}/v1", "env_key": "FAKE_MODEL_API_KEY"},
                "prices": {"gpt-5.5": {"input_per_mtok": 1.25, "output_per_mtok": 10.0}},
            }
        return {
            **common,
            "model": "fake-model",
            "base_url": f"{url}/v1",
            "context_length": 262144,
            "api_key_env": "HERMES_KEY",
        }

    def run(self, payload: dict[str, Any] | None = None) -> tuple[TaskRecord, TaskAttempt, float]:
        """Enqueue one task, drain with the real dispatcher, return the task, its attempt and the time."""
        from agentd.cli import main

        assert (
            main(
                [
                    "--config",
                    str(self.config_path),
                    "task",
                    "add",
                    "--type",
                    "work",
                    "--payload",
                    json.dumps(payload or {}),
                ]
            )
            == 0
        )
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "agentd", "--config", str(self.config_path), "dispatch", "--until-idle"],
            capture_output=True,
            text=True,
            timeout=180,
        )
        elapsed = time.monotonic() - started
        assert result.returncode == 0, result.stderr[-3000:]
        [task] = self.store.list_tasks(limit=1)
        [attempt] = self.store.attempts_of(task.task_id)
        return task, attempt, elapsed

    def model_calls(self) -> list[Any]:
        return [r for r in self.fake.requests if r.protocol not in ("head", "models", "ollama.tags", "ollama.show")]


@pytest.fixture
def harness_factory(tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    made: list[tuple[Harness, FakeModelServer]] = []

    def make(
        kind: str,
        turns: list[Turn],
        default: Turn | None = None,
        timeout_ms: int = 60_000,
        more: Callable[[dict[str, Any]], None] | None = None,
    ) -> Harness:
        fake = FakeModelServer(turns=turns, default=default)
        fake.__enter__()
        harness = Harness(tmp_path / kind, kind, fake, timeout_ms, more)
        made.append((harness, fake))
        return harness

    yield make
    for harness, fake in made:
        harness.store.close()
        fake.__exit__(None, None, None)


@pytest.mark.parametrize("kind", KINDS)
class TestAdapterContract:
    def test_a_reply_with_an_outcome_completes_with_evidence_and_usage(self, kind: str, harness_factory: Any) -> None:
        harness = harness_factory(kind, [Reply(outcome_message())])
        payload = {"stdout": outcome_message()} if kind == "script" else {}
        task, attempt, _ = harness.run(payload)
        assert task.status == "completed", (task.last_error, attempt.diagnostics)
        assert attempt.exit_status == "ok" and attempt.retry_class == "none" and attempt.adapter_kind == kind
        assert verify_attempt_dir(Path(attempt.evidence_dir or "")) == []
        assert "done by the model" in Path(attempt.last_message_path or "").read_text()
        manifest = json.loads((Path(attempt.evidence_dir or "") / "manifest.json").read_text())
        usage = attempt.usage or {}
        if kind == "script":
            return
        assert (usage["input_tokens"], usage["output_tokens"]) == (11, 7)
        assert len(harness.model_calls()) == 1
        if kind in CLIS:
            assert manifest["adapter"]["cli_version"], "the CLI version is part of the evidence"
        if kind == "claude-code":  # through the gateway (docs/gateway.md): the usage is the provider's answers'
            assert "cost_usd" not in usage, "no prices: claude's own figure is kept beside, never taken"
            assert attempt.diagnostics["harness_usage"]["cost_usd"] > 0
        if kind == "codex":
            assert usage["cost_usd"] == pytest.approx((11 * 1.25 + 7 * 10.0) / 1e6) and usage["cost_estimated"]

    def test_a_tool_made_artifact_completes_only_because_the_file_exists(self, kind: str, harness_factory: Any) -> None:
        if kind == "ollama-generate":
            pytest.skip("ollama /api/generate has no tools")
        turns: list[Turn] = []
        if kind in SHELL_TOOL:
            tool, argument = SHELL_TOOL[kind]
            turns = [ToolCall(tool, {argument: "echo made-by-tool > made.txt"})]
        turns.append(Reply(outcome_message(artifact_paths=["made.txt"])))
        harness = harness_factory(kind, turns)
        payload = {"files": {"made.txt": "made-by-tool\n"}, "stdout": outcome_message(artifact_paths=["made.txt"])}
        task, attempt, _ = harness.run(payload if kind == "script" else {})
        assert (harness.workspace / "made.txt").read_text().strip() == "made-by-tool"
        assert task.status == "completed", (task.last_error, attempt.diagnostics)
        assert [a for a in (task.outcome.artifact_paths if task.outcome else [])] == ["made.txt"]
        if kind in ("claude-code", "codex"):  # the real CLI's stream became live activity (docs/live.md)
            live = [e for e in harness.store.read_events(task_id=task.task_id) if e.attempt_id == attempt.attempt_id]
            started = [e.payload for e in live if e.type == "tool_started"]
            finished = [e.payload for e in live if e.type == "tool_finished"]
            assert started and "made.txt" in started[0]["summary"], [e.type for e in live]
            assert finished and finished[0]["call_id"] == started[0]["call_id"] and finished[0]["ok"] is True
            assert any(e.type == "model_turn_completed" for e in live), [e.type for e in live]
        if kind in SHELL_TOOL:  # nothing invisible inside an attempt: each harness's tool call is in its trace
            steps = read_trace(Path(attempt.evidence_dir or "") / "action_trace.jsonl")
            tools = [s for s in steps if s["kind"] == "tool"]
            assert [s["tool"] for s in tools] == [TRACE_TOOL[kind]], steps
            assert "made.txt" in (tools[0]["summary"] or "") and tools[0]["is_error"] is False, tools
            assert tools[0]["result_sha256"], "the call's result was seen"
            assert steps[-1]["kind"] == "message" and "done by the model" in (steps[-1]["summary"] or "")

    def test_a_claimed_artifact_the_model_never_made_is_not_completed(self, kind: str, harness_factory: Any) -> None:
        harness = harness_factory(kind, [Reply(outcome_message(artifact_paths=["imagined.txt"]))])
        payload = {"stdout": outcome_message(artifact_paths=["imagined.txt"])} if kind == "script" else {}
        task, _, _ = harness.run(payload)
        assert task.status == "retryable_failure"
        assert "artifact 'imagined.txt' does not exist" in (task.last_error or "")

    def test_a_failing_provider_is_a_retryable_failure_within_seconds(self, kind: str, harness_factory: Any) -> None:
        harness = harness_factory(kind, [], default=Fail(500, "the provider broke"))
        payload = {"exit": 1, "stdout": "HTTP 500 from the provider"} if kind == "script" else {}
        task, attempt, elapsed = harness.run(payload)
        assert task.status == "retryable_failure" and attempt.exit_status == "error"
        assert elapsed < 30, f"{kind} took {elapsed:.1f}s to give up on a failing provider"
        assert not (attempt.diagnostics or {}).get("rate_limited")

    def test_a_rate_limit_is_retried_later_without_spending_an_attempt(self, kind: str, harness_factory: Any) -> None:
        if kind == "script":
            pytest.skip("a script reports its own failures; agentd sees no provider")
        harness = harness_factory(kind, [], default=Fail(429, "slow down"))
        task, attempt, _ = harness.run()
        assert task.status == "retryable_failure" and (attempt.diagnostics or {}).get("rate_limited") is True
        assert task.rate_limit_count == 1 and task.free_attempt_count == 1
        assert (task.available_at - (attempt.ended_at or task.available_at)).total_seconds() > 200  # the long backoff

    def test_a_provider_that_never_answers_is_killed_at_the_timeout(self, kind: str, harness_factory: Any) -> None:
        limit_s = 4 if kind in CLIS else 1  # a real CLI needs its start-up time before it asks the model
        harness = harness_factory(kind, [], default=Hang(), timeout_ms=limit_s * 1000)
        task, attempt, elapsed = harness.run({"sleep_s": 600} if kind == "script" else {})
        assert attempt.exit_status == "timeout" and attempt.termination_reason == "timeout"
        assert task.status == "retryable_failure" and f"timed out after {limit_s}s" in (task.last_error or "")
        assert elapsed < limit_s + 5 + 10
        assert marked_processes(f"AGENTD_ATTEMPT_ID={attempt.attempt_id}") == [], "something of the attempt survived"


@pytest.mark.harness
def test_the_harness_session_sees_only_loopback_when_isolated() -> None:
    """isolated.sh sets AGENTD_NET_ISOLATED when it could make the namespace: then prove it holds."""
    import socket

    if not os.environ.get("AGENTD_NET_ISOLATED"):
        pytest.skip("not run through tests/harness/isolated.sh with namespaces available")
    assert [name for _, name in socket.if_nameindex()] == ["lo"]


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.harness) for k in CLIS])
def test_adapters_probe_finds_each_cli_and_its_version(kind: str, harness_factory: Any, capsys: Any) -> None:
    from agentd.cli import main

    harness = harness_factory(kind, [])
    assert main(["--config", str(harness.config_path), "adapters", "--probe", "--json"]) == 0
    rows = {row["adapter_id"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["a"]["ok"] and rows["a"]["version"], rows["a"]
    assert harness.model_calls() == [], "a probe spends no model tokens"


def test_adapters_probe_reports_what_is_missing_or_unreachable(harness_factory: Any, capsys: Any) -> None:
    from agentd.cli import main

    harness = harness_factory("ollama-generate", [])
    assert main(["--config", str(harness.config_path), "adapters", "--probe", "--json"]) == 0
    rows = {row["adapter_id"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["a"]["probe"] == "reachable" and rows["script"]["probe"] == "found"
    assert harness.model_calls() == []
    harness.fake.__exit__(None, None, None)  # the endpoint goes away
    assert main(["--config", str(harness.config_path), "adapters", "--probe", "--json"]) == 1
    rows = {row["adapter_id"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["a"]["probe"].startswith("unreachable") and not rows["a"]["ok"]


def test_cost_shows_tokens_per_attempt_and_totals(harness_factory: Any, capsys: Any) -> None:
    from agentd.cli import main

    harness = harness_factory("ollama-generate", [Reply(outcome_message()), Reply(outcome_message())])
    harness.run()
    harness.run()
    capsys.readouterr()
    assert main(["--config", str(harness.config_path), "cost", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(a["input_tokens"], a["output_tokens"]) for a in shown["attempts"]] == [(11, 7), (11, 7)]
    assert shown["totals"] == [
        {
            "adapter": "a",
            "model": "fake-model",
            "attempts": 2,
            "input_tokens": 22,
            "output_tokens": 14,
            "cost_usd": None,
            "cost_estimated": False,
        }
    ]
    assert main(["--config", str(harness.config_path), "cost"]) == 0
    assert "fake-model" in capsys.readouterr().out


# Tokens each harness's attempt costs $0.60 at its adapter's prices, as agentd prices the provider's answers
# (docs/gateway.md): claude at sonnet-4-5's ($3/M in, $15/M out, given below), codex at those above ($1.25/M, $10/M).
SIXTY_CENTS = {"claude-code": (100_000, 20_000), "codex": (400_000, 10_000)}


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.harness) for k in SIXTY_CENTS])
@pytest.mark.asyncio
async def test_a_daily_budget_holds_low_urgency_tasks_until_the_next_utc_day(kind: str, harness_factory: Any) -> None:
    """[budget] daily_usd = 1 against a harness that reports (or is priced at) $0.60 an attempt: the
    second low-urgency task waits, reason budget; an urgent one still runs; the next UTC day, the
    held one runs. The real CLI runs each attempt; the dispatcher's clock is a fake one."""
    from agentd.clock import FakeClock
    from agentd.config.budget import day_start
    from agentd.outlook.status import snapshot
    from agentd.records import TaskIntent
    from agentd.services.dispatch import Dispatcher
    from agentd.store import AsyncStore
    from agentd.work.intake import admit_task

    tokens_in, tokens_out = SIXTY_CENTS[kind]
    turns: list[Turn] = [Reply(outcome_message(), input_tokens=tokens_in, output_tokens=tokens_out)] * 3

    def budget(raw: dict[str, Any]) -> None:
        raw["budget"] = {"daily_usd": 1}
        for adapter in raw["adapters"]:  # through the gateway the cost is agentd's: the tokens at the prices
            if adapter.get("kind") == "claude-code":
                adapter["prices"] = {"claude-sonnet-4-5": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}
                # the gateway holds each call to its worst case, max_tokens included (claude asks 32,000 by
                # default: $0.48, past the $0.40 the urgent task has left): this test is of the claim, not of that
                adapter["env"]["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = "4000"

    harness = harness_factory(kind, turns, more=budget)
    config = load_config(harness.config_path)
    clock = FakeClock("2026-11-23T10:00:00.000000Z")
    db = AsyncStore(open_store(config.db_path, clock))

    def add(priority: int) -> int:
        intent = TaskIntent(task_type="work", source="test", payload={}, priority=priority)
        return harness.store.enqueue_task(admit_task(intent, config, clock.now(), trusted=True), clock.now()).task_id

    async def drain() -> int:
        dispatcher = Dispatcher(config, db, clock=clock)
        await dispatcher.start()
        claimed = await dispatcher.run_until_idle()
        await dispatcher.stop()
        return claimed

    try:
        first = add(5)
        assert await drain() == 1
        [attempt] = harness.store.attempts_of(first)
        assert (attempt.usage or {})["cost_usd"] == pytest.approx(0.60, rel=0.02), attempt.usage
        low, urgent = add(5), add(1)
        assert await drain() == 1
        statuses = [harness.store.get_task_or_raise(t).status for t in (first, low, urgent)]
        assert statuses == ["completed", "pending", "completed"]
        shown = snapshot(config, harness.store, clock.now())
        assert shown["waiting"]["budget"] == 1 and shown["budget"]["estimated"] is True  # agentd priced it
        clock.advance((day_start(clock.now()).replace(day=24) - clock.now()).total_seconds())
        assert await drain() == 1
        assert harness.store.get_task_or_raise(low).status == "completed"
    finally:
        db.close()
