"""Bundle compilation: everything an attempt is told, in one text, hashed (docs/design.md, "Dispatch").

Pure. The constitution (pinned by hash), the profile's framing, each skill's SKILL.md and
commands, the task, what earlier attempts got wrong (seed 004 failure re-injection), recent
outcomes when the profile asks, and how to report. `context_policy.max_prompt_chars` is
enforced by cutting the least essential sections first; every cut is recorded, never silent.
"""

from __future__ import annotations

import json
from dataclasses import field

from agentd import frozen_value
from agentd.hashing import sha256_hex
from agentd.records import AgentConstitution, SubagentProfile, TaskRecord

RESULT_ENV = "AGENTD_RESULT_PATH"


@frozen_value
class SkillBrief:
    skill_id: str
    instructions: str
    commands: tuple[tuple[str, str], ...]  # (name, description)


@frozen_value
class PriorAttempt:
    attempt_number: int
    termination_reason: str
    summary: str


@frozen_value
class RecentOutcome:
    task_id: int
    task_type: str
    status: str
    summary: str


@frozen_value
class WorkflowStep:
    workflow_id: int
    workflow_type: str
    state_id: str
    iteration: int
    accepted_signals: tuple[str, ...]


@frozen_value
class BundleInput:
    agent_name: str
    constitution: AgentConstitution
    soul_text: str
    purpose_text: str
    profile: SubagentProfile
    skills: tuple[SkillBrief, ...]
    task: TaskRecord
    attempt_number: int
    prior_attempts: tuple[PriorAttempt, ...] = ()
    recent_outcomes: tuple[RecentOutcome, ...] = ()
    workflow: WorkflowStep | None = None
    required_artifacts: tuple[str, ...] = ()
    artifact_roles: tuple[str, ...] = ()  # the roles the task type allows its artifacts


@frozen_value
class Cut:
    section: str
    chars_removed: int


@frozen_value
class Bundle:
    text: str
    bundle_hash: str
    cuts: tuple[Cut, ...] = field(default=())
    over_budget_chars: int = 0  # what the never-cut sections alone exceed the budget by

    @property
    def chars(self) -> int:
        return len(self.text)


def compile_bundle(inp: BundleInput) -> Bundle:
    """The bundle text within the profile's max_prompt_chars, cutting optional parts first."""
    sections = {
        "constitution": _constitution(inp),
        "role": _role(inp.profile),
        "skills": _skills(inp.skills),
        "task": _task(inp),
        "earlier_attempts": _prior(inp.prior_attempts),
        "recent_work": _recent(inp.recent_outcomes) if inp.profile.context_policy.include_recent_memory else "",
        "reporting": _reporting(inp),
    }
    limit = inp.profile.context_policy.max_prompt_chars
    cuts = _fit(sections, limit)
    text = "\n".join(part for part in sections.values() if part)
    return Bundle(text, sha256_hex(text.encode()), tuple(cuts), max(len(text) - limit, 0))


# Cut order: what the attempt can best do without. The constitution, the role and the
# reporting instructions are never cut; the task only after everything else.
_CUT_ORDER = ("recent_work", "skills", "earlier_attempts", "task")


def _fit(sections: dict[str, str], limit: int) -> list[Cut]:
    cuts = []
    for name in _CUT_ORDER:
        excess = sum(len(s) + 1 for s in sections.values() if s) - 1 - limit
        if excess <= 0:
            break
        original = sections[name]
        if not original:
            continue
        marker = f"\n[agentd: {name} cut by context_policy.max_prompt_chars]\n"
        keep = max(len(original) - excess - len(marker), 0)
        sections[name] = original[:keep] + marker  # the reader always learns that something is missing
        cuts.append(Cut(name, len(original) - keep))
    return cuts


