"""One attempt, before and after it runs: prepare (bundle, evidence dir, environment) and
conclude (redact what it left, judge it, seal the evidence, and say what the outcome commit writes).

Every ending goes through `_seal`: a live attempt, one the boot sweep found after the runtime
died, and one agentd itself failed. Each leaves a complete manifest and a redacted evidence dir.
"""

from __future__ import annotations

import logging
import random
import shutil
import socket
import sys
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from agentd import __version__
from agentd.adapters import Adapter, AdapterRun, AttemptContext, adapter_for
from agentd.bundle import Bundle, BundleInput, PriorAttempt, RecentOutcome, SkillBrief, WorkflowStep, compile_bundle
from agentd.clock import Clock, format_ts
from agentd.config import Config, passthrough_environment, read_env_file
from agentd.containment import attempt_group
from agentd.edge import MAX_RESULT_BYTES, scrub, scrub_value
from agentd.errors import ConfigError
from agentd.evidence import AttemptPaths, attempt_paths, prepare_attempt_dir, write_manifest
from agentd.evidence import write_private as write_evidence
from agentd.hashing import canonical_json, sha256_file, sha256_hex
from agentd.judge import AttemptFacts, Verdict, judge
from agentd.outcome import CompletionChecks, RetryPolicy
from agentd.records import AdapterConfig, TaskAttempt, TaskOutcome, TaskRecord
from agentd.redaction import Redactor
from agentd.store import ArtifactRow, AsyncStore, AttemptEnd, Claim, OutboxRow, Store
from agentd.store.attempts import AttemptPlan
from agentd.store.base import is_storage_fault, os_storage_error

logger = logging.getLogger(__name__)

# Evidence files that are inputs agentd wrote (the bundle, the payload): never rewritten, their
# hashes are what the manifest pins. Everything else the attempt left is redacted before sealing.
INPUT_FILES = ("prompt.md", "stdin.json", "manifest.json")


@dataclass(frozen=True)
class Prepared:
    claim: Claim
    adapter: Adapter
    ctx: AttemptContext
    bundle: Bundle
    checks: CompletionChecks
    redactor: Redactor

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
        env, redactor = self._environment(adapter_config, task, attempt.attempt_id, paths, attempt.model, workflow)
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
            group=attempt_group(config.paths.state_dir, attempt.attempt_id),
        )
        return Prepared(claim, adapter_for(adapter_config), ctx, bundle, completion_checks(config, task), redactor)

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
    ) -> tuple[dict[str, str], Redactor]:
        """Only what the adapter is configured to get: never the service's own environment."""
        config = self.config
        env = passthrough_environment()
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/local/bin:/usr/bin:/bin')}"
        env.update(HOME=str(paths.scratch / "home"), TMPDIR=str(paths.scratch / "tmp"))
        env_file = getattr(adapter, "env_file", None)
        from_file = read_env_file(Path(env_file)) if env_file else {}
        env.update(from_file)
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
        return env, Redactor(from_file.values())


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
    )


def adapter_redactor(config: Config, adapter_id: str) -> Redactor:
    """The adapter's secrets as they are now (the boot sweep re-reads its env_file)."""
    env_file = getattr(config.adapters.get(adapter_id), "env_file", None)
    try:
        return Redactor(read_env_file(Path(env_file)).values() if env_file else ())
    except (OSError, ConfigError):
        logger.warning("cannot read %s to redact a reclaimed attempt's evidence", env_file)
        return Redactor()


def workflow_skills(config: Config, task: TaskRecord) -> list[str]:
    if task.workflow_ref is None:
        return []
    for definition in config.workflows.values():
        for state in definition.states:
            if state.state_id == task.workflow_ref.state_id and state.task_type == task.task_type:
                return list(state.default_skill_ids or [])
    return []


# --- concluding: redact, judge, seal ---------------------------------------------------------------


