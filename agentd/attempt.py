"""One attempt, before and after it runs: prepare (bundle, evidence dir, environment) and judge
(outcome, completion gates, next state, sealed evidence, and what the outcome commit writes)."""

from __future__ import annotations

import random
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentd import __version__
from agentd.adapters import Adapter, AdapterRun, AttemptContext, adapter_for
from agentd.bundle import Bundle, BundleInput, PriorAttempt, RecentOutcome, SkillBrief, WorkflowStep, compile_bundle
from agentd.clock import Clock, format_ts
from agentd.config import Config, passthrough_environment, read_env_file
from agentd.evidence import AttemptPaths, attempt_paths, prepare_attempt_dir, redact_files, write_manifest
from agentd.evidence import write_private as write_evidence
from agentd.hashing import canonical_json, sha256_file, sha256_hex
from agentd.outcome import CompletionChecks, Decision, Extracted, Gated, RetryPolicy, decide, extract_outcome, gate
from agentd.records import AdapterConfig, TaskOutcome, TaskRecord
from agentd.store import ArtifactRow, AsyncStore, AttemptEnd, Claim, OutboxRow, Store
from agentd.store.attempts import AttemptPlan


@dataclass(frozen=True)
class Prepared:
    claim: Claim
    adapter: Adapter
    ctx: AttemptContext
    bundle: Bundle
    checks: CompletionChecks
    secrets: tuple[str, ...]

    @property
    def task(self) -> TaskRecord:
        return self.claim.task

    @property
    def attempt_id(self) -> str:
        assert self.claim.attempt is not None
        return self.claim.attempt.attempt_id


def plan_attempt(config: Config, task: TaskRecord) -> AttemptPlan:
    """Adapter: requested → task type → profile. Model: requested → type → profile → adapter.
    Priority never chooses either. Raises InputError if the config no longer allows the task."""
    from agentd.errors import InputError

    spec = config.task_types.get(task.task_type)
    profile = config.profiles.get(task.requested_profile_id)
    if spec is None or profile is None:
        raise InputError(
            f"task type {task.task_type!r} or profile {task.requested_profile_id!r} is no longer configured"
        )
    adapter_id = task.requested_adapter_id or spec.default_adapter_id or profile.default_adapter_id
    adapter = config.adapters.get(adapter_id)
    if adapter is None:
        raise InputError(f"adapter {adapter_id!r} is no longer configured")
    model = task.requested_model or spec.default_model or profile.default_model or getattr(adapter, "model", None)
    return AttemptPlan(adapter_id, adapter.kind, model)


