"""The script adapter (seed 000 §2): `command` + `extra_args`, the task payload as JSON on stdin.

The outcome comes from $AGENTD_RESULT_PATH or the last ```json block of stdout. Lines the script appends
to $AGENTD_PROGRESS_PATH (a file in its run dir) are its live progress (docs/live.md).
"""

from __future__ import annotations

import json

from agentd.adapters.base import AdapterRun, AttemptContext, Invocation, SubprocessAdapter, exit_status_of, read_tail
from agentd.process.output import ProcessResult
from agentd.records import ScriptAdapterConfig

PROGRESS_FILE = "progress.log"


class ScriptAdapter(SubprocessAdapter):
    kind = "script"

    def build(self, ctx: AttemptContext) -> Invocation:
        config = ctx.adapter
        assert isinstance(config, ScriptAdapterConfig)
        payload = json.dumps(ctx.task.payload, ensure_ascii=False).encode()
        env = {**ctx.env, "AGENTD_PROGRESS_PATH": str(ctx.paths.reported(PROGRESS_FILE))}
        return Invocation(argv=[config.command, *(config.extra_args or [])], env=env, stdin=payload)

    def parse(self, ctx: AttemptContext, result: ProcessResult) -> AdapterRun:
        return AdapterRun(
            exit_status=exit_status_of(result),
            ok=result.ok,
            failure=None if result.ok else result.describe(),
            final_message=read_tail(ctx.paths.stdout),
            process=result,
        )
