"""One attempt's policy: everything the configuration says about how an attempt is judged, sealed and
ended, resolved once (when the attempt is claimed, or when the boot sweep or agentd's own failure ends
it) and passed whole. The ending itself (agentd/attempt/conclude.py) reads no configuration."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from agentd import frozen_value
from agentd.adapters.routes import credential_group
from agentd.attempt.judge import OutboxPolicy
from agentd.attempt.manifest import DescribedMemo, described_by
from agentd.attempt.outcome import CompletionChecks, RetryPolicy
from agentd.attempt.terms import completion_checks, retry_policy
from agentd.clock import Clock
from agentd.config import Config
from agentd.config.tool_policy import Policy, profile_policy
from agentd.process.privilege import RunUser
from agentd.records import AgentConstitution, CredentialGroup, TaskRecord
from agentd.work.intake import delegation_caps


@frozen_value
class AttemptPolicy:
    checks: CompletionChecks  # what completion must prove (the task type and the intent)
    retry: RetryPolicy  # backoff and the rate-limit and crash limits ([dispatch])
    outbox: OutboxPolicy  # what the outcome may ask for after it (the profile's result policy)
    timeout_s: float  # the adapter's
    strict_evidence: bool  # re-verify the sealed folder before a completion counts
    state_dir: Path
    runs: Path
    workspace: Path
    max_artifact_bytes: int  # what agentd reads, in all, to hash the files the outcome names
    user: RunUser | None  # who the attempt runs as: whose files it reports, who may need to remove its run dir
    constitution: AgentConstitution  # the hashes a constitution proposal is based on
    described: dict[str, Any]  # the manifest's fields that come from the configuration
    tools: Policy  # its profile's tool policy, then [policy]'s (docs/policy.md)
    credential: CredentialGroup | None = None  # who shares its provider credential: what a reset holds back


@frozen_value
class Ending:
    """What ending an attempt needs beside its facts: its policy, the clock and the retry jitter."""

    policy: AttemptPolicy
    clock: Clock
    rng: random.Random


def attempt_policy(
    config: Config, task: TaskRecord, adapter_id: str, user: RunUser | None, memo: DescribedMemo | None = None
) -> AttemptPolicy:
    """The policy of `task`'s attempt on `adapter_id`, as the configuration says now, for attempts that run
    as `user` (the service's resolved `[dispatch] run_as`). `memo`: what a service keeps of its
    configuration between attempts (agentd/attempt/manifest.py)."""
    spec = config.task_types.get(task.task_type)
    override = spec.strict_evidence if spec else None
    adapter = config.adapters.get(adapter_id)
    return AttemptPolicy(
        checks=completion_checks(config, task),
        retry=memo.retry if memo is not None else retry_policy(config),
        outbox=outbox_policy(config, task),
        timeout_s=adapter.timeout_ms / 1000 if adapter else 0.0,
        strict_evidence=config.dispatch.strict_evidence if override is None else override,
        state_dir=config.paths.state_dir,
        runs=config.paths.runs,
        workspace=config.paths.workspace,
        max_artifact_bytes=config.dispatch.max_artifact_bytes,
        user=user,
        constitution=config.constitution,
        described=described_by(config, task, adapter_id, memo),
        tools=profile_policy(config, task.requested_profile_id),
        credential=credential_group(config, adapter_id),
    )


def outbox_policy(config: Config, task: TaskRecord) -> OutboxPolicy:
    profile = config.profiles.get(task.requested_profile_id)
    if profile is None:
        return OutboxPolicy(agent=config.agent.agent_id)
    policy, caps = profile.result_policy, delegation_caps(config, task)
    return OutboxPolicy(
        policy.allow_follow_up_tasks,
        policy.allow_external_messages,
        caps["max_depth"],
        caps["max_per_outcome"],
        policy.require_approval_for_side_effects,
        config.agent.agent_id,
    )