class AttemptPreparer:
    def __init__(self, config: Config, db: AsyncStore, clock: Clock) -> None:
        self.config, self.db, self.clock = config, db, clock

    async def prepare(self, claim: Claim, workflow: WorkflowStep | None = None) -> Prepared:
        assert claim.attempt is not None
        task, attempt, config = claim.task, claim.attempt, self.config
        adapter_config = config.adapters[attempt.adapter_id]
        paths = attempt_paths(config.paths.state_dir, task.task_id, attempt.attempt_id)
        prepare_attempt_dir(paths)
        bundle = compile_bundle(await self._bundle_input(task, attempt.attempt_number, workflow))
        write_evidence(paths.prompt, bundle.text)
        await self.db.call(
            Store.record_bundle,
            task.task_id,
            attempt.attempt_id,
            bundle.bundle_hash,
            str(paths.prompt),
            {
                "chars": bundle.chars,
                "over_budget_chars": bundle.over_budget_chars,
                "cuts": [{"section": c.section, "chars": c.chars_removed} for c in bundle.cuts],
            },
            self.clock.now(),
        )
        env, secrets = self._environment(adapter_config, task, attempt.attempt_id, paths, attempt.model, workflow)
        working_dir: str | None = getattr(adapter_config, "working_dir", None)  # ollama has none
        cwd = Path(working_dir) if working_dir else config.paths.workspace
        ctx = AttemptContext(
            task=task,
            attempt_id=attempt.attempt_id,
            adapter=adapter_config,
            model=attempt.model,
            paths=paths,
            workspace=config.paths.workspace,
            cwd=cwd,
            env=env,
            bundle_text=bundle.text,
            timeout_s=adapter_config.timeout_ms / 1000,
            kill_grace_s=config.dispatch.kill_grace_s,
            output_cap_bytes=config.dispatch.output_cap_bytes,
        )
        return Prepared(claim, adapter_for(adapter_config), ctx, bundle, self._checks(task), tuple(secrets))

    async def _bundle_input(self, task: TaskRecord, attempt_number: int, workflow: WorkflowStep | None) -> BundleInput:
        config = self.config
        profile = config.profiles[task.requested_profile_id]
        prior = await self.db.call(Store.failure_summaries, task.task_id)
        recent: list[tuple[int, str, str, str]] = []
        if profile.context_policy.include_recent_memory and config.dispatch.recent_memory_items:
            recent = await self.db.call(Store.recent_outcomes, config.dispatch.recent_memory_items, task.task_id)
        skill_ids = dict.fromkeys([*profile.skill_ids, *task.skill_ids, *(workflow_skills(config, task))])
        skills = tuple(
            SkillBrief(
                s.skill_id,
                s.instructions,
                tuple((c.name, c.description or "") for c in s.manifest.cli_commands or ()),
            )
            for s in (config.skills[i] for i in skill_ids if i in config.skills)
        )
        requirements = task.evidence_requirements
        return BundleInput(
            agent_name=config.agent.display_name,
            constitution=config.constitution,
            soul_text=config.soul_text,
            purpose_text=config.purpose_text,
            profile=profile,
            skills=skills,
            task=task,
            attempt_number=attempt_number,
            prior_attempts=tuple(PriorAttempt(*p) for p in prior),
            recent_outcomes=tuple(RecentOutcome(*r) for r in recent),
            workflow=workflow,
            required_artifacts=tuple(requirements.required_artifacts or ()) if requirements else (),
        )

    def _environment(
        self,
        adapter: AdapterConfig,
        task: TaskRecord,
        attempt_id: str,
        paths: AttemptPaths,
        model: str | None,
        workflow: WorkflowStep | None,
    ) -> tuple[dict[str, str], list[str]]:
        """Only what the adapter is configured to get: never the service's own environment."""
        config = self.config
        env = passthrough_environment()
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/local/bin:/usr/bin:/bin')}"
        env.update(HOME=str(paths.scratch / "home"), TMPDIR=str(paths.scratch / "tmp"))
        secrets: list[str] = []
        env_file = getattr(adapter, "env_file", None)
        if env_file:
            from_file = read_env_file(Path(env_file))
            env.update(from_file)
            secrets += from_file.values()
        env.update(getattr(adapter, "env", None) or {})
        env.update(
            AGENTD_TASK_ID=str(task.task_id),
            AGENTD_ATTEMPT_ID=attempt_id,  # the idempotency key an adapter can pass on
            AGENTD_TASK_TYPE=task.task_type,
            AGENTD_RESULT_PATH=str(paths.result),
            AGENTD_BUNDLE_PATH=str(paths.prompt),
            AGENTD_WORKSPACE=str(config.paths.workspace),
            AGENTD_CONFIG=str(config.path),
            AGENTD_PATHS__STATE_DIR=str(config.paths.state_dir),
            AGENTD_PATHS__WORKSPACE=str(config.paths.workspace),
        )
        if model:
            env["AGENTD_MODEL"] = model
        if workflow is not None:
            env.update(
                AGENTD_WORKFLOW_ID=str(workflow.workflow_id),
                AGENTD_WORKFLOW_STATE=workflow.state_id,
                AGENTD_WORKFLOW_ITERATION=str(workflow.iteration),
            )
        return env, secrets

    def _checks(self, task: TaskRecord) -> CompletionChecks:
        spec = self.config.task_types[task.task_type]
        policy, required = spec.success_policy, task.evidence_requirements
        return CompletionChecks(
            required_artifacts=tuple(required.required_artifacts or ()) if required else (),
            require_artifacts=bool(policy and policy.require_artifacts),
            verify_file_changes=bool(
                (policy and policy.verify_claimed_file_changes)
                or (required and required.require_file_change_verification)
            ),
            require_adapter_audit=bool(
                (policy and policy.require_adapter_audit) or (required and required.require_adapter_audit)
            ),
        )


