"""What an attempt's manifest says of it beside its files: the task, the command, the model, the times,
the outcome and its checks (agentd/evidence seals it)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from agentd import __version__
from agentd.adapters import AdapterRun
from agentd.attempt.judge import AttemptFacts
from agentd.attempt.terms import agent_variant, attempt_skills, retry_policy
from agentd.clock import format_ts
from agentd.config import Config
from agentd.config.tool_policy import enforcement, profile_policy
from agentd.hashing import canonical_json, sha256_file, sha256_hex
from agentd.process.environment import agentd_path, resolve_command
from agentd.records import (
    AdapterConfig,
    AttemptEnd,
    ClaudeCodeAdapterConfig,
    CodexAdapterConfig,
    HermesAgentAdapterConfig,
    OllamaGenerateAdapterConfig,
    ScriptAdapterConfig,
    TaskRecord,
    record_json,
)

PROVIDERS = {"claude-code": "anthropic", "codex": "openai", "hermes-agent": "hermes", "ollama-generate": "ollama"}


class DescribedMemo:
    """What `described_by` takes from one configuration alone, kept for the life of the service that
    loaded it (a dispatcher's config never changes while it runs): the retry policy, the agent variant
    per profile and skills (a model_dump and two hashes each), and the PATH a script is found on. What
    a file says (a script's sha256) is read again for every attempt: the file may change any time."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.retry = retry_policy(config)
        self.path = agentd_path()
        self._variants: dict[tuple[str, tuple[str, ...]], dict[str, Any]] = {}

    def variant(self, task: TaskRecord) -> dict[str, Any]:
        key = (task.requested_profile_id, tuple(s.skill_id for s in attempt_skills(self.config, task)))
        if key not in self._variants:
            self._variants[key] = agent_variant(self.config, task)
        return self._variants[key]


def described_by(
    config: Config, task: TaskRecord, adapter_id: str, memo: DescribedMemo | None = None
) -> dict[str, Any]:
    """The manifest's fields that come from the configuration (resolved once per attempt, with its
    policy: agentd/attempt/policy.py); `memo` keeps what does not change between attempts."""
    profile = config.profiles.get(task.requested_profile_id)
    spec = config.task_types.get(task.task_type)
    adapter = config.adapters.get(adapter_id)
    return {
        "agent_id": config.agent.agent_id,
        "agent_variant": memo.variant(task) if memo is not None else agent_variant(config, task),
        "task_type_version": spec.version if spec else None,
        "constitution": {
            "soul_hash": config.constitution.soul_hash,
            "purpose_hash": config.constitution.purpose_hash,
            "version": config.constitution.version,
        },
        "script": script_command(config, adapter_id, memo),
        "adapter": adapter,
        "kill_grace_s": config.dispatch.kill_grace_s,
        "output_cap_bytes": config.dispatch.output_cap_bytes,
        "max_prompt_chars": profile.context_policy.max_prompt_chars if profile else None,
        "max_turns": getattr(adapter, "max_turns", None),
        "tool_policy": tool_policy_fields(config, task.requested_profile_id, adapter),
    }


def tool_policy_fields(config: Config, profile_id: str, adapter: AdapterConfig | None) -> dict[str, Any]:
    """The manifest's tool_policy: how the attempt's calls met its policy (docs/policy.md), and the policy's size."""
    policy = profile_policy(config, profile_id)
    return {
        "enforced": enforcement(adapter.kind if adapter else "unknown", policy),
        "rules": len(policy.rules),
        "default": policy.default,
    }


def tool_policy_held(configured: dict[str, Any] | None, run: AdapterRun | None) -> dict[str, Any] | None:
    """The manifest's tool_policy as the attempt met it, not only as it was configured: how many calls the
    harness reported, how many agentd decided, and each that ran without a decision (docs/policy.md)."""
    if configured is None or run is None:
        return configured
    if run.process is not None and run.process.start_error is not None:  # nothing ran: nothing was enforced
        return {**configured, "enforced": "nothing ran: the attempt did not start"}
    if "tool_calls_reported" not in run.diagnostics:
        return configured
    found = run.diagnostics
    decided = found.get("tool_calls")
    return {
        **configured,
        "calls_reported": found.get("tool_calls_reported"),
        "calls_decided": len(decided) if isinstance(decided, list) else 0,
        "violations": found.get("policy_violations") or [],
    }


def manifest_fields(
    described: dict[str, Any], facts: AttemptFacts, end: AttemptEnd, bundle_hash: str | None
) -> dict[str, Any]:
    """The manifest (docs/design.md, "Evidence", seed 001): who ran what, on which inputs, under which budgets,
    how it ended. Pure: the files' hashes are added when it is sealed."""
    task, attempt, run = facts.task, facts.attempt, facts.run
    started = attempt.started_at
    model = (run.model if run else None) or attempt.model
    return {
        "run_id": attempt.attempt_id,
        "runtime_identity": {
            "agentd_version": __version__,
            "host": socket.gethostname(),
            "agent_id": described["agent_id"],
            "runner_id": attempt.runner_id,
        },
        "agent_ref": {
            "agent": described["agent_id"],
            "profile": task.requested_profile_id,
            **described["agent_variant"],
        },
        "task_ref": {
            "task_id": task.task_id,
            "task_type": task.task_type,
            "task_type_version": described["task_type_version"],
            "attempt_number": attempt.attempt_number,
        },
        "task_hash": task_hash(task),
        "bundle_hash": bundle_hash,
        "constitution": described["constitution"],
        "adapter": {
            "adapter_id": attempt.adapter_id,
            "kind": attempt.adapter_kind,
            "cli_version": run.cli_version if run else None,
            **described["script"],
        },
        "model": model,
        "model_pin": model_pin(described["adapter"], model, run),
        "budgets": {
            "timeout_s": facts.timeout_s,
            "kill_grace_s": described["kill_grace_s"],
            "output_cap_bytes": described["output_cap_bytes"],
            "max_prompt_chars": described["max_prompt_chars"],
            "max_attempts": task.max_attempts,
            "max_turns": described["max_turns"],
        },
        "tool_policy": tool_policy_held(described.get("tool_policy"), run),
        "started_at": format_ts(started),
        "completed_at": format_ts(end.ended_at),
        "wall_clock_elapsed_s": max((end.ended_at - started).total_seconds(), 0.0),
        "termination_reason": end.termination_reason,
        "failure_type": end.diagnostics.get("failure_type"),
        "exit_status": end.exit_status,
        "side_effects": end.side_effects,
        "redactions": {"count": facts.redactions},
        "outcome": {
            "status": end.outcome.status,
            "machine_status": end.outcome.machine_status,
            "next_status": end.status,
            "gate_reasons": list(end.downgrade_reasons),
        },
        "artifacts": [{"role": a.role, "path": a.relative_path, "sha256": a.sha256} for a in end.artifacts],
    }


def script_command(config: Config, adapter_id: str, memo: DescribedMemo | None = None) -> dict[str, Any]:
    """For a script adapter, the argv it ran and the sha256 of its executable (what `agentd replay`
    re-runs and checks); harness CLIs are pinned by their version instead."""
    adapter = config.adapters.get(adapter_id)
    if not isinstance(adapter, ScriptAdapterConfig):
        return {}
    cwd = Path(adapter.working_dir) if adapter.working_dir else config.paths.workspace
    executable = resolve_command(adapter.command, cwd, memo.path if memo is not None else agentd_path())
    digest = sha256_file(executable) if executable is not None else None
    return {"argv": [adapter.command, *(adapter.extra_args or [])], "command_sha256": digest}


def model_pin(adapter: AdapterConfig | None, model: str | None, run: AdapterRun | None) -> dict[str, Any] | None:
    """The model the attempt ran against and who served it (seed 001 determinism.tooling.models)."""
    if adapter is None or model is None or adapter.kind == "script":
        return None
    provider, endpoint = PROVIDERS[adapter.kind], None
    if isinstance(adapter, CodexAdapterConfig) and adapter.provider is not None:
        provider, endpoint = adapter.provider.id, adapter.provider.base_url
    elif isinstance(adapter, HermesAgentAdapterConfig):
        provider, endpoint = adapter.provider or provider, adapter.base_url
    elif isinstance(adapter, OllamaGenerateAdapterConfig):
        endpoint = adapter.endpoint
    elif isinstance(adapter, ClaudeCodeAdapterConfig):
        endpoint = (adapter.env or {}).get("ANTHROPIC_BASE_URL")
    version = run.cli_version if run else None  # the shim between agentd and the model (seed 001 §4.4)
    return {"provider": provider, "model": model, "version": version, "endpoint": endpoint}


def task_hash(task: TaskRecord) -> str:
    """What was asked, independent of when or how often: the task's frozen inputs."""
    whole = record_json(task)
    return sha256_hex(canonical_json({name: whole[name] for name in TASK_INPUTS}))


TASK_INPUTS = (
    "task_type",
    "subject",
    "description",
    "payload",
    "skill_ids",
    "evidence_requirements",
    "requested_profile_id",
    "requested_adapter_id",
    "requested_model",
)
