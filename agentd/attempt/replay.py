"""`agentd replay`: a finished script attempt re-run from its sealed evidence in a scratch dir and
compared with what it left (docs/design.md, "Evidence", seed 001 §4.2): `identical`, every difference named, or
`not_replayable` with the reason. Never a silent pass.

The replay gets the attempt's own stdin.json, a copy of its prompt.md as the bundle, an empty scratch
workspace, the AGENTD_* values the attempt had, and its adapter's env and env_file as configured now
(secrets are never kept in evidence). Its outputs are redacted by the same env_file values and its
scratch paths read as the attempt's own before they are compared. Nothing is written to the state dir.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any, Literal

from agentd import frozen_value
from agentd.adapters.base import exit_status_of, output_tail_bytes
from agentd.attempt.prepare import attempt_variables, workflow_step
from agentd.clock import format_ts
from agentd.config import Config
from agentd.edge import printable
from agentd.errors import InputError, NotFound
from agentd.evidence import MANIFEST, AttemptPaths, attempt_paths, make_attempt_dir
from agentd.evidence.tracecore import SPEC_VERSION
from agentd.evidence.verify import checked_attempt
from agentd.hashing import sha256_file
from agentd.process import procs
from agentd.process.containment import RunGroup, namespace_for
from agentd.process.environment import child_environment, resolve_command
from agentd.process.files import make_run_dir, read_whole_beneath, remove_tree, write_shared
from agentd.process.output import ProcessResult
from agentd.process.privilege import RunUser, require_switch, run_user
from agentd.process.runner import ProcessSpec, run_process
from agentd.records import ScriptAdapterConfig, TaskAttempt
from agentd.redaction import Redactor
from agentd.store import Store

Verdict = Literal["identical", "different", "not_replayable"]
EXCERPT_CHARS = 200
MAX_FIELD_DIFFERENCES = 50  # of result.json; the rest are counted in a note
_ABSENT = object()  # a JSON key or list item one side does not have


@frozen_value
class Difference:
    """One way the replay differs from the attempt: what (a file, a JSON path, the exit status, the
    command), where (a path, `path:line`), and the two sides; None is "absent"."""

    what: str
    where: str
    expected: str | None = None
    found: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"what": self.what, "where": self.where, "expected": self.expected, "found": self.found}


@dataclass
class Replay:
    verdict: Verdict
    attempt_id: str
    reason: str | None = None  # why it is not replayable
    differences: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # TraceCore's classification when the run itself did not do the same again (seed 001 §4.6: detectable
    # nondeterminism is failure_type=non_deterministic); None when identical, or when the evidence (not the
    # run) differs and nothing ran (docs/determinism.md)
    finding: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "attempt_id": self.attempt_id,
            "reason": self.reason,
            "differences": [d.as_dict() for d in self.differences],
            "notes": list(self.notes),
            "finding": self.finding,
        }


def non_deterministic(attempt_id: str, differences: list[Difference]) -> dict[str, Any] | None:
    """The finding a replay that ran and differed writes: TraceCore's failure_type for it."""
    if not differences:
        return None
    return {
        "failure_type": "non_deterministic",
        "spec_version": SPEC_VERSION,
        "attempt_id": attempt_id,
        "differences": len(differences),
    }


@frozen_value
class ReplayPlan:
    """Everything a replay runs on, read from the store, the config and the evidence beforehand."""

    attempt: TaskAttempt
    root: Path  # the evidence as this state dir holds it (perhaps a read-only copy)
    original_root: Path  # its evidence dir when it ran: the paths its command saw
    original_run: Path  # its run dir (HOME, TMPDIR, the result file it wrote) when it ran
    workspace: Path  # the workspace it ran in (today's config)
    manifest: dict[str, Any]
    adapter: ScriptAdapterConfig  # env and env_file as configured now
    argv: list[str]
    variables: dict[str, str]  # the attempt's AGENTD_* values that name no path of the run
    timeout_s: float
    kill_grace_s: float
    output_cap_bytes: int
    user: RunUser | None  # who the attempt ran as ([dispatch] run_as): the replay runs as that user too
    notes: tuple[str, ...] = ()

    @property
    def command_sha256(self) -> str | None:
        recorded = adapter_fields(self.manifest).get("command_sha256")
        return recorded if isinstance(recorded, str) else None


@frozen_value
class ReplayScratch:
    """The replay's own dirs, laid out as the attempt's: an evidence dir, a workspace, a state dir."""

    root: Path

    @property
    def paths(self) -> AttemptPaths:
        return AttemptPaths(self.root / "attempt", self.root / "run")

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"  # an agentd the command calls writes here, never to the real one

    def make(self, user: RunUser | None) -> None:
        """The dirs, each one `user` may use as the attempt's own were (the root only to pass through)."""
        make_run_dir(self.root, user, mode=0o750)
        make_attempt_dir(self.paths, user)
        for folder in (self.workspace, self.state_dir):
            make_run_dir(folder, user)

    def remove(self, user: RunUser | None) -> None:
        """All of it, whatever the command left (`remove_tree`: as `user` what this process cannot)."""
        remove_tree(self.root, user)


