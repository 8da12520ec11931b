"""An in-process adapter for the fast tier: it implements agentd's Adapter protocol and does what the
four test adapters in tests/adapters/ do — complete.sh, scripted.py, always_fails.sh, stepper.py —
without starting a process. Ordering, retry, outbox and workflow tests run through the real
dispatcher, store and evidence with it; what only a real process can show (its environment,
timeouts, process groups, escapees) stays with the real adapters in the process tier."""

from __future__ import annotations

import json
import re
from typing import Any

from adapters.stepper import count_run, step_outcome
from support import ok

from agentd.adapters.base import AdapterRun, AttemptContext, OnStarted, Usage
from agentd.records import AdapterConfig


class InProcessAdapter:
    kind = "script"

    def __init__(self, adapter_id: str) -> None:
        self.adapter_id = adapter_id

    async def execute(self, ctx: AttemptContext, on_started: OnStarted) -> AdapterRun:
        await on_started(None)
        ctx.paths.stdin.write_text(json.dumps(ctx.task.payload))
        behaviour = getattr(self, f"_{self.adapter_id}", self._script)
        exit_code, stdout, stderr = behaviour(ctx, ctx.task.payload)
        ctx.paths.stdout.write_text(stdout)
        ctx.paths.stderr.write_text(stderr)
        return AdapterRun(
            exit_status="ok" if exit_code == 0 else "error",
            ok=exit_code == 0,
            failure=None if exit_code == 0 else f"exit {exit_code}",
            final_message=stdout,
            usage=Usage(**ctx.task.payload.get("usage", {})),  # what a harness would report (cost, tokens)
            diagnostics=dict(ctx.task.payload.get("diagnostics", {})),  # what a harness's parser would say
        )

    def _script(self, ctx: AttemptContext, payload: dict[str, Any]) -> tuple[int, str, str]:
        """complete.sh: a report in the workspace, claimed."""
        report = f"reports/{ctx.task.task_id}.md"
        (ctx.cwd / "reports").mkdir(parents=True, exist_ok=True)
        (ctx.cwd / report).write_text(f"task {ctx.task.task_id} attempt {ctx.attempt_id}\n")
        ctx.paths.result.write_text(json.dumps(ok(artifact_paths=[report])))
        return 0, "", ""

    def _fails(self, ctx: AttemptContext, payload: dict[str, Any]) -> tuple[int, str, str]:
        """always_fails.sh: a retryable failure, reported."""
        summary = f"could not reach the thing (attempt {ctx.attempt_id})"
        ctx.paths.result.write_text(
            json.dumps({"status": "retryable_failure", "machine_status": "needs_retry", "operator_summary": summary})
        )
        return 0, "", ""

    def _scripted(self, ctx: AttemptContext, payload: dict[str, Any]) -> tuple[int, str, str]:
        """scripted.py: files, stdout, stderr, an outcome or raw result text, an exit code."""

        def expand(text: str) -> str:
            def value(match: re.Match[str]) -> str:
                # AGENTD_EVIDENCE_DIR: in-process only, where something with the service's rights could write
                found = (
                    str(ctx.paths.root) if match.group(2) == "AGENTD_EVIDENCE_DIR" else ctx.env.get(match.group(2), "")
                )
                return json.dumps(found)[1:-1] if match.group(1) else found

            return re.sub(r"\$\{(json:)?([A-Z0-9_]+)\}", value, text)

        for path, text in payload.get("files", {}).items():
            (ctx.cwd / expand(path)).parent.mkdir(parents=True, exist_ok=True)
            (ctx.cwd / expand(path)).write_text(expand(text))
        if "outcome" in payload:
            ctx.paths.result.write_text(expand(json.dumps(payload["outcome"])))
        if "raw_result" in payload:
            ctx.paths.result.write_text(expand(payload["raw_result"]))
        stdout = expand(payload["stdout"]) + "\n" if "stdout" in payload else ""
        stderr = expand(payload["stderr"]) + "\n" if "stderr" in payload else ""
        return int(payload.get("exit", 0)), stdout, stderr

    def _stepper(self, ctx: AttemptContext, payload: dict[str, Any]) -> tuple[int, str, str]:
        """stepper.py's rule: the signal the workflow's context scripts for the n-th run of this state."""
        state = ctx.env["AGENTD_WORKFLOW_STATE"]
        runs = count_run(ctx.cwd, ctx.env["AGENTD_WORKFLOW_ID"], state)
        ctx.paths.result.write_text(json.dumps(step_outcome(payload, state, runs)))
        return 0, "", ""


def in_process(config: AdapterConfig) -> InProcessAdapter:
    """For Dispatcher(adapters=…): every configured adapter runs in this process."""
    return InProcessAdapter(config.adapter_id)
