"""One attempt, before and after it runs.

prepare: the bundle, the evidence dir, the environment, the adapter. After it: `gather` the facts
(redact what it left before anything reads it, read the result, look up every file the outcome
names), `judge` them (agentd/judge.py, pure), and `finish` (seal the manifest, drop scratch/).
Every ending goes this way: a live attempt (`conclude`), one the boot sweep found after the
runtime died (`sweep_end`), and one agentd itself failed (`internal_failure_end`).
"""

from __future__ import annotations

import logging
import random
import shutil
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from agentd import __version__
from agentd.adapters import Adapter, AdapterRun, AttemptContext, adapter_for
from agentd.bundle import Bundle, BundleInput, PriorAttempt, RecentOutcome, SkillBrief, WorkflowStep, compile_bundle
from agentd.clock import Clock, format_ts
from agentd.config import Config, read_env_file
from agentd.containment import attempt_group
from agentd.edge import MAX_RESULT_BYTES, scrub, scrub_value
from agentd.errors import ConfigError, InputError
from agentd.evidence import AttemptPaths, attempt_paths, make_attempt_dir, seal, write_private
from agentd.hashing import canonical_json, sha256_file, sha256_hex
from agentd.judge import AttemptFacts, OutboxPolicy, Stopped, extracted_of, judge
from agentd.outcome import CompletionChecks, FileFact, RetryPolicy, paths_to_check
from agentd.records import AdapterConfig, ArtifactRow, AttemptEnd, AttemptPlan, Claim, TaskAttempt, TaskRecord
from agentd.redaction import Redactor
from agentd.runner import child_environment
from agentd.store import AsyncStore, Store
from agentd.workflows import accepted_signals, state_of

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """An attempt ready to run: its adapter, its context, its bundle and its secrets."""

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
    def attempt(self) -> TaskAttempt:
        assert self.claim.attempt is not None
        return self.claim.attempt

    @property
    def attempt_id(self) -> str:
        return self.attempt.attempt_id


def plan_attempt(config: Config, task: TaskRecord) -> AttemptPlan:
    """Adapter: requested → task type → profile. Model: requested → type → profile → adapter.
    Priority never chooses either. Raises InputError if the config no longer allows the task."""
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
    def __init__(
        self,
        config: Config,
        db: AsyncStore,
        clock: Clock,
        adapters: Callable[[AdapterConfig], Adapter] = adapter_for,
    ) -> None:
        self.config, self.db, self.clock, self.adapters = config, db, clock, adapters

    async def prepare(self, claim: Claim) -> Prepared:
        assert claim.attempt is not None
        task, attempt, config = claim.task, claim.attempt, self.config
        adapter_config = config.adapters[attempt.adapter_id]
        paths = attempt_paths(config.paths.state_dir, task.task_id, attempt.attempt_id)
        make_attempt_dir(paths)
        workflow = await self.workflow_step(task)
        bundle = compile_bundle(await self._bundle_input(task, attempt.attempt_number, workflow))
        write_private(paths.prompt, bundle.text)
        details = {
            "chars": bundle.chars,
            "over_budget_chars": bundle.over_budget_chars,
            "cuts": [{"section": c.section, "chars": c.chars_removed} for c in bundle.cuts],
        }
        await self.db.call(
            Store.record_bundle,
            task.task_id,
            attempt.attempt_id,
            bundle.bundle_hash,
            str(paths.prompt),
            details,
            self.clock.now(),
        )
        env, redactor = self._environment(adapter_config, task, attempt, paths, workflow)
        working_dir: str | None = getattr(adapter_config, "working_dir", None)  # ollama has none
        ctx = AttemptContext(
            task=task,
            attempt_id=attempt.attempt_id,
            adapter=adapter_config,
            model=attempt.model,
            paths=paths,
            workspace=config.paths.workspace,
            cwd=Path(working_dir) if working_dir else config.paths.workspace,
            env=env,
            bundle_text=bundle.text,
            timeout_s=adapter_config.timeout_ms / 1000,
            kill_grace_s=config.dispatch.kill_grace_s,
            output_cap_bytes=config.dispatch.output_cap_bytes,
            group=attempt_group(config.paths.state_dir, attempt.attempt_id),
        )
        return Prepared(claim, self.adapters(adapter_config), ctx, bundle, completion_checks(config, task), redactor)

    async def workflow_step(self, task: TaskRecord) -> WorkflowStep | None:
        """What the bundle tells a step task about its workflow, including the signals it may give."""
        if task.workflow_ref is None:
            return None
        workflow = await self.db.call(Store.get_workflow_or_raise, task.workflow_ref.workflow_id)
        definition = self.config.workflows.get(workflow.workflow_type)
        state = state_of(definition, task.workflow_ref.state_id) if definition else None
        return WorkflowStep(
            workflow.workflow_id,
            workflow.workflow_type,
            task.workflow_ref.state_id,
            task.workflow_iteration or workflow.iteration,
            accepted_signals(state) if state else (),
        )

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
        attempt: TaskAttempt,
        paths: AttemptPaths,
        workflow: WorkflowStep | None,
    ) -> tuple[dict[str, str], Redactor]:
        """Only what the adapter is configured to get: never the service's own environment."""
        config = self.config
        agentd = {
            "AGENTD_TASK_ID": str(task.task_id),
            "AGENTD_ATTEMPT_ID": attempt.attempt_id,  # the idempotency key an adapter can pass on
            "AGENTD_TASK_TYPE": task.task_type,
            "AGENTD_RESULT_PATH": str(paths.result),
            "AGENTD_BUNDLE_PATH": str(paths.prompt),
            "AGENTD_WORKSPACE": str(config.paths.workspace),
            "AGENTD_CONFIG": str(config.path),
            "AGENTD_PATHS__STATE_DIR": str(config.paths.state_dir),
            "AGENTD_PATHS__WORKSPACE": str(config.paths.workspace),
        }
        if attempt.model:
            agentd["AGENTD_MODEL"] = attempt.model
        if workflow is not None:
            agentd.update(
                AGENTD_WORKFLOW_ID=str(workflow.workflow_id),
                AGENTD_WORKFLOW_STATE=workflow.state_id,
                AGENTD_WORKFLOW_ITERATION=str(workflow.iteration),
            )
        env_file = getattr(adapter, "env_file", None)
        return child_environment(
            home=paths.scratch / "home",
            tmp=paths.scratch / "tmp",
            env_file=Path(env_file) if env_file else None,
            env=getattr(adapter, "env", None),
            agentd=agentd,
            path_first=str(Path(sys.executable).parent),  # `agentd skills run` works from an attempt
        )


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