def plan_replay(config: Config, store: Store, attempt_id: str) -> ReplayPlan | Replay:
    """The plan for re-running an attempt, or the verdict when nothing may run (anything `evidence
    verify` finds in its evidence, or it is not a script attempt). Raises InputError for an unknown
    attempt, one still running, or one whose evidence is gone."""
    attempt, root = find_attempt(config, store, attempt_id)
    sealed = store.sealed_manifests(attempt_id).get(attempt_id)
    manifest, findings = checked_attempt(config.paths.state_dir, attempt, sealed)  # the check verify makes
    if manifest is None or findings:
        return Replay("different", attempt_id, differences=[Difference(f.what, f.where) for f in findings])
    refusal = not_replayable_reason(config, manifest, attempt, root)
    if refusal is not None:
        return Replay("not_replayable", attempt_id, reason=refusal)
    adapter = config.adapters[attempt.adapter_id]
    assert isinstance(adapter, ScriptAdapterConfig)  # not_replayable_reason said so
    argv, notes = replay_argv(manifest, adapter)
    if adapter.working_dir:
        notes.append(f"ran in an empty scratch workspace, not the adapter's working_dir {adapter.working_dir}")
    budgets = manifest.get("budgets") or {}
    original_root = Path(attempt.evidence_dir) if attempt.evidence_dir else root
    runs = config.paths.run_dir or original_root.parents[2] / "runs"  # <state_dir>/attempts/<task>/<attempt>
    return ReplayPlan(
        attempt=attempt,
        root=root,
        original_root=original_root,
        original_run=runs / attempt_id,
        workspace=config.paths.workspace,
        manifest=manifest,
        adapter=adapter,
        argv=argv,
        variables=identity_variables(config, store, attempt),
        timeout_s=_number(budgets.get("timeout_s"), adapter.timeout_ms / 1000),
        kill_grace_s=_number(budgets.get("kill_grace_s"), config.dispatch.kill_grace_s),
        output_cap_bytes=int(_number(budgets.get("output_cap_bytes"), config.dispatch.output_cap_bytes)),
        user=run_user(config.dispatch.run_as),
        notes=tuple(notes),
    )


def find_attempt(config: Config, store: Store, attempt_id: str) -> tuple[TaskAttempt, Path]:
    """The ended attempt and its evidence dir in this state dir; InputError naming what is missing."""
    attempt = store.get_attempt(attempt_id)
    if attempt is None:
        raise NotFound(f"no attempt {attempt_id!r} in {config.db_path}; `agentd task show ID` lists a task's attempts")
    root = attempt_paths(config.paths.state_dir, attempt.task_id, attempt_id).root
    if attempt.ended_at is None:
        raise InputError(f"attempt {attempt_id} (task {attempt.task_id}) is still running; replay it once it has ended")
    if attempt.evidence_pruned_at is not None:
        pruned = format_ts(attempt.evidence_pruned_at)
        raise InputError(f"attempt {attempt_id}'s evidence at {root} was pruned at {pruned} (retention)")
    if not os.path.lexists(root):  # a link or anything else there is a finding of the check, not bad input
        raise InputError(f"attempt {attempt_id} has no evidence dir at {root}")
    return attempt, root


def not_replayable_reason(config: Config, manifest: dict[str, Any], attempt: TaskAttempt, root: Path) -> str | None:
    kind = adapter_fields(manifest).get("kind", attempt.adapter_kind)
    if kind != "script":
        return f"{kind} attempts call a model; a second call is not expected to reproduce the first"
    adapter = config.adapters.get(attempt.adapter_id)
    if not isinstance(adapter, ScriptAdapterConfig):
        return f"adapter {attempt.adapter_id!r} is no longer a configured script adapter: its env cannot be rebuilt"
    if not (root / "stdin.json").exists():  # checked a regular file (or absent) before this
        return "the attempt never started its command (its evidence holds no stdin.json)"
    return None


def replay_argv(manifest: dict[str, Any], adapter: ScriptAdapterConfig) -> tuple[list[str], list[str]]:
    """The argv the attempt ran (recorded in its manifest), else today's configured one, said so."""
    recorded = adapter_fields(manifest).get("argv")
    if isinstance(recorded, list) and recorded and all(isinstance(a, str) for a in recorded):
        return list(recorded), []
    argv = [adapter.command, *(adapter.extra_args or [])]
    note = f"the manifest records no argv (an older attempt): ran today's configured command {argv}"
    return argv, [note]