def retry_policy(config: Config) -> RetryPolicy:
    d = config.dispatch
    return RetryPolicy(
        d.backoff_base_s,
        d.backoff_max_s,
        d.backoff_jitter,
        d.rate_limit_backoff_s,
        d.max_rate_limit_reschedules,
        d.crash_limit,
    )


def conclude(
    config: Config, clock: Clock, rng: random.Random, prepared: Prepared, run: AdapterRun | None, stopped: str | None
) -> AttemptEnd:
    """After the run: redact what it left (before anything is parsed), judge it, seal the evidence,
    and say what the outcome commit writes."""
    paths, redactor = prepared.ctx.paths, prepared.redactor
    run = sanitized_run(run, redactor)
    if run is not None and run.final_message is not None:
        write_evidence(paths.last_message, run.final_message)
    redact_evidence(paths, redactor)
    result_text, result_problem = read_result(paths)
    process = run.process if run else None
    facts = AttemptFacts(
        task=prepared.task,
        attempt=_attempt_of(prepared),
        checks=prepared.checks,
        workspace=prepared.ctx.workspace,
        timeout_s=prepared.ctx.timeout_s,
        run=run,
        stopped=stopped if stopped in ("interrupted", "operator_canceled") else None,  # type: ignore[arg-type]
        result_text=result_text,
        result_problem=result_problem,
        stdout_bytes=process.stdout.bytes_seen if process else _size(paths.stdout),
    )
    started = run is not None and not (process is not None and process.start_error)
    return _seal(config, clock, rng, facts, redactor, bundle_hash=prepared.bundle.bundle_hash, started=started)


def sweep_end(
    config: Config, clock: Clock, rng: random.Random, task: TaskRecord, attempt: TaskAttempt, survivors: list[int]
) -> AttemptEnd:
    """An attempt a dead runtime left open. If its processes were gone and it left a result, that is
    judged through the same gates as a live attempt (exit unknown); otherwise the runtime crashed
    under it: re-queued without spending an attempt, unless it keeps happening (crash_limit)."""
    paths = AttemptPaths(Path(attempt.evidence_dir)) if attempt.evidence_dir else _paths(config, task, attempt)
    redactor = adapter_redactor(config, attempt.adapter_id)
    redact_evidence(paths, redactor)
    result_text, result_problem = read_result(paths) if not survivors else (None, None)
    facts = AttemptFacts(
        task=task,
        attempt=attempt,
        checks=completion_checks(config, task),
        workspace=config.paths.workspace,
        timeout_s=_timeout_s(config, attempt.adapter_id),
        result_text=result_text,
        result_problem=result_problem,
        stdout_bytes=_size(paths.stdout),
        swept=True,
    )
    notes = {"killed_pids": survivors, "judged": result_text is not None}
    return _seal(
        config,
        clock,
        rng,
        facts,
        redactor,
        bundle_hash=attempt.bundle_hash,
        started=attempt.pid is not None,
        notes=notes,
    )


def internal_failure_end(
    config: Config,
    clock: Clock,
    rng: random.Random,
    task: TaskRecord,
    attempt: TaskAttempt,
    exc: BaseException,
    *,
    stage: str,
    started: bool,
    redactor: Redactor | None = None,
) -> AttemptEnd:
    """agentd itself failed (a bug, or a value nothing could store): a recorded failure naming the
    exception, with nothing from the attempt's own outcome (that is what may have been poison)."""
    redactor = redactor or adapter_redactor(config, attempt.adapter_id)
    reason = redactor.text(scrub(f"agentd failed {stage}: {type(exc).__name__}: {exc}"))[:2000]
    facts = AttemptFacts(
        task=task,
        attempt=attempt,
        checks=completion_checks(config, task),
        workspace=config.paths.workspace,
        timeout_s=_timeout_s(config, attempt.adapter_id),
        internal_error=reason,
    )
    return _seal(
        config, clock, rng, facts, redactor, bundle_hash=attempt.bundle_hash, started=started, best_effort=True
    )


