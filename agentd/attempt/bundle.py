"""Bundle compilation: everything an attempt is told, in one text, hashed (docs/design.md, "Dispatch").

Pure. The constitution (pinned by hash), the profile's framing, each skill's SKILL.md and
commands, the task, what the attempt may still spend, what earlier attempts got wrong (seed 004 failure
re-injection: each one's summary, the gates it failed and the newest tool calls that failed), recent
outcomes when the profile asks, and how to report. `context_policy.max_prompt_chars` is
enforced by cutting the least essential sections first; every cut is recorded, never silent.
"""

from __future__ import annotations

import json
from dataclasses import field

from agentd import frozen_value
from agentd.edge import visible_cut
from agentd.hashing import sha256_hex
from agentd.records import AgentConstitution, SubagentProfile, TaskRecord

RESULT_ENV = "AGENTD_RESULT_PATH"
# What earlier attempts left is bounded (docs/design.md, "Dispatch", 2. prepare): the newest FAILED_CALLS_MAX
# failed tool calls of all of them, each its input in CALL_CHARS and its error in ERROR_CHARS; GATES_MAX gate
# failures of each attempt, each in ERROR_CHARS. At most ~10 kB besides the summaries; max_prompt_chars cuts it.
FAILED_CALLS_MAX = 10
CALL_CHARS = 200
ERROR_CHARS = 300
GATES_MAX = 5


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
    gate_failures: tuple[str, ...] = ()  # why its outcome was not believed (the completion gates)


@frozen_value
class FailedCall:
    """A tool call of an earlier attempt that failed, or that agentd's policy, a person or the harness refused."""

    attempt_number: int
    tool: str
    summary: str  # its input
    error: str


@frozen_value
class BudgetBrief:
    """What this attempt may still spend: its time, its money, and the day's (None: no cap)."""

    timeout_s: float
    attempts_after: int  # attempts the task has left after this one
    attempt_usd: float | None = None  # [budget] per_attempt_usd
    day_left_usd: float | None = None  # [budget] daily_usd less the day's spend so far
    adapter_id: str = ""
    adapter_day_left_usd: float | None = None  # [budget] adapter_daily_usd[adapter] less its spend today
    estimated: bool = False  # some of the day's spend is agentd's estimate


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
    failed_calls: tuple[FailedCall, ...] = ()  # newest first
    budget: BudgetBrief | None = None
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
        "budget": _budget(inp.budget),
        "earlier_attempts": _prior(inp.prior_attempts, inp.failed_calls),
        "recent_work": _recent(inp.recent_outcomes) if inp.profile.context_policy.include_recent_memory else "",
        "reporting": _reporting(inp),
    }
    limit = inp.profile.context_policy.max_prompt_chars
    cuts = _fit(sections, limit)
    text = "\n".join(part for part in sections.values() if part)
    return Bundle(text, sha256_hex(text.encode()), tuple(cuts), max(len(text) - limit, 0))


# Cut order: what the attempt can best do without. The constitution, the role, the budget (a few lines) and
# the reporting instructions are never cut; the task only after everything else.
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


def _prior(prior: tuple[PriorAttempt, ...], calls: tuple[FailedCall, ...]) -> str:
    if not prior and not calls:
        return ""
    lines = ["# Earlier attempts at this task failed; do not repeat their mistakes\n"]
    for p in prior:
        lines.append(f"- attempt {p.attempt_number} ({p.termination_reason}): {p.summary}")
        lines += [f"  - failed the gate: {visible_cut(gate, ERROR_CHARS)}" for gate in p.gate_failures[:GATES_MAX]]
        if len(p.gate_failures) > GATES_MAX:
            lines.append(f"  - and {len(p.gate_failures) - GATES_MAX} more gate failure(s)")
    if calls:
        shown = calls[:FAILED_CALLS_MAX]
        lines.append(f"\nTool calls that failed or were refused (the newest {len(shown)}, newest first):")
        lines += [
            f"- attempt {c.attempt_number}: {visible_cut(c.tool, 100)} {visible_cut(c.summary, CALL_CHARS)}"
            f" -> {visible_cut(c.error, ERROR_CHARS)}"
            for c in shown
        ]
    return "\n".join(lines) + "\n"


def _budget(budget: BudgetBrief | None) -> str:
    """What the attempt may still spend, so it can plan within it (seed audit T26)."""
    if budget is None:
        return ""
    after = f"{budget.attempts_after} more attempt(s) after this one" if budget.attempts_after else "this is the last"
    lines = [
        "# Your budget",
        f"- time: this attempt is stopped after {budget.timeout_s:g}s; {after}",
        f"- this attempt: at most ${budget.attempt_usd:.2f}" if budget.attempt_usd is not None else "",
    ]
    about = "~" if budget.estimated else ""
    if budget.day_left_usd is not None:
        lines.append(f"- today (UTC): {about}${max(budget.day_left_usd, 0):.2f} left of the agent's daily budget")
    if budget.adapter_day_left_usd is not None:
        left = max(budget.adapter_day_left_usd, 0)
        lines.append(f"- today (UTC): {about}${left:.2f} left of adapter {budget.adapter_id}'s daily budget")
    if budget.attempt_usd is None and budget.day_left_usd is None and budget.adapter_day_left_usd is None:
        lines.append("- money: no cap is set")
    return "\n".join(line for line in lines if line) + "\n"


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
