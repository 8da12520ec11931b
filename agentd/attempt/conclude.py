"""How an attempt ends, whichever way it ends: a live attempt (`conclude`), one the boot sweep found
after the runtime died (`sweep_end`), and one agentd itself failed (`internal_failure_end`).

Each `gather`s the facts — what the attempt left, redacted before anything reads it; its result;
what the workspace holds at every path the outcome names — has them judged (agentd/attempt/judge.py, pure)
and `finish`es: the manifest sealed (complete on every path), the run dir removed, the commit built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from errno import EPERM
from pathlib import Path, PurePosixPath
from stat import S_ISREG
from typing import Any

from agentd.adapters import AdapterRun
from agentd.adapters.codex import thread_id
from agentd.attempt.judge import AttemptFacts, ProposalFact, Stopped, extracted_of, judge
from agentd.attempt.manifest import manifest_fields
from agentd.attempt.meter import thread_spent
from agentd.attempt.outcome import FileFact, paths_to_check
from agentd.attempt.policy import AttemptPolicy, Ending
from agentd.attempt.prepare import Prepared
from agentd.attempt.session import keep_or_drop
from agentd.clock import format_ts
from agentd.edge import MAX_RESULT_BYTES, resolves_inside, scrub, scrub_value
from agentd.evidence import AttemptPaths, attempt_paths, seal, trace_summary, verify_attempt_dir
from agentd.evidence.action_trace import Step, capped, decision_steps, trace_lines, trace_of
from agentd.hashing import sha256_file, sha256_hex
from agentd.process.files import Refused as UntrustedPath
from agentd.process.files import lstat_beneath, read_beneath, read_reported, remove_tree, sha256_at_most, write_new
from agentd.process.privilege import RunUser
from agentd.records import (
    ArtifactRow,
    AttemptEnd,
    TaskAttempt,
    TaskOutcome,
    TaskRecord,
)
from agentd.redaction import Redactor


def conclude(ending: Ending, prepared: Prepared, run: AdapterRun | None, stopped: str | None) -> AttemptEnd:
    """A live attempt's end: its run redacted before anything reads it, then judged and sealed."""
    paths, redactor = prepared.ctx.paths, prepared.redactor
    run = sanitized_run(run, redactor)
    if run is not None and run.final_message:  # none, or empty: no file (one file is ~0.5 ms on a VM's disk)
        write_new(paths.last_message, run.final_message)
    process = run.process if run else None
    facts = gather(
        ending.policy,
        prepared.task,
        prepared.attempt,
        paths,
        redactor,
        run=run,
        stopped=stopped if stopped in ("interrupted", "operator_canceled") else None,  # type: ignore[arg-type]
        started=run is not None,
        stdout_bytes=process.stdout.bytes_seen if process else None,
    )
    return finish(ending, facts, bundle_hash=prepared.bundle.bundle_hash)


def sweep_end(
    ending: Ending, task: TaskRecord, attempt: TaskAttempt, survivors: list[int], redactor: Redactor
) -> AttemptEnd:
    """An attempt a dead runtime left open. If its processes were gone and it left a result, that is
    judged through the same gates as a live attempt (exit unknown); otherwise the runtime crashed
    under it: re-queued without spending an attempt, unless it keeps happening (crash_limit)."""
    policy = ending.policy
    paths = (
        AttemptPaths(Path(attempt.evidence_dir), policy.runs / attempt.attempt_id)
        if attempt.evidence_dir
        else attempt_paths(policy.state_dir, task.task_id, attempt.attempt_id, policy.runs)
    )
    facts = gather(
        policy,
        task,
        attempt,
        paths,
        redactor,
        swept=True,
        read_result=not survivors,  # a result beside live processes may be half-written: not judged
        started=attempt.pid is not None,
        notes={"killed_pids": survivors},
    )
    facts = replace(facts, notes={**facts.notes, "judged": facts.result_text is not None})
    return finish(ending, facts, bundle_hash=attempt.bundle_hash)