def workflow_skills(config: Config, task: TaskRecord) -> list[str]:
    if task.workflow_ref is None:
        return []
    for definition in config.workflows.values():
        for state in definition.states:
            if state.state_id == task.workflow_ref.state_id and state.task_type == task.task_type:
                return list(state.default_skill_ids or [])
    return []


def adapter_redactor(config: Config, adapter_id: str) -> Redactor:
    """The adapter's secrets as they are now (the boot sweep re-reads its env_file)."""
    env_file = getattr(config.adapters.get(adapter_id), "env_file", None)
    try:
        return Redactor(read_env_file(Path(env_file)).values() if env_file else ())
    except (OSError, ConfigError):
        logger.warning("cannot read %s to redact a reclaimed attempt's evidence", env_file)
        return Redactor()


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


# --- the three endings ---------------------------------------------------------------------------


def conclude(
    config: Config, clock: Clock, rng: random.Random, prepared: Prepared, run: AdapterRun | None, stopped: str | None
) -> AttemptEnd:
    """A live attempt's end: its run redacted before anything reads it, then judged and sealed."""
    paths, redactor = prepared.ctx.paths, prepared.redactor
    run = sanitized_run(run, redactor)
    if run is not None and run.final_message is not None:
        write_private(paths.last_message, run.final_message)
    process = run.process if run else None
    facts = gather(
        config,
        prepared.task,
        prepared.attempt,
        paths,
        redactor,
        run=run,
        stopped=stopped if stopped in ("interrupted", "operator_canceled") else None,  # type: ignore[arg-type]
        started=run is not None,
        stdout_bytes=process.stdout.bytes_seen if process else None,
    )
    return finish(config, clock, rng, facts, bundle_hash=prepared.bundle.bundle_hash)


def sweep_end(
    config: Config, clock: Clock, rng: random.Random, task: TaskRecord, attempt: TaskAttempt, survivors: list[int]
) -> AttemptEnd:
    """An attempt a dead runtime left open. If its processes were gone and it left a result, that is
    judged through the same gates as a live attempt (exit unknown); otherwise the runtime crashed
    under it: re-queued without spending an attempt, unless it keeps happening (crash_limit)."""
    paths = (
        AttemptPaths(Path(attempt.evidence_dir))
        if attempt.evidence_dir
        else attempt_paths(config.paths.state_dir, task.task_id, attempt.attempt_id)
    )
    facts = gather(
        config,
        task,
        attempt,
        paths,
        adapter_redactor(config, attempt.adapter_id),
        swept=True,
        read_result=not survivors,  # a result beside live processes may be half-written: not judged
        started=attempt.pid is not None,
        notes={"killed_pids": survivors},
    )
    facts = replace(facts, notes={**facts.notes, "judged": facts.result_text is not None})
    return finish(config, clock, rng, facts, bundle_hash=attempt.bundle_hash)


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
        timeout_s=_timeout_s(config, attempt.adapter_id),
        internal_error=reason,
        started=started,
        outbox_policy=_outbox_policy(config, task),
        redactions=redactor.count,
    )
    return finish(config, clock, rng, facts, bundle_hash=attempt.bundle_hash, best_effort=True)


