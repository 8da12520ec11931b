"""claude-code: `claude -p` with stream-json output (seed 000 §2; facts: reference/harness-clis.md §1).

The prompt goes in on stdin. Success is exit 0 and `is_error: false` — never `subtype`, which
says "success" on API errors. The final text is `result`; cost is `total_cost_usd`; tokens
come from `usage`; the model from `modelUsage`. Tool calls appear in the stream (kept in
stdout.log as the evidence trace); those claude refused are its `permission_denials`. A
permission-bypass flag is passed only when the adapter declares the trusted-vm posture.
"""

from __future__ import annotations

import re
from typing import Any

from agentd.adapters.base import AdapterRun, AttemptContext, Invocation, Usage, read_tail
from agentd.adapters.denials import claude_denials
from agentd.adapters.harness import (
    HarnessAdapter,
    ParsedRun,
    base_args,
    json_lines,
    request_timeout_ms,
    to_run,
    trusted,
)
from agentd.records import ClaudeCodeAdapterConfig as ClaudeConfig
from agentd.runner import ProcessResult

BYPASS_FLAGS = ("--dangerously-skip-permissions", "--permission-mode=bypassPermissions")
PERMISSION_MODE = {"read-only": "plan", "workspace-write": "acceptEdits", "danger-full-access": "bypassPermissions"}


class ClaudeCodeAdapter(HarnessAdapter):
    kind = "claude-code"

    def build(self, ctx: AttemptContext) -> Invocation:
        config = ctx.adapter
        assert isinstance(config, ClaudeConfig)
        argv = [config.command, "-p", "--output-format", "stream-json", "--verbose", "--no-session-persistence"]
        if ctx.model:
            argv += ["--model", ctx.model]
        if config.max_turns:
            argv += ["--max-turns", str(config.max_turns)]
        if config.max_budget_usd:
            argv += ["--max-budget-usd", f"{config.max_budget_usd:g}"]
        if config.allowed_tools:
            argv += ["--allowedTools", ",".join(config.allowed_tools)]
        if trusted(config):
            argv.append("--dangerously-skip-permissions")
        elif config.sandbox:
            argv += ["--permission-mode", PERMISSION_MODE[config.sandbox]]
        env = dict(ctx.env)
        env.update(
            DISABLE_TELEMETRY="1",
            DISABLE_AUTOUPDATER="1",
            DISABLE_ERROR_REPORTING="1",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            CLAUDE_CODE_MAX_RETRIES=env.get("CLAUDE_CODE_MAX_RETRIES", "1"),
            API_TIMEOUT_MS=env.get("API_TIMEOUT_MS", str(request_timeout_ms(config))),
        )
        if trusted(config):
            env["IS_SANDBOX"] = "1"  # claude refuses to skip permissions as root without it
        return Invocation([*argv, *base_args(config)], env, stdin=ctx.bundle_text.encode())

    def parse(self, ctx: AttemptContext, result: ProcessResult) -> AdapterRun:
        return to_run(ctx, result, parse_claude_output(read_tail(ctx.paths.stdout)), self.version(ctx))


def parse_claude_output(text: str) -> ParsedRun:
    """The `result` record of `--output-format json` or `stream-json` output."""
    records = json_lines(text)
    if not records and text.strip().startswith("{"):
        records = json_lines(text.replace("\n", " "))
    final = next((r for r in reversed(records) if r.get("type") == "result"), None)
    tool_uses = [
        block.get("name")
        for r in records
        if r.get("type") == "assistant"
        for block in (r.get("message") or {}).get("content", [])
        if block.get("type") == "tool_use"
    ]
    if final is None:
        return ParsedRun(
            False,
            False,
            None,
            "claude wrote no result record (killed, or cut off mid-stream)",
            diagnostics={"tool_uses": tool_uses},
        )
    is_error = bool(final.get("is_error"))
    denials = claude_denials(final.get("permission_denials"))  # a list, whatever claude printed there
    text_out = final.get("result")
    failure = None
    if is_error:
        failure = text_out or "; ".join(final.get("errors") or []) or f"claude reported {final.get('subtype')}"
    return ParsedRun(
        finished=True,
        succeeded=not is_error,
        final_message=text_out if isinstance(text_out, str) else None,
        failure=failure,
        usage=_usage(final),
        model=_model(final.get("modelUsage") or {}),
        denials=denials,
        diagnostics={
            "tool_uses": tool_uses,
            "num_turns": final.get("num_turns"),
            "api_error_status": final.get("api_error_status"),
            "permission_denials": len(denials),
            "terminal_reason": final.get("terminal_reason"),
        },
    )


def _usage(final: dict[str, Any]) -> Usage:
    usage = final.get("usage") or {}
    cost = final.get("total_cost_usd")
    return Usage(
        input_tokens=usage.get("input_tokens"),
        output_tokens=usage.get("output_tokens"),
        cache_read_tokens=usage.get("cache_read_input_tokens"),
        cache_write_tokens=usage.get("cache_creation_input_tokens"),
        cost_usd=float(cost) if cost is not None else None,
    )


def _model(model_usage: dict[str, Any]) -> str | None:
    """The model that cost the most, without claude's context suffix (`claude-opus-4-8[1m]`)."""
    if not model_usage:
        return None
    name = max(model_usage, key=lambda key: (model_usage[key] or {}).get("costUSD") or 0)
    return re.sub(r"\[[^\]]*\]$", "", name)
