"""One attempt before it runs: which adapter and model it gets (`plan_attempt`, at its claim), then
everything it is handed (`AttemptPreparer.prepare` → `Prepared`).

Preparing makes the attempt's evidence dir, compiles its bundle (agentd/attempt/bundle.py) from the task,
its history and what it may still spend, builds its environment from the adapter's configuration alone,
routes its model calls through agentd's gateway (agentd/attempt/routing.py), resolves its policy once
(agentd/attempt/policy.py), gives it the tool-call hook when its calls are judged (or a `RefusedStart` when
the run user cannot start that hook), and begins its harness's session (an interrupted attempt's kept one,
resumed). How it ends is agentd/attempt/conclude.py's.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import anyio

from agentd import frozen_value
from agentd.adapters import Adapter, AttemptContext, adapter_for
from agentd.adapters.base import PolicyHook
from agentd.adapters.refused import RefusedStart
from agentd.attempt.bundle import (
    FAILED_CALLS_MAX,
    BudgetBrief,
    Bundle,
    BundleInput,
    FailedCall,
    PriorAttempt,
    RecentOutcome,
    SkillBrief,
    WorkflowStep,
    compile_bundle,
)
from agentd.attempt.manifest import DescribedMemo
from agentd.attempt.policy import AttemptPolicy, attempt_policy
from agentd.attempt.routing import Routed, route_attempt, routed_environment
from agentd.attempt.session import begin
from agentd.attempt.terms import attempt_skills
from agentd.clock import Clock
from agentd.config import Config
from agentd.config.budget import Spend, day_start
from agentd.config.environment import read_env_file
from agentd.config.tool_policy import gated
from agentd.errors import ConfigError, InputError
from agentd.evidence import AttemptPaths, attempt_paths, make_attempt_dir
from agentd.process.containment import attempt_group
from agentd.process.environment import child_environment
from agentd.process.files import keep_workspace, write_new, write_shared
from agentd.process.hook_check import HARNESS_OF, HookChecks
from agentd.process.limits import Limits
from agentd.process.privilege import RunUser
from agentd.records import AdapterConfig, AttemptPlan, Claim, CompiledBundle, TaskAttempt, TaskRecord, WorkflowRecord
from agentd.redaction import Redactor
from agentd.store import AsyncStore, Store
from agentd.work.intake import effective_adapter
from agentd.work.validation import missing_settings_files
from agentd.work.workflows import accepted_signals, state_of

logger = logging.getLogger(__name__)


@frozen_value
class Prepared:
    """An attempt ready to run: its adapter, its context, its bundle and its secrets."""

    claim: Claim
    adapter: Adapter
    ctx: AttemptContext
    bundle: Bundle
    compiled: CompiledBundle  # what bundle_compiled records, with the attempt's start
    policy: AttemptPolicy  # resolved once, here: what its end is judged, sealed and ended by
    redactor: Redactor
    routed: Routed | None = None  # its model calls through agentd's gateway (docs/gateway.md)

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
    adapter_id = effective_adapter(config, task)
    adapter = config.adapters.get(adapter_id) if adapter_id else None
    if adapter is None or adapter_id is None:
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
        user: RunUser | None = None,
    ) -> None:
        self.config, self.db, self.clock, self.adapters = config, db, clock, adapters
        self.user = user  # [dispatch] run_as, resolved at the service's start
        self.memo = DescribedMemo(config)  # what every attempt's policy takes from the config
        self.limits = Limits.of(config.dispatch.max_pids, config.dispatch.max_memory_mb)
        self.hooks = HookChecks()  # whether the run user can start the tool-call hook; a success is kept

    async def prepare(self, claim: Claim) -> Prepared:
        assert claim.attempt is not None
        task, attempt, config = claim.task, claim.attempt, self.config
        adapter_config = config.adapters[attempt.adapter_id]
        if missing := missing_settings_files(adapter_config):  # gone since the config was loaded
            place, name = missing[0]
            raise InputError(
                f"adapter {attempt.adapter_id}: autonomy.required_settings_files[{place}] ({name}) is not a file "
                "any more; the attempt did not start (put it back, or change the config and restart)"
            )
        paths = attempt_paths(config.paths.state_dir, task.task_id, attempt.attempt_id, config.paths.runs)
        make_attempt_dir(paths, self.user)
        if self.user is not None and (problem := keep_workspace(config.paths.workspace, self.user)):
            logger.warning("workspace: %s", problem)  # what the last attempt did to it is not this one's to inherit
        profile = config.profiles[task.requested_profile_id]
        recent_items = config.dispatch.recent_memory_items if profile.context_policy.include_recent_memory else 0
        workflow_id = task.workflow_ref.workflow_id if task.workflow_ref else None
        since = day_start(self.clock.now()) if config.budget.capped else None  # the day's spend, for its budget
        history = await self.db.read(
            Store.bundle_history, task.task_id, recent_items, workflow_id, calls=FAILED_CALLS_MAX, spend_since=since
        )
        workflow = workflow_step(config, task, history.workflow) if history.workflow is not None else None
        inputs = self._bundle_input(task, attempt.attempt_number, workflow, history.prior, history.recent)
        brief = budget_brief(config, task, attempt, history.spend)
        failed = tuple(FailedCall(*c) for c in history.failed_calls)
        bundle = compile_bundle(replace(inputs, failed_calls=failed, budget=brief))
        write_new(paths.prompt, bundle.text)
        write_shared(paths.bundle_copy, bundle.text, self.user)  # the attempt reads its own copy
        details = {
            "chars": bundle.chars,
            "over_budget_chars": bundle.over_budget_chars,
            "cuts": [{"section": c.section, "chars": c.chars_removed} for c in bundle.cuts],
        }
        compiled = CompiledBundle(bundle.bundle_hash, str(paths.prompt), details)  # recorded with the start
        env, redactor = self._environment(adapter_config, task, attempt, paths, workflow)
        routed = route_attempt(config, adapter_config, profile, env, redactor, separated=self.user is not None)
        if routed is not None:  # its model calls go through agentd's gateway (docs/gateway.md)
            env = routed_environment(env, adapter_config, routed)
        policy = attempt_policy(config, task, attempt.adapter_id, self.user, self.memo)
        hook, adapter = None, self.adapters(adapter_config)
        if gated(adapter_config.kind, policy.tools):  # docs/policy.md: its calls are judged while it runs
            hook = PolicyHook.of(paths.run, config.policy.ask_timeout_s)
            env["AGENTD_POLICY_SOCKET"] = str(hook.socket)  # for `agentd ask`
            if refusal := await self._hook_refusal(adapter_config.kind, hook, attempt.attempt_id):
                adapter = RefusedStart(adapter_config.kind, refusal)  # it ends start_failed, nothing run
        working_dir: str | None = getattr(adapter_config, "working_dir", None)  # ollama has none
        # an interrupted attempt's harness session, resumed; else a new one (docs/reliability.md, "Resume, not restart")
        session = begin(paths, task.task_id, adapter_config.kind, attempt.attempt_id, self.user)
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
            group=attempt_group(config.paths.state_dir, attempt.attempt_id, self.limits),
            user=self.user,
            hook=hook,
            session=session,
            gateway=routed.access if routed else None,
        )
        return Prepared(claim, adapter, ctx, bundle, compiled, policy, redactor, routed)

    async def _hook_refusal(self, kind: str, hook: PolicyHook, attempt_id: str) -> str | None:
        """Why the attempt must not start, or None: its harness runs the hook as the run user, and runs the
        call when the hook cannot start, so a hook the run user cannot start would judge nothing
        (docs/policy.md, "When the hook cannot start")."""
        harness = HARNESS_OF.get(kind)
        if harness is None:  # a script asks through `agentd ask`; no harness runs the hook's command
            return None
        problem = await anyio.to_thread.run_sync(self.hooks.problem, hook.command(harness), self.user)
        if problem is None:
            return None
        logger.warning("hook_check_failed attempt=%s %s", attempt_id, problem)
        return f"not started, as its tool calls could not be judged: {problem}"

    def _bundle_input(
        self,
        task: TaskRecord,
        attempt_number: int,
        workflow: WorkflowStep | None,
        prior: list[tuple[int, str, str, tuple[str, ...]]],
        recent: list[tuple[int, str, str, str]],
    ) -> BundleInput:
        config = self.config
        profile = config.profiles[task.requested_profile_id]
        skills = tuple(
            SkillBrief(
                s.skill_id,
                s.instructions,
                tuple((c.name, c.description or "") for c in s.manifest.cli_commands or ()),
            )
            for s in attempt_skills(config, task)
        )
        spec = config.task_types.get(task.task_type)
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
            artifact_roles=tuple(spec.artifact_roles or ()) if spec else (),
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
            **attempt_variables(config, task, attempt, workflow),
            "AGENTD_RESULT_PATH": str(paths.reported_result),
            "AGENTD_BUNDLE_PATH": str(paths.bundle_copy),
            "AGENTD_WORKSPACE": str(config.paths.workspace),
            "AGENTD_PATHS__STATE_DIR": str(config.paths.state_dir),
            "AGENTD_PATHS__WORKSPACE": str(config.paths.workspace),
        }
        env_file = getattr(adapter, "env_file", None)
        return child_environment(
            home=paths.scratch,
            tmp=paths.scratch,
            env_file=Path(env_file) if env_file else None,
            env=getattr(adapter, "env", None),
            agentd=agentd,
            path_first=str(Path(sys.executable).parent),  # `agentd skills run` works from an attempt
        )


def budget_brief(config: Config, task: TaskRecord, attempt: TaskAttempt, spend: Spend | None) -> BudgetBrief:
    """What the attempt may still spend (the bundle's "Your budget"): its timeout, the attempts after it, its
    own cap and what the day's caps leave (agentd/config/budget.py)."""
    budget, adapter = config.budget, config.adapters[attempt.adapter_id]
    day_left = adapter_left = None
    if spend is not None and budget.daily_usd is not None:
        day_left = budget.daily_usd - spend.total_usd
    if spend is not None and (cap := budget.adapter_daily_usd.get(attempt.adapter_id)) is not None:
        used = spend.by_adapter.get(attempt.adapter_id)
        adapter_left = cap - (used.total_usd if used else 0.0)
    return BudgetBrief(
        timeout_s=adapter.timeout_ms / 1000,
        attempts_after=max(task.max_attempts - attempt.attempt_number, 0),
        attempt_usd=budget.per_attempt_usd,
        day_left_usd=day_left,
        adapter_id=attempt.adapter_id,
        adapter_day_left_usd=adapter_left,
        estimated=spend.estimated if spend is not None else False,
    )


def workflow_step(config: Config, task: TaskRecord, workflow: WorkflowRecord) -> WorkflowStep:
    """What the bundle tells a step task about its workflow, including the signals it may give."""
    assert task.workflow_ref is not None
    definition = config.workflows.get(workflow.workflow_type)
    state = state_of(definition, task.workflow_ref.state_id) if definition else None
    return WorkflowStep(
        workflow.workflow_id,
        workflow.workflow_type,
        task.workflow_ref.state_id,
        task.workflow_iteration or workflow.iteration,
        accepted_signals(state) if state else (),
    )


def attempt_variables(
    config: Config, task: TaskRecord, attempt: TaskAttempt, workflow: WorkflowStep | None
) -> dict[str, str]:
    """The AGENTD_* values that say which attempt this is (not where it runs): what an attempt's
    process gets, and what `agentd replay` gives the re-run."""
    values = {
        "AGENTD_TASK_ID": str(task.task_id),
        "AGENTD_ATTEMPT_ID": attempt.attempt_id,  # the idempotency key an adapter can pass on
        "AGENTD_TASK_TYPE": task.task_type,
        "AGENTD_CONFIG": str(config.path),
    }
    if attempt.model:
        values["AGENTD_MODEL"] = attempt.model
    if workflow is not None:
        values.update(
            AGENTD_WORKFLOW_ID=str(workflow.workflow_id),
            AGENTD_WORKFLOW_STATE=workflow.state_id,
            AGENTD_WORKFLOW_ITERATION=str(workflow.iteration),
        )
    return values


def adapter_redactor(config: Config, adapter_id: str) -> Redactor:
    """The adapter's secrets as they are now (the boot sweep re-reads its env_file)."""
    env_file = getattr(config.adapters.get(adapter_id), "env_file", None)
    try:
        return Redactor(read_env_file(Path(env_file)).values() if env_file else ())
    except (OSError, ConfigError):
        logger.warning("cannot read %s to redact a reclaimed attempt's evidence", env_file)
        return Redactor()