def workflow_skills(config: Config, task: TaskRecord) -> list[str]:
    if task.workflow_ref is None:
        return []
    for definition in config.workflows.values():
        for state in definition.states:
            if state.state_id == task.workflow_ref.state_id and state.task_type == task.task_type:
                return list(state.default_skill_ids or [])
    return []


# --- judging ---------------------------------------------------------------------------------------


def retry_policy(config: Config) -> RetryPolicy:
    d = config.dispatch
    return RetryPolicy(
        d.backoff_base_s, d.backoff_max_s, d.backoff_jitter, d.rate_limit_backoff_s, d.max_rate_limit_reschedules
    )


def judge(
    config: Config, clock: Clock, rng: random.Random, prepared: Prepared, run: AdapterRun | None, stopped: str | None
) -> AttemptEnd:
    """Decide the attempt's outcome from its evidence, seal the evidence, and say what to commit."""
    paths, task = prepared.ctx.paths, prepared.task
    if run is not None and run.final_message is not None:
        write_evidence(paths.last_message, run.final_message)
    redact_files([paths.stdout, paths.stderr, paths.result, paths.last_message], list(prepared.secrets))
    result_text = paths.result.read_text(encoding="utf-8", errors="replace") if paths.result.is_file() else None
    extracted = extract_outcome(result_text, run.final_message if run else None)
    gated, termination, failure_type = _gated(prepared, run, stopped, extracted)
    now = clock.now()
    decision = decide(
        task,
        task.free_attempt_count,
        gated.outcome,
        now=now,
        policy=retry_policy(config),
        rng=rng,
        rate_limited=bool(run and run.rate_limited and stopped is None),
        interrupted=stopped == "interrupted",
    )
    artifacts = _artifact_rows(config, prepared, gated, paths)
    manifest = write_manifest(
        paths, _manifest_fields(config, prepared, run, gated, decision, termination, failure_type, artifacts, now)
    )
    diagnostics = _diagnostics(run, extracted, gated, manifest["artifact_hash"])
    return AttemptEnd(
        attempt_id=prepared.attempt_id,
        task_id=task.task_id,
        ended_at=now,
        exit_status=run.exit_status if run else "error",
        retry_class=decision.retry_class,
        termination_reason=termination,
        outcome=gated.outcome,
        status=decision.status,
        available_at=decision.available_at,
        last_error=decision.last_error,
        free_attempt=decision.free_attempt,
        rate_limited=decision.rate_limited,
        model=run.model if run else None,
        downgrade_reasons=gated.reasons,
        artifacts=artifacts,
        outbox=outbox_rows(config, prepared, gated.outcome, decision.status),
        diagnostics=diagnostics,
        usage=_usage(run),
        paths={
            name: str(getattr(paths, name)) if getattr(paths, name).exists() else None
            for name in ("stdout", "stderr", "result", "last_message")
        },
    )


