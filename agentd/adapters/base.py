"""What every adapter kind shares: the attempt it is given and the run it hands back.

An adapter is small and pure at heart: `build` turns the attempt into an argv, environment,
stdin and files; `parse` turns the finished process into an AdapterRun. The runner does the
spawning; the dispatcher does the judging. Every kind produces the same AdapterRun, so every
kind leaves the same TaskAttempt evidence (seed 000 §2, §8).
"""

from __future__ import annotations

import math
import shlex
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any, Literal, Protocol

from agentd import frozen_value
from agentd.adapters.routes import through
from agentd.evidence import AttemptPaths
from agentd.process import hook as hook_module
from agentd.process.containment import RunGroup
from agentd.process.files import make_run_dir, write_shared
from agentd.process.netns import Netns
from agentd.process.output import ProcessResult
from agentd.process.privilege import RunUser
from agentd.process.runner import ProcessSpec, run_process
from agentd.process.timer import RunTimer
from agentd.records import AdapterConfig, PolicyDenial, TaskRecord
from agentd.usage import Usage as Usage  # judged in agentd/usage.py; every adapter reports one

FINAL_MESSAGE_MAX_BYTES = 1024 * 1024  # the outcome block is at the end; the head is in stdout.log


def output_tail_bytes(cap: int) -> int:
    """Of an attempt's output cap, what is kept from the end of stdout and stderr: half. Every adapter's
    verdict is at the end (claude's result record, codex's turn.completed, ollama's done record, a
    script's outcome block), so a long run keeps its head and its tail around a marked gap."""
    return cap // 2


OnStarted = Callable[[int | None], Awaitable[None]]  # the process group leader's pid, None for HTTP


@frozen_value
class PolicyHook:
    """The attempt's policy socket, as a harness's PreToolUse hook reaches it (agentd/process/hook.py)."""

    socket: Path
    within_s: float  # how long the hook waits for the dispatcher's answer before it denies on its own

    @classmethod
    def of(cls, run_dir: Path, ask_timeout_s: float) -> PolicyHook:
        """The hook of an attempt whose run dir is `run_dir`: it waits past the ask timeout, so the
        dispatcher's own deny (a held call no one decided) reaches it first."""
        return cls(run_dir / POLICY_SOCKET, ask_timeout_s + HOOK_WAIT_MARGIN_S)

    def command(self, harness: str) -> str:
        """The hook's command line (harnesses run it with /bin/sh -c): this Python, isolated, the script alone."""
        return shlex.join(
            [sys.executable, "-I", HOOK_SCRIPT, harness, "--socket", str(self.socket), "--within", f"{self.within_s:g}"]
        )

    @property
    def timeout_s(self) -> int:
        """The harness's own limit on the hook: past the hook's, so the hook's deny always comes first (a
        harness runs the call when its hook times out)."""
        return math.ceil(self.within_s) + HOOK_LIMIT_MARGIN_S


HOOK_SCRIPT = hook_module.__file__
POLICY_SOCKET = "policy.sock"  # in the attempt's run dir (agentd/attempt/calls.py serves it)
HOOK_WAIT_MARGIN_S = 15  # the hook waits this much past [policy] ask_timeout_s for the dispatcher
HOOK_LIMIT_MARGIN_S = 30  # the harness's limit on the hook: this much past the hook's own wait


# What a resumed session is told: the conversation it resumes already holds the task and its instructions
# (docs/reliability.md, "Resume, not restart"), so the bundle is not sent twice.
RESUME_NOTE = (
    "agentd: this session was interrupted (the service stopped, or the machine went down) and is resumed now. "
    "Go on with the task where you left off: check what you already did before doing it again, and end as the "
    "task's instructions say, with the outcome block."
)


@frozen_value
class SessionDiscarded:
    """A session the task's interrupted attempt kept that its next attempt does not resume, and why (it is not
    the one that was sealed, or could not be restored): that attempt starts a new one instead."""

    session_id: str | None  # the kept session's
    kept_by: str | None  # the attempt that kept it
    why: str

    def payload(self) -> dict[str, Any]:
        """As `harness_session_discarded` says it."""
        named = {"session_id": self.session_id} if self.session_id else {}
        return {**named, **({"kept_by": self.kept_by} if self.kept_by else {}), "why": self.why}


@frozen_value
class HarnessSession:
    """The harness session an attempt runs: new, or resumed from an interrupted earlier attempt's
    (agentd/attempt/session.py; docs/reliability.md, "Resume, not restart"). A new one's id is agentd's
    choice (claude) or None until the harness names it in its stream (codex)."""

    session_id: str | None
    resumed_from: str | None = None  # the attempt whose interrupted session this one continues
    # What the session had spent when it was interrupted, by codex's own running total (its counts are the
    # thread's, so a resumed run's report starts there): taken off this attempt's. None: nothing to take off.
    spent_before: Usage | None = None
    discarded: SessionDiscarded | None = None  # a new session's: the kept one it does not resume, and why

    @property
    def resumed(self) -> bool:
        return self.resumed_from is not None

    def payload(self) -> dict[str, Any]:
        """As the attempt's events say it (`task_started`, `harness_session_resumed`, `harness_session_discarded`)."""
        said: dict[str, Any] = {"session_id": self.session_id} if self.session_id else {}
        if self.discarded is not None:
            said["discarded"] = self.discarded.payload()
        return {**said, **({"resumed_from": self.resumed_from} if self.resumed_from else {})}


@frozen_value
class GatewayAccess:
    """What the attempt is given of agentd's model gateway (docs/gateway.md): its address as the attempt reaches
    it, and a token that stands for the provider's key while the attempt runs (and for nothing after)."""

    origin: str  # http://127.0.0.1:PORT
    token: str = field(repr=False)

    def base(self, base_url: str) -> str:
        """The provider's base URL as the attempt must call it: the same path, at the gateway."""
        return through(base_url, self.origin)


@frozen_value
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
    group: RunGroup | None = None  # where the attempt's processes are kept (agentd/process/containment.py)
    user: RunUser | None = None  # who they run as ([dispatch] run_as; None: the service's own user)
    timer: RunTimer = field(default_factory=RunTimer)  # its timeout, held while a call waits for a person
    hook: PolicyHook | None = None  # where its tool calls are judged (docs/policy.md); None: nothing to judge
    # told every chunk of the harness's stdout as it comes (the tool-call ledger: docs/policy.md); None: no one
    tap: Callable[[bytes], None] | None = None
    session: HarnessSession | None = None  # the harness session it runs (docs/reliability.md); None: none kept
    gateway: GatewayAccess | None = None  # where its model calls go instead of the provider (docs/gateway.md)
    netns: Netns | None = None  # a network of its own, whose only ways out are agentd's (docs/gateway.md)

    @property
    def reporter(self) -> int | None:
        """The uid whose files the attempt's reports must be (its run user's); None: anyone's (no run user)."""
        return None if self.user is None else self.user.uid


@frozen_value
class Invocation:
    argv: list[str]
    env: dict[str, str]
    stdin: bytes = b""
    files: dict[Path, str] = field(default_factory=dict)  # written (0600) before the start


@frozen_value
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
                output_tail_bytes=output_tail_bytes(ctx.output_cap_bytes),
                stdin=invocation.stdin,
                group=ctx.group,
                user=ctx.user,
                timer=ctx.timer,
                tap=ctx.tap,
                netns=ctx.netns,
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