def _seal(
    config: Config,
    clock: Clock,
    rng: random.Random,
    facts: AttemptFacts,
    redactor: Redactor,
    *,
    bundle_hash: str | None,
    started: bool,
    notes: dict[str, Any] | None = None,
    best_effort: bool = False,
) -> AttemptEnd:
    """Judge the facts, write the manifest (complete on every path), and build the commit. An
    unusable disk is a StorageError; with best_effort (agentd's own failure path) any other problem
    writing the manifest is noted in the diagnostics rather than raised."""
    task, attempt, run = facts.task, facts.attempt, facts.run
    now = clock.now()
    verdict = judge(facts, now=now, policy=retry_policy(config), rng=rng)
    paths = _paths(config, task, attempt)
    side_effects = "possible" if started else "none"
    artifacts = _artifact_rows(config, facts, verdict, paths)
    fields = _manifest_fields(config, facts, verdict, artifacts, bundle_hash, side_effects, redactor.count, now)
    artifact_hash, manifest_problem = None, None
    try:
        paths.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        artifact_hash = write_manifest(paths, fields)["artifact_hash"]
    except Exception as exc:
        if isinstance(exc, OSError) and is_storage_fault(exc):
            raise os_storage_error(exc) from None
        if not best_effort:
            raise
        manifest_problem = f"not written: {type(exc).__name__}: {scrub(str(exc))[:300]}"
    shutil.rmtree(paths.scratch, ignore_errors=True)  # HOME and friends: not evidence, and may hold keys
    decision, gated = verdict.decision, verdict.gated
    diagnostics = _diagnostics(run, verdict, artifact_hash, redactor.count, notes or {})
    if manifest_problem:
        diagnostics["manifest_problem"] = manifest_problem
    return AttemptEnd(
        attempt_id=attempt.attempt_id,
        task_id=task.task_id,
        ended_at=now,
        exit_status=verdict.exit_status,
        retry_class=decision.retry_class,
        termination_reason=verdict.termination_reason,
        outcome=gated.outcome,
        status=decision.status,
        available_at=decision.available_at,
        last_error=decision.last_error,
        free_attempt=decision.free_attempt,
        rate_limited=decision.rate_limited,
        crashed=decision.crashed,
        side_effects=side_effects,
        model=run.model if run else None,
        downgrade_reasons=gated.reasons,
        artifacts=artifacts,
        outbox=outbox_rows(config, task, attempt.attempt_id, gated.outcome, decision.status),
        diagnostics=diagnostics,
        usage=_usage(run),
        paths={
            name: str(getattr(paths, name)) if getattr(paths, name).exists() else None
            for name in ("stdout", "stderr", "result", "last_message")
        },
        boot_sweep=facts.swept,
    )


def sanitized_run(run: AdapterRun | None, redactor: Redactor) -> AdapterRun | None:
    """What the adapter reported, redacted and made storable before anything reads it."""
    if run is None:
        return None

    def clean(text: str | None) -> str | None:
        return None if text is None else redactor.text(scrub(text))

    return replace(
        run,
        final_message=clean(run.final_message),
        failure=clean(run.failure),
        model=clean(run.model),
        cli_version=clean(run.cli_version),
        diagnostics=redactor.value(scrub_value(run.diagnostics)),
    )


def redact_evidence(paths: AttemptPaths, redactor: Redactor) -> int:
    """Every file the attempt left in its evidence dir (not the inputs agentd wrote)."""
    if not redactor or not paths.root.is_dir():
        return 0
    return redactor.files(p for p in sorted(paths.root.iterdir()) if p.is_file() and p.name not in INPUT_FILES)


def read_result(paths: AttemptPaths) -> tuple[str | None, str | None]:
    """result.json's text (at most MAX_RESULT_BYTES), or why it cannot be used."""
    try:
        with paths.result.open("rb") as handle:
            data = handle.read(MAX_RESULT_BYTES + 1)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read it ({exc.strerror})"
    if len(data) > MAX_RESULT_BYTES:
        return None, f"larger than {MAX_RESULT_BYTES} bytes; agentd reads at most that much"
    return data.decode("utf-8", errors="replace"), None


