"""An attempt the dispatcher will not start: in place of its adapter, it ends as a command that cannot
start ends (agentd/process/output.py `ProcessResult.start_error`): judged `start_failed`, no side effects, the reason
as its error (agentd/attempt/judge.py). Used when the run user cannot start the tool-call hook
(agentd/process/hook_check.py; docs/policy.md, "When the hook cannot start")."""

from __future__ import annotations

from agentd.adapters.base import AdapterRun, AttemptContext, OnStarted
from agentd.process.output import CappedFile, ProcessResult


class RefusedStart:
    """An adapter that starts nothing and says why."""

    def __init__(self, kind: str, reason: str) -> None:
        self.kind, self.reason = kind, reason  # the configured adapter's kind

    async def execute(self, ctx: AttemptContext, on_started: OnStarted) -> AdapterRun:
        """The run of a process that never started; `on_started` is never told."""
        stdout, stderr = CappedFile(ctx.paths.stdout, 0).close(), CappedFile(ctx.paths.stderr, 0).close()
        result = ProcessResult(None, None, None, False, self.reason, stdout, stderr, 0.0)
        return AdapterRun(exit_status="error", ok=False, failure=self.reason, final_message=None, process=result)