def internal_failure_end(
    ending: Ending,
    task: TaskRecord,
    attempt: TaskAttempt,
    exc: BaseException,
    *,
    stage: str,
    started: bool,
    redactor: Redactor,
) -> AttemptEnd:
    """agentd itself failed (a bug, or a value nothing could store): a recorded failure naming the
    exception, with nothing from the attempt's own outcome (that is what may have been poison)."""
    policy = ending.policy
    reason = redactor.text(scrub(f"agentd failed {stage}: {failure_text(exc)}"))[:2000]
    facts = AttemptFacts(
        task=task,
        attempt=attempt,
        checks=policy.checks,
        timeout_s=policy.timeout_s,
        internal_error=reason,
        started=started,
        outbox_policy=policy.outbox,
        redactions=redactor.count,
    )
    return finish(ending, facts, bundle_hash=attempt.bundle_hash, best_effort=True)


def failure_text(exc: BaseException) -> str:
    """`Type: message` of what failed. A group (a task group wraps what its task raised) is the
    exceptions inside it, never only `ExceptionGroup: unhandled errors in a TaskGroup`."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(failure_text(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def gather(
    policy: AttemptPolicy,
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
    """Everything the judge needs, from the evidence dir and the workspace: what the attempt reported
    copied into the evidence (never through a link), then redacted, then read."""
    reporter = policy.user.uid if policy.user is not None else None  # whose the files it reports must be
    copied_problem = copy_reported_result(paths, reporter) if read_result else None
    redact_evidence(paths, redactor)
    result_text, result_problem = read_result_file(paths) if read_result else (None, None)
    result_problem = result_problem or copied_problem
    checks = policy.checks
    facts = AttemptFacts(
        task=task,
        attempt=attempt,
        checks=checks,
        timeout_s=policy.timeout_s,
        credential=policy.credential,
        run=run,
        stopped=stopped,
        result_text=result_text,
        result_problem=result_problem,
        stdout_bytes=_size(paths.stdout) if stdout_bytes is None else stdout_bytes,
        swept=swept,
        started=started,
        outbox_policy=policy.outbox,
        notes=dict(notes or {}),
        redactions=redactor.count,
    )
    extracted = extracted_of(facts)
    budget = HashBudget(
        policy.max_artifact_bytes,
        "what agentd reads to hash one attempt's files, in all ([dispatch] max_artifact_bytes)",
    )
    files = {p: file_fact(p, policy.workspace, budget, reporter) for p in paths_to_check(extracted.outcome, checks)}
    audit = None
    if checks.require_adapter_audit and paths.stdout.is_file():
        relative = str(paths.stdout.relative_to(policy.state_dir))
        audit = ArtifactRow("adapter-audit", relative, sha256_file(paths.stdout), "text/plain")
    evidence = {n: str(getattr(paths, n)) if getattr(paths, n).exists() else None for n in EVIDENCE_PATHS}
    proposal = proposal_fact(extracted.outcome, policy, redactor)  # its redactions counted below
    return replace(
        facts,
        extracted=extracted,
        files=files,
        audit=audit,
        evidence=evidence,
        proposal=proposal,
        redactions=redactor.count,
    )


EVIDENCE_PATHS = ("stdout", "stderr", "result", "last_message")


def finish(ending: Ending, facts: AttemptFacts, *, bundle_hash: str | None, best_effort: bool = False) -> AttemptEnd:
    """Judge, seal the manifest (complete on every path), drop the run dir, and say what to commit."""
    policy, now = ending.policy, ending.clock.now()
    end = judge(facts, now=now, policy=policy.retry, rng=ending.rng)
    paths = attempt_paths(policy.state_dir, facts.task.task_id, facts.attempt.attempt_id, policy.runs)
    steps, dropped = capped(action_steps(facts, end, paths))  # before the run dir goes: a harness may log there
    trace = {"action_trace": trace_summary(steps, dropped)}
    sealed, problem = seal(
        paths,
        {**manifest_fields(policy.described, facts, end, bundle_hash), **trace},
        trace=trace_lines(steps),
        best_effort=best_effort,
    )
    if sealed and end.status == "completed" and policy.strict_evidence:
        problems = verify_attempt_dir(paths.root)
        if problems:  # judged again as a failure, and sealed again to say so
            end = judge(replace(facts, evidence_problems=tuple(problems)), now=now, policy=policy.retry, rng=ending.rng)
            sealed, problem = seal(
                paths,
                {**manifest_fields(policy.described, facts, end, bundle_hash), **trace},
                trace=trace_lines(steps),
                best_effort=best_effort,
            )
    session = keep_session(facts, end, paths, policy.user)  # before the run dir goes: it may be in it
    remove_tree(paths.run, policy.user)  # HOME and what the attempt wrote: not evidence, and may hold keys
    diagnostics = {
        **end.diagnostics,
        **({"harness_session": session} if session else {}),
        "artifact_hash": sealed.artifact_hash if sealed else None,
        "manifest_sha256": sealed.manifest_sha256 if sealed else None,
    }
    if problem:
        diagnostics["manifest_problem"] = problem
    if dropped:
        diagnostics["action_trace_steps_dropped"] = dropped
    return replace(end, diagnostics=diagnostics)


def keep_session(
    facts: AttemptFacts, end: AttemptEnd, paths: AttemptPaths, user: RunUser | None
) -> dict[str, Any] | None:
    """The harness session is kept for the next attempt when this one was interrupted (a service stop, the
    runtime died under it, or the provider's rate limit: docs/gateway.md) and the task runs again; otherwise it
    goes (docs/reliability.md, "Resume, not restart"). What was done, for the diagnostics."""
    cut_short = facts.stopped == "interrupted" or end.crashed or end.rate_limited
    interrupted = end.status == "retryable_failure" and cut_short
    attempt = facts.attempt
    codex = interrupted and attempt.adapter_kind == "codex"  # its counts are the thread's: where they stood
    thread = thread_id(paths.stdout) if codex else None  # the thread codex named in its own stream
    spent = thread_spent(paths.scratch / "codex", thread, user.uid if user else None) if codex else None
    return keep_or_drop(
        paths,
        attempt.task_id,
        attempt.adapter_kind,
        attempt.attempt_id,
        interrupted=interrupted,
        user=user,
        spent=spent,
    )


def action_steps(facts: AttemptFacts, end: AttemptEnd, paths: AttemptPaths) -> list[Step]:
    """The ordered steps the attempt took, from what its adapter printed (agentd/evidence/action_trace.py)."""
    if not facts.started:
        return []  # it never ran: there is nothing to trace
    process = facts.run.process if facts.run else None
    steps = trace_of(
        facts.attempt.adapter_kind,
        paths.root,
        exit_code=process.exit_code if process else None,
        started_at=format_ts(facts.attempt.started_at),
        ended_at=format_ts(end.ended_at),
    )
    decided = facts.run.diagnostics.get("tool_calls") if facts.run else None
    return steps + decision_steps(decided or [], first=len(steps) + 1)


class HashBudget:
    """What agentd may still read to hash the files one attempt's outcome names (`[dispatch]
    max_artifact_bytes` in all). Their sizes are the attempt's to choose (a sparse file of a terabyte is
    one `truncate` away), and hashing holds the database's thread."""

    def __init__(self, limit: int, what: str) -> None:
        self.limit = self.left = limit
        self.what = what


def file_fact(relative: str, workspace: Path, budget: HashBudget, owner: int | None = None) -> FileFact:
    """What the workspace holds at a path an outcome names; refused if it is not inside it (absolute,
    `..`, a link leading out), is reached through a link at all (the attempt's user can swap any path in
    its workspace, so agentd reads there only without following links: agentd/process/files.py) or, with
    `owner` (the run user's uid), is not the attempt's own. A regular file is hashed within `budget`;
    one past it is refused, unread."""
    pure = PurePosixPath(relative)
    if pure.is_absolute() or ".." in pure.parts or not relative.strip():
        return FileFact(relative, f"path {relative!r} is outside the workspace")
    if not resolves_inside(workspace, pure):
        return FileFact(relative, f"path {relative!r} leads outside the workspace")
    try:
        info = lstat_beneath(workspace, pure, owner)
        hashed = S_ISREG(info.st_mode) and info.st_size <= budget.left  # its size first: a large one is never read
        digest, read = sha256_at_most(workspace, pure, budget.left, owner) if hashed else (None, 0)
    except UntrustedPath as exc:
        why = "an artifact is a file its attempt made" if exc.errno == EPERM else "agentd follows no workspace link"
        return FileFact(relative, f"path {relative!r}: {exc.strerror}; {why}")
    except OSError:
        return FileFact(relative)
    budget.left = max(budget.left - read, 0)
    if S_ISREG(info.st_mode) and digest is None:
        return FileFact(
            relative,
            f"path {relative!r}: {info.st_size:,} bytes, past {budget.what} ({budget.limit:,} bytes)",
        )
    return FileFact(relative, None, True, S_ISREG(info.st_mode), info.st_mtime, digest)


MAX_PROPOSAL_BYTES = 64 * 1024


def proposal_fact(outcome: TaskOutcome | None, policy: AttemptPolicy, redactor: Redactor) -> ProposalFact | None:
    """The text an outcome's constitution_proposal names (seed 000 §1b): a regular file inside the
    workspace (checked as an artifact's path is), at most MAX_PROPOSAL_BYTES of UTF-8; redacted like
    all text judging sees. Reading it is all agentd does with it here: only the operator applies one."""
    proposed = outcome.constitution_proposal if outcome else None
    if proposed is None:
        return None
    constitution = policy.constitution
    base = constitution.soul_hash if proposed.document == "soul" else constitution.purpose_hash
    fact = ProposalFact(proposed.document, proposed.path, proposed.reason, base)
    text, problem = _proposal_text(proposed.path, policy.workspace)
    if problem is not None:
        return replace(fact, problem=problem)
    text = redactor.text(text)
    return replace(fact, text=text, sha256=sha256_hex(text.encode()))


def _proposal_text(relative: str, workspace: Path) -> tuple[str, str | None]:
    found = file_fact(relative, workspace, HashBudget(MAX_PROPOSAL_BYTES, "what a proposal may hold"))
    if found.problem:
        return "", found.problem
    if not found.is_file:
        return "", f"{relative!r} is not a file in the workspace"
    try:  # no link followed on the way: a link swapped in since the check above is refused
        data = read_beneath(workspace, relative, MAX_PROPOSAL_BYTES).data
    except OSError as exc:
        return "", f"cannot read {relative!r} ({exc.strerror})"
    if len(data) > MAX_PROPOSAL_BYTES:
        return "", f"{relative!r} is larger than {MAX_PROPOSAL_BYTES} bytes"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "", f"{relative!r} is not UTF-8 text"
    if not text.strip() or "\x00" in text:
        return "", f"{relative!r} is {'empty' if not text.strip() else 'not text (it holds a NUL character)'}"
    return text, None


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
        denials=tuple(d.cleaned(lambda text: redactor.text(scrub(text))) for d in run.denials),
    )


def redact_evidence(paths: AttemptPaths, redactor: Redactor) -> int:
    """Every file the attempt left in its evidence dir (not the inputs agentd wrote)."""
    if not redactor or not paths.root.is_dir():
        return 0
    return redactor.files(p for p in sorted(paths.root.iterdir()) if p.is_file() and p.name not in INPUT_FILES)


# Evidence files that are inputs agentd wrote (the bundle, the payload, the seal): never rewritten.
INPUT_FILES = ("prompt.md", "stdin.json", "manifest.json")


def copy_reported_result(paths: AttemptPaths, owner: int | None = None) -> str | None:
    """The result file the attempt wrote in its run dir, sealed into its evidence dir (which the attempt
    cannot reach): read without following a link, at most MAX_RESULT_BYTES, only if it is `owner`'s (the
    run user's). None, or why not."""
    data, problem = read_reported(paths.reported_result, MAX_RESULT_BYTES, owner)
    if data is not None:
        write_new(paths.result, data.decode("utf-8", errors="replace"))
    return problem


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


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