def _gated(
    prepared: Prepared, run: AdapterRun | None, stopped: str | None, extracted: Extracted
) -> tuple[Gated, str, str | None]:
    """(gated outcome, termination_reason, failure_type)."""
    if stopped == "operator_canceled":
        outcome = TaskOutcome(
            status="operator_canceled",
            machine_status="canceled",
            operator_summary="canceled by the operator while running; the adapter was stopped",
        )
        return Gated(outcome), "operator_canceled", "operator_canceled"
    if stopped == "interrupted" or run is None:
        outcome = TaskOutcome(
            status="retryable_failure",
            machine_status="needs_retry",
            operator_summary="interrupted: the dispatcher was stopping and the grace period ran out",
        )
        return Gated(outcome), "interrupted", "interrupted"
    process = run.process
    if process is not None and process.start_error:
        return Gated(_retry(process.start_error)), "start_failed", "start_error"
    if run.exit_status == "timeout":
        return (
            Gated(_retry(f"timed out after {prepared.ctx.timeout_s:g}s; the process group was killed")),
            "timeout",
            "timeout",
        )
    if run.rate_limited:
        return Gated(_retry(f"rate limited: {run.failure or 'the provider said slow down'}")), "exited", "rate_limited"
    gated = gate(
        extracted,
        adapter_ok=run.ok,
        adapter_failure=run.failure,
        workspace=prepared.ctx.workspace,
        attempt_started=prepared.claim.attempt.started_at if prepared.claim.attempt else prepared.task.updated_at,
        checks=prepared.checks,
        audit_bytes=process.stdout.bytes_seen if process else 1,
    )
    if gated.outcome.status == "completed":
        return gated, "exited", None
    if extracted.outcome is None:
        return gated, "exited", "adapter_error" if not run.ok else "no_outcome"
    return gated, "exited", "gate_failed" if gated.downgraded else "model_reported_failure"


def _retry(summary: str) -> TaskOutcome:
    return TaskOutcome(status="retryable_failure", machine_status="needs_retry", operator_summary=summary)


def _artifact_rows(config: Config, prepared: Prepared, gated: Gated, paths: AttemptPaths) -> tuple[ArtifactRow, ...]:
    spec = config.task_types[prepared.task.task_type]
    role = (spec.artifact_roles or ["output"])[0]
    rows = [ArtifactRow(role, f.relative_path, sha256_file(f.absolute_path)) for f in gated.artifacts]
    if prepared.checks.require_adapter_audit and gated.outcome.status == "completed" and paths.stdout.is_file():
        audit = str(paths.stdout.relative_to(config.paths.state_dir))
        rows.append(ArtifactRow("adapter-audit", audit, sha256_file(paths.stdout), "text/plain"))
    return tuple(rows)


def outbox_rows(config: Config, prepared: Prepared, outcome: TaskOutcome, status: str) -> tuple[OutboxRow, ...]:
    """Side effects the outcome asks for; applied after the commit, only if verified and allowed."""
    task, attempt_id = prepared.task, prepared.attempt_id
    policy = config.profiles[task.requested_profile_id].result_policy
    rows = []
    if status == "completed":
        for i, intent in enumerate(outcome.follow_up_tasks or []):
            rows.append(
                OutboxRow(
                    "follow_up_task",
                    f"{attempt_id}:follow_up:{i}",
                    intent.model_dump(mode="json"),
                    *(
                        ("pending", None)
                        if policy.allow_follow_up_tasks
                        else ("refused", {"reason": "the profile's result_policy does not allow follow-up tasks"})
                    ),
                )
            )
        for i, message in enumerate(outcome.external_messages or []):
            rows.append(
                OutboxRow(
                    "external_message",
                    f"{attempt_id}:message:{i}",
                    message,
                    *(
                        ("awaiting_handler", None)
                        if policy.allow_external_messages
                        else ("refused", {"reason": "the profile's result_policy does not allow external messages"})
                    ),
                )
            )
    if task.workflow_ref is not None and status in ("completed", "permanent_failure", "blocked", "operator_canceled"):
        rows.append(
            OutboxRow(
                "workflow_signal",
                f"{attempt_id}:workflow",
                {
                    "workflow_id": task.workflow_ref.workflow_id,
                    "state_id": task.workflow_ref.state_id,
                    "iteration": task.workflow_iteration,
                    "signal": outcome.workflow_signal,
                    "task_status": status,
                },
            )
        )
    return tuple(rows)


