"""What every adapter kind shares: the attempt it is given and the run it hands back.

An adapter is small and pure at heart: `build` turns the attempt into an argv, environment,
stdin and files; `parse` turns the finished process into an AdapterRun. The runner does the
spawning; the dispatcher does the judging. Every kind produces the same AdapterRun, so every
kind leaves the same TaskAttempt evidence (seed 000 §2, §8).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from agentd.containment import RunGroup
from agentd.evidence import AttemptPaths, make_run_dir, write_shared
from agentd.privilege import RunUser
from agentd.records import AdapterConfig, PolicyDenial, TaskRecord
from agentd.runner import ProcessResult, ProcessSpec, run_process

FINAL_MESSAGE_MAX_BYTES = 1024 * 1024  # the outcome block is at the end; the head is in stdout.log

OnStarted = Callable[[int | None], Awaitable[None]]  # the process group leader's pid, None for HTTP


@dataclass(frozen=True)
class AttemptContext:
    task: TaskRecord
    attempt_id: str
    adapter: AdapterConfig
    model: str | None
    paths: AttemptPaths
    workspace: Path
    cwd: Path
    env: Mapping[str, str]  # the base environment: PATH, scratch HOME, AGENTD_*, env_file, adapter env
    bundle_text: str
    timeout_s: float
    kill_grace_s: float
    output_cap_bytes: int
    group: RunGroup | None = None  # where the attempt's processes are kept (agentd/containment.py)
    user: RunUser | None = None  # who they run as ([dispatch] run_as; None: the service's own user)


@dataclass(frozen=True)
class Invocation:
    argv: list[str]
    env: dict[str, str]
    stdin: bytes = b""
    files: dict[Path, str] = field(default_factory=dict)  # written (0600) before the start


@dataclass(frozen=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost_usd: float | None = None
    cost_estimated: bool = False


TOKEN_KINDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
USAGE_KEYS = (*TOKEN_KINDS, "cost_usd")
MAX_COST_USD = 1_000_000.0  # one attempt's cost above this is not believed: recorded as unknown
MAX_TOKENS = 2**63 - 1  # what SQLite's INTEGER holds


def judge_usage(reported: Any, where: str) -> tuple[Usage, list[str]]:
    """Usage numbers as an adapter or a script reported them, judged at the edge: each count a whole
    number from 0 to int64, the cost a finite number from 0 to MAX_COST_USD. Anything else is unknown
    (None), and the list says why; the rest of the report stands."""
    if reported is None:
        return Usage(), []
    if not isinstance(reported, Mapping):
        return Usage(), [f"{where}: expected an object, found {type(reported).__name__}"]
    problems = [
        f"{where}.{key}: unknown key (expected one of {', '.join(USAGE_KEYS)})"
        for key in reported
        if key not in USAGE_KEYS
    ]
    fields: dict[str, Any] = {}
    for key in USAGE_KEYS:
        value = reported.get(key)
        if value is None:
            continue
        judged, problem = _usage_number(value, integer=key != "cost_usd")
        if problem is not None:
            problems.append(f"{where}.{key}: {problem}; recorded as unknown")
        fields[key] = judged
    return Usage(**fields), problems


def _usage_number(value: Any, *, integer: bool) -> tuple[int | float | None, str | None]:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, f"expected a number, found {type(value).__name__}"
    if not math.isfinite(value) or value < 0:
        return None, f"expected a finite number of at least 0, found {value!r}"
    if integer:
        if isinstance(value, float) and not value.is_integer():
            return None, f"expected a whole number, found {value!r}"
        return (int(value), None) if value <= MAX_TOKENS else (None, f"expected at most {MAX_TOKENS}, found {value!r}")
    return (
        (float(value), None) if value <= MAX_COST_USD else (None, f"expected at most {MAX_COST_USD:g}, found {value!r}")
    )


@dataclass(frozen=True)
class AdapterRun:
    exit_status: Literal["ok", "error", "timeout"]
    ok: bool  # the adapter itself ended cleanly (its own verdict, before agentd's gates)
    failure: str | None  # what went wrong at the adapter level, for people
    final_message: str | None
    rate_limited: bool = False
    usage: Usage = field(default_factory=Usage)
    model: str | None = None  # as the adapter reported it
    cli_version: str | None = None
    diagnostics: dict[str, Any] = field(default_factory=dict)
    process: ProcessResult | None = None
    denials: tuple[PolicyDenial, ...] = ()  # tool calls the harness's permission policy refused


class Adapter(Protocol):
    kind: str

    async def execute(self, ctx: AttemptContext, on_started: OnStarted) -> AdapterRun:
        """Run one attempt to its end (or timeout); never raise for a model's failure."""


class SubprocessAdapter:
    """An adapter that runs a command: build → runner → parse."""

    kind = "subprocess"

    def build(self, ctx: AttemptContext) -> Invocation:
        raise NotImplementedError

    def parse(self, ctx: AttemptContext, result: ProcessResult) -> AdapterRun:
        raise NotImplementedError

    async def prepare(self, ctx: AttemptContext) -> None:
        """Anything to learn before the run (the harness CLIs' versions)."""

    async def execute(self, ctx: AttemptContext, on_started: OnStarted) -> AdapterRun:
        await self.prepare(ctx)
        invocation = self.build(ctx)
        for path, text in invocation.files.items():  # in the run dir: what the harness reads
            make_run_dir(path.parent, ctx.user)
            write_shared(path, text, ctx.user)
        ctx.paths.stdin.write_bytes(invocation.stdin)
        result = await run_process(
            ProcessSpec(
                argv=invocation.argv,
                cwd=ctx.cwd,
                env=invocation.env,
                stdout_path=ctx.paths.stdout,
                stderr_path=ctx.paths.stderr,
                timeout_s=ctx.timeout_s,
                kill_grace_s=ctx.kill_grace_s,
                output_cap_bytes=ctx.output_cap_bytes,
                stdin=invocation.stdin,
                group=ctx.group,
                user=ctx.user,
            ),
            on_started=on_started,
        )
        return self.parse(ctx, result)


def exit_status_of(result: ProcessResult) -> Literal["ok", "error", "timeout"]:
    if result.timed_out:
        return "timeout"
    return "ok" if result.exit_code == 0 else "error"


def read_tail(path: Path, limit: int = FINAL_MESSAGE_MAX_BYTES) -> str:
    """The last `limit` bytes of a file as text (the whole file when it is small)."""
    if not path.is_file():
        return ""
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(max(size - limit, 0))
        return handle.read().decode("utf-8", errors="replace")