def _constitution(inp: BundleInput) -> str:
    c = inp.constitution
    return (
        f"# Constitution of {inp.agent_name} (version {c.version})\n"
        f"SOUL.md sha256 {c.soul_hash}; PURPOSE.md sha256 {c.purpose_hash}.\n\n"
        f"## SOUL.md\n{inp.soul_text.strip()}\n\n## PURPOSE.md\n{inp.purpose_text.strip()}\n"
    )


def _role(profile: SubagentProfile) -> str:
    parts = "".join(f"- {part}\n" for part in profile.prompt_parts)
    return f"# Role ({profile.profile_id})\n{profile.role}\n\n{parts}"


def _skills(skills: tuple[SkillBrief, ...]) -> str:
    if not skills:
        return ""
    out = ["# Skills\n"]
    for skill in skills:
        out.append(f"## {skill.skill_id}\n{skill.instructions.strip()}\n")
        for name, description in skill.commands:
            out.append(f"- `agentd skills run {skill.skill_id} {name} -- ARGS…`  {description}".rstrip() + "\n")
    return "\n".join(out)


def _task(inp: BundleInput) -> str:
    task = inp.task
    lines = [
        f"# Task {task.task_id} ({task.task_type}), attempt {inp.attempt_number} of {task.max_attempts}",
        f"Subject: {task.subject}" if task.subject else "",
        f"Description:\n{task.description}" if task.description else "",
        "Payload:\n```json\n" + json.dumps(task.payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n```",
    ]
    if inp.required_artifacts:
        lines.append("Files you must leave in the workspace: " + ", ".join(inp.required_artifacts))
    if inp.workflow is not None:
        step = inp.workflow
        lines.append(
            f"This task is step '{step.state_id}' (iteration {step.iteration}) of workflow "
            f"{step.workflow_id} ({step.workflow_type})."
        )
    return "\n".join(line for line in lines if line) + "\n"


def _prior(prior: tuple[PriorAttempt, ...]) -> str:
    if not prior:
        return ""
    lines = ["# Earlier attempts at this task failed; do not repeat their mistakes\n"]
    lines += [f"- attempt {p.attempt_number} ({p.termination_reason}): {p.summary}" for p in prior]
    return "\n".join(lines) + "\n"


def _recent(recent: tuple[RecentOutcome, ...]) -> str:
    if not recent:
        return ""
    lines = ["# Recent work of this agent\n"]
    lines += [f"- task {r.task_id} ({r.task_type}) {r.status}: {r.summary}" for r in recent]
    return "\n".join(lines) + "\n"


def _reporting(inp: BundleInput) -> str:
    signals = ""
    if inp.workflow is not None:
        accepted = ", ".join(inp.workflow.accepted_signals) or "none"
        signals = f'\n- "workflow_signal": one of {accepted} — it decides the workflow\'s next step.'
    roles = ""
    if len(inp.artifact_roles) > 1:
        roles = f'\n- "artifact_roles": {{path: role}} for each artifact, one of {", ".join(inp.artifact_roles)}'
    policy = inp.profile.result_policy
    follow_ups = "allowed" if policy.allow_follow_up_tasks else "not allowed for this profile (they are refused)"
    return (
        "# Reporting your outcome\n"
        f"When you finish, write one JSON object to the file named in ${RESULT_ENV} (or end your final "
        "message with it in a ```json fenced block). Without it the task is not completed.\n"
        '- "status": "completed" | "retryable_failure" | "permanent_failure" | "blocked"\n'
        '- "machine_status": "ok" (only with completed) | "needs_retry" | "blocked" | "failed"\n'
        '- "operator_summary": what you did, or why you could not\n'
        '- "artifact_paths": files you made, relative to the workspace; each is checked on disk\n'
        '- "file_changes": files you changed, relative to the workspace'
        f"{roles}{signals}\n"
        f'- "follow_up_tasks": task intents for later ({follow_ups})\n'
        "Completion is judged from evidence, not from what you say: a claimed file that does not "
        "exist, or a path outside the workspace, turns completed into a failure.\n"
    )