def _manifest_fields(
    config: Config,
    prepared: Prepared,
    run: AdapterRun | None,
    gated: Gated,
    decision: Decision,
    termination: str,
    failure_type: str | None,
    artifacts: tuple[ArtifactRow, ...],
    now: Any,
) -> dict[str, Any]:
    task, attempt, ctx = prepared.task, prepared.claim.attempt, prepared.ctx
    assert attempt is not None
    profile = config.profiles[task.requested_profile_id]
    started = attempt.started_at
    return {
        "run_id": attempt.attempt_id,
        "runtime_identity": {
            "agentd_version": __version__,
            "host": socket.gethostname(),
            "agent_id": config.agent.agent_id,
            "runner_id": attempt.runner_id,
        },
        "agent_ref": {
            "agent": config.agent.agent_id,
            "profile": profile.profile_id,
            "variant": sha256_hex(canonical_json(profile.model_dump(mode="json")))[:16],
        },
        "task_ref": {"task_id": task.task_id, "task_type": task.task_type, "attempt_number": attempt.attempt_number},
        "task_hash": task_hash(task),
        "bundle_hash": prepared.bundle.bundle_hash,
        "constitution": {
            "soul_hash": config.constitution.soul_hash,
            "purpose_hash": config.constitution.purpose_hash,
            "version": config.constitution.version,
        },
        "adapter": {
            "adapter_id": attempt.adapter_id,
            "kind": attempt.adapter_kind,
            "cli_version": run.cli_version if run else None,
        },
        "model": (run.model if run else None) or attempt.model,
        "budgets": {
            "timeout_s": ctx.timeout_s,
            "kill_grace_s": ctx.kill_grace_s,
            "output_cap_bytes": ctx.output_cap_bytes,
            "max_prompt_chars": profile.context_policy.max_prompt_chars,
            "max_attempts": task.max_attempts,
        },
        "started_at": format_ts(started),
        "completed_at": format_ts(now),
        "wall_clock_elapsed_s": max((now - started).total_seconds(), 0.0),
        "termination_reason": termination,
        "failure_type": failure_type,
        "outcome": {
            "status": gated.outcome.status,
            "machine_status": gated.outcome.machine_status,
            "next_status": decision.status,
            "gate_reasons": list(gated.reasons),
        },
        "artifacts": [{"role": a.role, "path": a.relative_path, "sha256": a.sha256} for a in artifacts],
    }


def task_hash(task: TaskRecord) -> str:
    """What was asked, independent of when or how often: the task's frozen inputs."""
    fields = task.model_dump(
        mode="json",
        include={
            "task_type",
            "subject",
            "description",
            "payload",
            "skill_ids",
            "evidence_requirements",
            "requested_profile_id",
            "requested_adapter_id",
            "requested_model",
        },
    )
    return sha256_hex(canonical_json(fields))


def _diagnostics(run: AdapterRun | None, extracted: Extracted, gated: Gated, artifact_hash: str) -> dict[str, Any]:
    process = run.process if run else None
    found: dict[str, Any] = {
        "summary": gated.outcome.operator_summary[:2000],
        "outcome_source": extracted.source,
        "artifact_hash": artifact_hash,
    }
    if extracted.problem and extracted.outcome is None:
        found["outcome_problem"] = extracted.problem
    if gated.reasons:
        found["gate_failures"] = list(gated.reasons)
    if run is not None:
        found.update(run.diagnostics)
        if run.failure:
            found["adapter_failure"] = run.failure
        if run.rate_limited:
            found["rate_limited"] = True
        if run.cli_version:
            found["cli_version"] = run.cli_version
    if process is not None:
        found.update(
            exit_code=process.exit_code,
            signal=process.signal,
            elapsed_s=round(process.elapsed_s, 3),
            stdout_bytes=process.stdout.bytes_seen,
            stderr_bytes=process.stderr.bytes_seen,
            stdout_truncated=process.stdout.truncated,
            stderr_truncated=process.stderr.truncated,
        )
    return found


def _usage(run: AdapterRun | None) -> dict[str, Any]:
    if run is None:
        return {}
    u = run.usage
    return {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "cost_usd": u.cost_usd,
        "cost_estimated": int(u.cost_estimated) if u.cost_usd is not None else None,
    }