def identity_variables(config: Config, store: Store, attempt: TaskAttempt) -> dict[str, str]:
    """The AGENTD_* values naming the attempt, as its own process got them (paths are the run's)."""
    task = store.get_task_or_raise(attempt.task_id)
    workflow = None
    if task.workflow_ref is not None:
        workflow = workflow_step(config, task, store.get_workflow_or_raise(task.workflow_ref.workflow_id))
    return attempt_variables(config, task, attempt, workflow)


async def run_replay(plan: ReplayPlan) -> Replay:
    """Run the plan in a scratch dir (removed after) and compare what it left with the evidence."""
    require_switch(plan.user)  # as the attempt ran: never as the operator or the services' user
    scratch = ReplayScratch(Path(tempfile.mkdtemp(prefix="agentd-replay-")))
    try:
        scratch.make(plan.user)
        env, redactor = replay_environment(plan, scratch)
        prompt = read_whole_beneath(plan.root, "prompt.md")
        if prompt is not None:
            write_shared(scratch.paths.bundle_copy, prompt, plan.user)
        process = await run_process(replay_spec(plan, scratch, env))
        redactor.files([scratch.paths.stdout, scratch.paths.stderr, scratch.paths.reported_result])
        differences, notes = compare(plan, scratch, process, env.get("PATH", ""))
    finally:
        scratch.remove(plan.user)
    attempt_id = plan.attempt.attempt_id
    verdict: Verdict = "different" if differences else "identical"
    return Replay(verdict, attempt_id, None, differences, notes, non_deterministic(attempt_id, differences))


def replay_environment(plan: ReplayPlan, scratch: ReplayScratch) -> tuple[dict[str, str], Redactor]:
    """The attempt's environment (AttemptPreparer._environment) over the replay's own dirs, with the
    adapter's env_file read now."""
    variables = {
        **plan.variables,
        "AGENTD_RESULT_PATH": str(scratch.paths.reported_result),
        "AGENTD_BUNDLE_PATH": str(scratch.paths.bundle_copy),
        "AGENTD_WORKSPACE": str(scratch.workspace),
        "AGENTD_PATHS__STATE_DIR": str(scratch.state_dir),
        "AGENTD_PATHS__WORKSPACE": str(scratch.workspace),
    }
    env_file = Path(plan.adapter.env_file) if plan.adapter.env_file else None
    try:
        return child_environment(
            home=scratch.paths.scratch,
            tmp=scratch.paths.scratch,
            env_file=env_file,
            env=plan.adapter.env,
            agentd=variables,
            path_first=str(Path(sys.executable).parent),
        )
    except OSError as exc:
        raise InputError(f"cannot read the adapter's env_file {env_file}: {exc.strerror}") from None


def replay_spec(plan: ReplayPlan, scratch: ReplayScratch, env: dict[str, str]) -> ProcessSpec:
    group = RunGroup(
        namespace_for(scratch.root), f"replay-{plan.attempt.attempt_id}", procs.attempt_marker(plan.attempt.attempt_id)
    )
    return ProcessSpec(
        argv=plan.argv,
        cwd=scratch.workspace,
        env=env,
        stdout_path=scratch.paths.stdout,
        stderr_path=scratch.paths.stderr,
        timeout_s=plan.timeout_s,
        kill_grace_s=plan.kill_grace_s,
        output_cap_bytes=plan.output_cap_bytes,
        output_tail_bytes=output_tail_bytes(plan.output_cap_bytes),  # capped as the attempt was
        stdin=read_whole_beneath(plan.root, "stdin.json") or b"",
        group=group,
        user=plan.user,
    )


def compare(
    plan: ReplayPlan, scratch: ReplayScratch, process: ProcessResult, path_env: str
) -> tuple[list[Difference], list[str]]:
    """The command, the exit status, stdout, stderr and result.json: each difference, and notes."""
    notes = list(plan.notes)
    differences = [d for d in [command_difference(plan, path_env)] if d is not None]
    status, recorded = exit_status_of(process), plan.manifest.get("exit_status")
    if status != recorded:
        differences.append(Difference("exit_status", str(plan.root / MANIFEST), str(recorded), status))
        notes.append(f"the replay's command ended: {process.describe()}")
    outputs = output_differences(plan, scratch)
    fields = [d for d in outputs if d.what.startswith("result.json $")]
    if len(fields) > MAX_FIELD_DIFFERENCES:
        notes.append(f"{len(fields) - MAX_FIELD_DIFFERENCES} more differences in result.json are not listed")
        outputs = outputs[: len(outputs) - len(fields) + MAX_FIELD_DIFFERENCES]
    return differences + outputs, notes


