"""TaskIntent → the task to insert: the one admission every producer of work goes through.

Pure: the CLI, sensors, schedules, workflows and follow-up tasks all call `admit_task`, so a
task is accepted or refused by the same rules whoever proposes it (seed 000 §6, §13).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from agentd.errors import InputError
from agentd.records import EvidenceRequirements, NewTask, TaskIntent, TaskRecord
from agentd.schema_check import SchemaCheck

if TYPE_CHECKING:
    from agentd.config import Config
    from agentd.config.sensors import SensorManifest

DEFAULT_PRIORITY = 5


def admit_task(
    intent: TaskIntent,
    config: Config,
    now: datetime,
    *,
    trusted: bool,
    schedule_id: str | None = None,
    require_approval: bool = False,
    source: str | None = None,
) -> NewTask:
    """Validate an intent against the config; raise InputError naming every problem.

    `trusted` callers (the operator CLI, the runtime's own workflow engine) may give an
    absolute available_at and a workflow_ref; sensors and model output may not. `source`, if
    given, replaces the intent's (a sensor names itself and the event's dedupe_key).
    """
    problems: list[str] = []
    spec = config.task_types.get(intent.task_type)
    if spec is None:
        known = ", ".join(sorted(config.task_types))
        raise InputError(f"task_type: unknown task type {intent.task_type!r}; registered: {known}")
    problems += _payload_problems(spec.payload_schema_id, config.payload_schemas[spec.payload_schema_id], intent)
    profile_id = intent.requested_profile_id or spec.default_profile_id or config.dispatch.default_profile_id
    if intent.requested_profile_id is not None and intent.requested_profile_id not in config.profiles:
        problems.append(_unknown("requested_profile_id", "profile", intent.requested_profile_id, config.profiles))
    if intent.requested_adapter_id is not None and intent.requested_adapter_id not in config.adapters:
        problems.append(_unknown("requested_adapter_id", "adapter", intent.requested_adapter_id, config.adapters))
    if intent.requested_model is not None and intent.requested_model not in known_models(config):
        problems.append(_unknown("requested_model", "model", intent.requested_model, known_models(config)))
    skill_ids = tuple(intent.skill_ids or ())
    problems += _skill_problems(skill_ids, spec.allowed_skill_ids, config)
    problems += _evidence_problems(intent.evidence_requirements)
    if not trusted and intent.available_at is not None:
        problems.append(
            "available_at: only the operator CLI (--at) may set an absolute time; use schedule.delay_minutes"
        )
    if not trusted and intent.workflow_ref is not None:
        problems.append("workflow_ref: only the workflow engine creates workflow tasks; propose a workflow instead")
    if intent.available_at is not None and intent.schedule is not None:
        problems.append("available_at and schedule.delay_minutes: give one, not both")
    if problems:
        raise InputError("; ".join(problems))
    assert profile_id is not None  # config check guarantees every task type resolves a profile
    return _new_task(
        task_type=intent.task_type,
        source=intent.source if source is None else source,
        subject=intent.subject,
        description=intent.description,
        priority=intent.priority if intent.priority is not None else DEFAULT_PRIORITY,
        payload=intent.payload,
        requested_profile_id=profile_id,
        requested_adapter_id=intent.requested_adapter_id,
        requested_model=intent.requested_model,
        skill_ids=skill_ids,
        evidence_requirements=intent.evidence_requirements,
        workflow_ref=intent.workflow_ref,
        max_attempts=spec.max_attempts or config.dispatch.default_max_attempts,
        available_at=_available_at(intent, now),
        schedule_id=schedule_id,
        approval_reason=(
            f"task type {intent.task_type} requires approval"
            if spec.requires_approval
            else "its submitter asked for approval"
            if require_approval
            else None
        ),
    )


# NewTask's fields that have a default, and those defaults (none is a default_factory: tests/test_fast_paths.py).
_NEW_TASK_DEFAULTS = {f.name: f.default for f in dataclasses.fields(NewTask) if f.default is not dataclasses.MISSING}


def _new_task(**values: Any) -> NewTask:
    """NewTask(**values), equal in every field, without the frozen dataclass's __init__ (one
    object.__setattr__ per field: two thirds of admitting a sensor's proposed task). Hazard: nothing
    here checks the names; admit_task passes every field without a default, by name, and the test
    that holds this to NewTask(**values) fails if a field is added or renamed."""
    task = object.__new__(NewTask)
    task.__dict__.update(_NEW_TASK_DEFAULTS, **values)
    return task


def _payload_problems(schema_id: str, schema: dict[str, Any], intent: TaskIntent) -> list[str]:
    """The payload against its schema: the compiled fast yes first, jsonschema to name what is wrong."""
    problems = []
    named, more = _check(schema_id, schema).named(intent.payload, key=str)
    for error, message in named:
        where = "payload" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        problems.append(f"{where}: {message} (schema {schema_id})")
    if more:
        problems.append(f"payload: {more:,} more problem(s) against schema {schema_id}")
    return problems


_CHECKS: dict[tuple[str, int], SchemaCheck] = {}


def _check(schema_id: str, schema: dict[str, Any]) -> SchemaCheck:
    """Per schema, compiled once (building one costs more than validating a payload)."""
    key = (schema_id, id(schema))
    if key not in _CHECKS:
        _CHECKS[key] = SchemaCheck(schema)
    return _CHECKS[key]


def known_models(config: Config) -> set[str]:
    """Every model name the config declares; a task may request only one of these."""
    models: set[str] = set()
    for adapter in config.adapters.values():
        model: str | None = getattr(adapter, "model", None)  # script adapters have none
        if model:
            models.add(model)
        models.update(getattr(adapter, "prices", None) or {})
    models.update(p.default_model for p in config.profiles.values() if p.default_model)
    models.update(t.default_model for t in config.task_types.values() if t.default_model)
    return models


def _available_at(intent: TaskIntent, now: datetime) -> datetime:
    if intent.available_at is not None:
        return intent.available_at
    if intent.schedule is not None:
        try:
            return now + timedelta(minutes=intent.schedule.delay_minutes)
        except OverflowError:
            raise InputError("schedule.delay_minutes: the task would fall due after the year 9999") from None
    return now


def _skill_problems(skill_ids: tuple[str, ...], allowed: list[str] | None, config: Config) -> list[str]:
    problems = []
    for skill_id in skill_ids:
        if skill_id not in config.skills:
            problems.append(_unknown("skill_ids", "skill", skill_id, config.skills))
        elif allowed is not None and skill_id not in allowed:
            problems.append(
                f"skill_ids: {skill_id!r} is not allowed for this task type (allowed: {', '.join(allowed)})"
            )
    return problems


def _evidence_problems(requirements: EvidenceRequirements | None) -> list[str]:
    problems = []
    for path in (requirements.required_artifacts or ()) if requirements else ():
        pure = PurePosixPath(path)
        if pure.is_absolute() or ".." in pure.parts:
            problems.append(f"evidence_requirements.required_artifacts: {path!r} must stay inside the workspace")
    return problems


def _unknown(key: str, noun: str, found: str, known: object) -> str:
    names = ", ".join(sorted(known)) or "none declared"  # type: ignore[call-overload]
    return f"{key}: unknown {noun} {found!r}; known: {names}"


def delegation_caps(config: Config, task: TaskRecord | NewTask) -> dict[str, int]:
    """How deep and how wide the task's outcome may delegate (seed 004): the stricter of what it
    inherited from the task that asked for it and what its own profile allows."""
    profile = config.profiles.get(task.requested_profile_id)
    own = (
        {
            "max_depth": profile.result_policy.max_follow_up_depth,
            "max_per_outcome": profile.result_policy.max_follow_ups_per_outcome,
        }
        if profile
        else {"max_depth": 0, "max_per_outcome": 0}
    )
    inherited = task.delegation_caps or {}
    return {key: min(value, inherited.get(key, value)) for key, value in own.items()}


def effective_adapter(config: Config, task: TaskRecord | NewTask) -> str | None:
    """The adapter a task runs on: requested, else its task type's, else its profile's."""
    spec = config.task_types.get(task.task_type)
    profile = config.profiles.get(task.requested_profile_id)
    return (
        task.requested_adapter_id
        or (spec.default_adapter_id if spec else None)
        or (profile.default_adapter_id if profile else None)
    )


def beyond_defaults(config: Config, manifest: SensorManifest, intent: TaskIntent) -> str | None:
    """Why a sensor's proposed task names what its sensor.toml does not let it (a profile, adapter or model
    other than its task type's defaults), or None. A sensor turns outside data into tasks, so, as a
    follow-up is held to its parent's, it is held to its task type's defaults unless listed."""
    spec = config.task_types.get(intent.task_type)
    defaults = {
        "profile": spec.default_profile_id if spec else None,
        "adapter": spec.default_adapter_id if spec else None,
        "model": None,
    }
    asked = {
        "profile": (intent.requested_profile_id, manifest.may_request_profiles),
        "adapter": (intent.requested_adapter_id, manifest.may_request_adapters),
        "model": (intent.requested_model, manifest.may_request_models),
    }
    for noun, (named, allowed) in asked.items():
        if named is not None and named != defaults[noun] and named not in allowed:
            listed = ", ".join(allowed) or "none"
            return (
                f"requested_{noun if noun == 'model' else noun + '_id'} {named!r}: this sensor may name only its "
                f"task type's default {noun} or one its sensor.toml lists in may_request_{noun}s (listed: {listed})"
            )
    return None


def widening(config: Config, parent: TaskRecord, intent: TaskIntent) -> str | None:
    """Why a follow-up's intent would widen what its parent had (a profile or adapter other than the
    parent's), or None: a follow-up may name its parent's own or none (seed 004 bounded delegation)."""
    if intent.requested_profile_id is not None and intent.requested_profile_id != parent.requested_profile_id:
        return (
            f"requested_profile_id {intent.requested_profile_id!r}: a follow-up may not choose a profile other "
            f"than its parent's ({parent.requested_profile_id!r})"
        )
    adapter = effective_adapter(config, parent)
    if intent.requested_adapter_id is not None and intent.requested_adapter_id != adapter:
        return (
            f"requested_adapter_id {intent.requested_adapter_id!r}: a follow-up may not choose an adapter other "
            f"than its parent's ({adapter!r})"
        )
    return None
