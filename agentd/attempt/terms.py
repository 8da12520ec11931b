"""What the configuration says of one attempt before it runs: what completion must prove, how it is
retried, and which skills (and so which variant of the agent) it is given. Plain functions over the
config and the task, shared by preparing an attempt, its policy and its manifest."""

from __future__ import annotations

from typing import Any

from agentd.attempt.outcome import CompletionChecks, RetryPolicy
from agentd.config import Config
from agentd.config.skills import Skill
from agentd.hashing import canonical_json, sha256_hex
from agentd.records import TaskRecord


def completion_checks(config: Config, task: TaskRecord) -> CompletionChecks:
    """What the task type and the intent ask completion to prove."""
    spec = config.task_types.get(task.task_type)
    policy, required = spec.success_policy if spec else None, task.evidence_requirements
    return CompletionChecks(
        required_artifacts=tuple(required.required_artifacts or ()) if required else (),
        require_artifacts=bool(policy and policy.require_artifacts),
        verify_file_changes=bool(
            (policy and policy.verify_claimed_file_changes) or (required and required.require_file_change_verification)
        ),
        require_adapter_audit=bool(
            (policy and policy.require_adapter_audit) or (required and required.require_adapter_audit)
        ),
        artifact_roles=tuple(spec.artifact_roles) if spec and spec.artifact_roles else ("output",),
    )


def attempt_skills(config: Config, task: TaskRecord) -> list[Skill]:
    """The skills an attempt of the task is given: its profile's, its own, its workflow step's."""
    profile = config.profiles.get(task.requested_profile_id)
    ids = dict.fromkeys([*(profile.skill_ids if profile else ()), *task.skill_ids, *workflow_skills(config, task)])
    return [config.skills[i] for i in ids if i in config.skills]


def agent_variant(config: Config, task: TaskRecord) -> dict[str, Any]:
    """The subagent's variant lineage (seed 000 §3): (skill id, skill version) of every skill it is
    given and the version of its agent definition (the profile), with one id over all of them."""
    profile = config.profiles.get(task.requested_profile_id)
    lineage = {
        "skills": [{"skill_id": s.skill_id, "version": s.version} for s in attempt_skills(config, task)],
        "agent_def_version": sha256_hex(canonical_json(profile.model_dump(mode="json")))[:16] if profile else None,
    }
    return {"variant_id": sha256_hex(canonical_json(lineage))[:16], "variant": lineage}


def workflow_skills(config: Config, task: TaskRecord) -> list[str]:
    if task.workflow_ref is None:
        return []
    for definition in config.workflows.values():
        for state in definition.states:
            if state.state_id == task.workflow_ref.state_id and state.task_type == task.task_type:
                return list(state.default_skill_ids or [])
    return []


def retry_policy(config: Config) -> RetryPolicy:
    d = config.dispatch
    return RetryPolicy(
        d.backoff_base_s,
        d.backoff_max_s,
        d.backoff_jitter,
        d.rate_limit_backoff_s,
        d.max_rate_limit_reschedules,
        d.crash_limit,
        d.max_reset_wait_s,
    )