def _attempt_of(prepared: Prepared) -> TaskAttempt:
    assert prepared.claim.attempt is not None
    return prepared.claim.attempt


def _paths(config: Config, task: TaskRecord, attempt: TaskAttempt) -> AttemptPaths:
    return attempt_paths(config.paths.state_dir, task.task_id, attempt.attempt_id)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _timeout_s(config: Config, adapter_id: str) -> float:
    adapter = config.adapters.get(adapter_id)
    return adapter.timeout_ms / 1000 if adapter else 0.0


def _artifact_rows(
    config: Config, facts: AttemptFacts, verdict: Verdict, paths: AttemptPaths
) -> tuple[ArtifactRow, ...]:
    spec = config.task_types.get(facts.task.task_type)
    role = (spec.artifact_roles if spec and spec.artifact_roles else ["output"])[0]
    gated = verdict.gated
    rows = [ArtifactRow(role, f.relative_path, sha256_file(f.absolute_path)) for f in gated.artifacts]
    if facts.checks.require_adapter_audit and gated.outcome.status == "completed" and paths.stdout.is_file():
        audit = str(paths.stdout.relative_to(config.paths.state_dir))
        rows.append(ArtifactRow("adapter-audit", audit, sha256_file(paths.stdout), "text/plain"))
    return tuple(rows)


def outbox_rows(
    config: Config, task: TaskRecord, attempt_id: str, outcome: TaskOutcome, status: str
) -> tuple[OutboxRow, ...]:
    """Side effects the outcome asks for; applied after the commit, only if verified and allowed."""
    profile = config.profiles.get(task.requested_profile_id)
    allow_follow_ups = bool(profile and profile.result_policy.allow_follow_up_tasks)
    allow_messages = bool(profile and profile.result_policy.allow_external_messages)
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
                        if allow_follow_ups
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
                        if allow_messages
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
    facts: AttemptFacts,
    verdict: Verdict,
    artifacts: tuple[ArtifactRow, ...],
    bundle_hash: str | None,
    side_effects: str,
    redactions: int,
    now: datetime,
) -> dict[str, Any]:
    task, attempt, run = facts.task, facts.attempt, facts.run
    profile = config.profiles.get(task.requested_profile_id)
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
            "profile": task.requested_profile_id,
            "variant": sha256_hex(canonical_json(profile.model_dump(mode="json")))[:16] if profile else None,
        },
        "task_ref": {"task_id": task.task_id, "task_type": task.task_type, "attempt_number": attempt.attempt_number},
        "task_hash": task_hash(task),
        "bundle_hash": bundle_hash,
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
            "timeout_s": facts.timeout_s,
            "kill_grace_s": config.dispatch.kill_grace_s,
            "output_cap_bytes": config.dispatch.output_cap_bytes,
            "max_prompt_chars": profile.context_policy.max_prompt_chars if profile else None,
            "max_attempts": task.max_attempts,
        },
        "started_at": format_ts(started),
        "completed_at": format_ts(now),
        "wall_clock_elapsed_s": max((now - started).total_seconds(), 0.0),
        "termination_reason": verdict.termination_reason,
        "failure_type": verdict.failure_type,
        "exit_status": verdict.exit_status,
        "side_effects": side_effects,
        "redactions": {"count": redactions},
        "outcome": {
            "status": verdict.gated.outcome.status,
            "machine_status": verdict.gated.outcome.machine_status,
            "next_status": verdict.decision.status,
            "gate_reasons": list(verdict.gated.reasons),
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


def _diagnostics(
    run: AdapterRun | None, verdict: Verdict, artifact_hash: str | None, redactions: int, notes: dict[str, Any]
) -> dict[str, Any]:
    process = run.process if run else None
    extracted, gated = verdict.extracted, verdict.gated
    found: dict[str, Any] = {
        "summary": gated.outcome.operator_summary[:2000],
        "outcome_source": extracted.source,
        "artifact_hash": artifact_hash,
        **notes,
    }
    if redactions:
        found["redactions"] = redactions
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