def output_differences(plan: ReplayPlan, scratch: ReplayScratch) -> list[Difference]:
    """stdout.log and stderr.log by their first differing line, result.json field by field."""
    original = as_original(plan, scratch)
    differences = []
    for name in ("stdout.log", "stderr.log"):
        expected, found = _evidence(plan.root, name) or b"", original(_read(scratch.paths.root / name) or b"")
        differences += [d for d in [text_difference(name, plan.root / name, expected, found)] if d is not None]
    result = _read(scratch.paths.reported_result)
    stored = plan.root / "result.json"
    recorded = _evidence(plan.root, "result.json")
    return differences + result_differences(stored, recorded, None if result is None else original(result))


def command_difference(plan: ReplayPlan, path_env: str) -> Difference | None:
    """The executable against the sha256 the manifest recorded for it (when it recorded one)."""
    recorded = plan.command_sha256
    if recorded is None:
        return None
    executable = resolve_command(plan.argv[0], plan.workspace, path_env)
    found = sha256_file(executable) if executable is not None else None
    return None if found == recorded else Difference("command", str(executable or plan.argv[0]), recorded, found)


def as_original(plan: ReplayPlan, scratch: ReplayScratch) -> Callable[[bytes], bytes]:
    """A function that reads the replay's scratch paths in its output as the attempt's own paths."""
    pairs = [
        (scratch.paths.run, plan.original_run),
        (scratch.paths.root, plan.original_root),
        (scratch.workspace, plan.workspace),
        (scratch.state_dir, plan.original_root.parents[2]),  # <state_dir>/attempts/<task>/<attempt>
    ]
    swaps = [(str(ours).encode(), str(theirs).encode()) for ours, theirs in pairs]

    def swap(data: bytes) -> bytes:
        for ours, theirs in swaps:
            data = data.replace(ours, theirs)
        return data

    return swap


def text_difference(what: str, where: Path, expected: bytes, found: bytes) -> Difference | None:
    """The first differing line (1-based) with both sides, escaped and cut; None when identical."""
    if expected == found:
        return None
    pairs = zip_longest(expected.splitlines(keepends=True), found.splitlines(keepends=True))
    for number, (old, new) in enumerate(pairs, start=1):
        if old != new:
            return Difference(what, f"{where}:{number}", excerpt(old), excerpt(new))
    raise AssertionError("unequal bytes split into equal lines")


def excerpt(line: bytes | None) -> str:
    if line is None:
        return "(end of file)"
    text = printable(line.decode("utf-8", errors="replace"))
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"


def result_differences(where: Path, expected: bytes | None, found: bytes | None) -> list[Difference]:
    """result.json field by field (JSON paths like `$.outcome`) when both sides are JSON, else as text."""
    if expected is None or found is None:
        if expected is None and found is None:
            return []
        shown = [None if side is None else excerpt(side) for side in (expected, found)]
        return [Difference("result.json", str(where), *shown)]
    try:
        old, new = json.loads(expected), json.loads(found)
        paths = json_differences(old, new)
    except (ValueError, RecursionError):  # not JSON, or nested past what json (or the walk) reads: as text
        return [d for d in [text_difference("result.json", where, expected, found)] if d is not None]
    return [Difference(f"result.json {path}", str(where), e, f) for path, e, f in paths]


def json_differences(expected: Any, found: Any, path: str = "$") -> list[tuple[str, str | None, str | None]]:
    """(JSON path, expected, found) for every leaf that differs; a side's None means it is absent."""
    if isinstance(expected, dict) and isinstance(found, dict):
        keys = sorted(expected.keys() | found.keys())
        return [
            d
            for key in keys
            for d in json_differences(expected.get(key, _ABSENT), found.get(key, _ABSENT), path + _member(key))
        ]
    if isinstance(expected, list) and isinstance(found, list):
        pairs = zip_longest(expected, found, fillvalue=_ABSENT)
        return [d for index, (old, new) in enumerate(pairs) for d in json_differences(old, new, f"{path}[{index}]")]
    if type(expected) is type(found) and expected == found:
        return []
    return [(path, _json_excerpt(expected), _json_excerpt(found))]


def _member(key: str) -> str:
    return f".{key}" if key.isidentifier() else f"[{json.dumps(key, ensure_ascii=False)}]"


def _json_excerpt(value: Any) -> str | None:
    if value is _ABSENT:
        return None
    text = printable(json.dumps(value, ensure_ascii=False, sort_keys=True))
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"


def _evidence(root: Path, name: str) -> bytes | None:
    """An evidence file of the attempt, never through a link (the check found none; this holds after)."""
    try:
        return read_whole_beneath(root, name)
    except IsADirectoryError:
        return None


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None


def adapter_fields(manifest: dict[str, Any]) -> dict[str, Any]:
    found = manifest.get("adapter")
    return found if isinstance(found, dict) else {}


def _number(value: Any, default: float) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else default