def gather(
    config: Config,
    task: TaskRecord,
    attempt: TaskAttempt,
    paths: AttemptPaths,
    redactor: Redactor,
    *,
    run: AdapterRun | None = None,
    stopped: Stopped | None = None,
    swept: bool = False,
    read_result: bool = True,
    started: bool = True,
    stdout_bytes: int | None = None,
    notes: Mapping[str, Any] | None = None,
) -> AttemptFacts:
    """Everything the judge needs, from the evidence dir and the workspace: redacted first."""
    redact_evidence(paths, redactor)
    result_text, result_problem = read_result_file(paths) if read_result else (None, None)
    checks = completion_checks(config, task)
    facts = AttemptFacts(
        task=task,
        attempt=attempt,
        checks=checks,
        timeout_s=_timeout_s(config, attempt.adapter_id),
        run=run,
        stopped=stopped,
        result_text=result_text,
        result_problem=result_problem,
        stdout_bytes=_size(paths.stdout) if stdout_bytes is None else stdout_bytes,
        swept=swept,
        started=started,
        artifact_role=_artifact_role(config, task),
        outbox_policy=_outbox_policy(config, task),
        notes=dict(notes or {}),
        redactions=redactor.count,
    )
    extracted = extracted_of(facts)
    files = {p: file_fact(p, config.paths.workspace) for p in paths_to_check(extracted.outcome, checks)}
    audit = None
    if checks.require_adapter_audit and paths.stdout.is_file():
        relative = str(paths.stdout.relative_to(config.paths.state_dir))
        audit = ArtifactRow("adapter-audit", relative, sha256_file(paths.stdout), "text/plain")
    evidence = {n: str(getattr(paths, n)) if getattr(paths, n).exists() else None for n in EVIDENCE_PATHS}
    return replace(facts, extracted=extracted, files=files, audit=audit, evidence=evidence)


EVIDENCE_PATHS = ("stdout", "stderr", "result", "last_message")


def finish(
    config: Config,
    clock: Clock,
    rng: random.Random,
    facts: AttemptFacts,
    *,
    bundle_hash: str | None,
    best_effort: bool = False,
) -> AttemptEnd:
    """Judge, seal the manifest (complete on every path), drop scratch/, and say what to commit."""
    now = clock.now()
    end = judge(facts, now=now, policy=retry_policy(config), rng=rng)
    paths = attempt_paths(config.paths.state_dir, facts.task.task_id, facts.attempt.attempt_id)
    fields = manifest_fields(config, facts, end, bundle_hash)
    artifact_hash, problem = seal(paths, fields, best_effort=best_effort)
    shutil.rmtree(paths.scratch, ignore_errors=True)  # HOME and friends: not evidence, and may hold keys
    diagnostics = {**end.diagnostics, "artifact_hash": artifact_hash}
    if problem:
        diagnostics["manifest_problem"] = problem
    return replace(end, diagnostics=diagnostics)


def file_fact(relative: str, workspace: Path) -> FileFact:
    """What the workspace holds at a path an outcome names; refused if it is not inside it
    (absolute, `..`, or a symlink leading out)."""
    pure = PurePosixPath(relative)
    root = workspace.resolve()
    if pure.is_absolute() or ".." in pure.parts or not relative.strip():
        return FileFact(relative, f"path {relative!r} is outside the workspace")
    resolved = (root / pure).resolve()
    if not resolved.is_relative_to(root):
        return FileFact(relative, f"path {relative!r} leads outside the workspace")
    try:
        stat = resolved.stat()
    except OSError:
        return FileFact(relative)
    is_file = resolved.is_file()
    return FileFact(relative, None, True, is_file, stat.st_mtime, sha256_file(resolved) if is_file else None)


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


# Evidence files that are inputs agentd wrote (the bundle, the payload, the seal): never rewritten.
INPUT_FILES = ("prompt.md", "stdin.json", "manifest.json")


def read_result_file(paths: AttemptPaths) -> tuple[str | None, str | None]:
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


def manifest_fields(config: Config, facts: AttemptFacts, end: AttemptEnd, bundle_hash: str | None) -> dict[str, Any]:
    """The manifest (DESIGN §7, seed 001): who ran what, on which inputs, under which budgets, how
    it ended. Pure: the files' hashes are added when it is sealed."""
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


def _artifact_role(config: Config, task: TaskRecord) -> str:
    spec = config.task_types.get(task.task_type)
    return (spec.artifact_roles if spec and spec.artifact_roles else ["output"])[0]


def _outbox_policy(config: Config, task: TaskRecord) -> OutboxPolicy:
    profile = config.profiles.get(task.requested_profile_id)
    if profile is None:
        return OutboxPolicy()
    return OutboxPolicy(profile.result_policy.allow_follow_up_tasks, profile.result_policy.allow_external_messages)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _timeout_s(config: Config, adapter_id: str) -> float:
    adapter = config.adapters.get(adapter_id)
    return adapter.timeout_ms / 1000 if adapter else 0.0
