"""claude-code: `claude -p` with stream-json output (seed 000 §2; docs/adapters.md, "The kinds").

The prompt goes in on stdin. Success is exit 0 and `is_error: false` — never `subtype`, which
says "success" on API errors. The final text is `result`; cost is `total_cost_usd`; tokens
come from `usage`; the model from `modelUsage`. Tool calls appear in the stream (kept in
stdout.log as the evidence trace); those claude refused are its `permission_denials`. A
permission-bypass flag is passed only when the adapter declares the trusted-vm posture.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentd.adapters.base import (
    RESUME_NOTE,
    AdapterRun,
    AttemptContext,
    HarnessSession,
    Invocation,
    PolicyHook,
    read_tail,
)
from agentd.adapters.denials import claude_denials, text_of
from agentd.adapters.harness import (
    FACT_MAX_CHARS,
    HarnessAdapter,
    ParsedRun,
    base_args,
    fact,
    facts,
    json_lines,
    judge_harness_usage,
    request_timeout_ms,
    text_or,
    to_run,
    trusted,
    usage_of,
)
from agentd.process.output import ProcessResult
from agentd.records import ClaudeCodeAdapterConfig as ClaudeConfig
from agentd.usage import Usage, believed

BYPASS_FLAGS = ("--dangerously-skip-permissions", "--permission-mode=bypassPermissions")
PERMISSION_MODE = {"read-only": "plan", "workspace-write": "acceptEdits", "danger-full-access": "bypassPermissions"}


def hook_settings(hook: PolicyHook) -> str:
    """claude's settings with agentd's PreToolUse hook on every tool (docs/policy.md), given inline to
    `--settings`. claude re-reads settings files while it runs: an attempt writing `disableAllHooks` into
    user or project settings would silence the hook, and a settings file it could write would be re-read
    with them (measured on 2.1.197). So claude runs with `--setting-sources ""` (no user or project
    settings) and these settings are no file at all."""
    entry = {"type": "command", "command": hook.command("claude"), "timeout": hook.timeout_s}
    return json.dumps({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [entry]}]}})


def permission_args(config: ClaudeConfig, *, governed: bool) -> list[str]:
    """claude's own permission settings. Under a tool policy (`governed`): nothing allowed of its own
    (`dontAsk`, no `--allowedTools`, no bypass), so a call runs only when agentd's hook says `allow` and a hook
    that dies, stops or never starts leaves it denied; what the adapter's settings would have allowed is judged
    by agentd instead (agentd/adapters/posture.py). Otherwise the adapter's settings, as claude reads them."""
    if governed:
        return ["--permission-mode", "dontAsk"]
    argv = ["--allowedTools", ",".join(config.allowed_tools)] if config.allowed_tools else []
    if trusted(config):
        return [*argv, "--dangerously-skip-permissions"]
    return [*argv, "--permission-mode", PERMISSION_MODE[config.sandbox]] if config.sandbox else argv


def session_args(session: HarnessSession | None) -> list[str]:
    """A session agentd keeps for a resume has an id it chose (`--session-id`) or resumes one (`--resume`,
    the same id); without one (a harness run outside dispatch), claude keeps no session at all."""
    if session is None:
        return ["--no-session-persistence"]
    assert session.session_id is not None, "claude's session id is agentd's choice"
    return ["--resume" if session.resumed else "--session-id", session.session_id]


class ClaudeCodeAdapter(HarnessAdapter):
    kind = "claude-code"

    def build(self, ctx: AttemptContext) -> Invocation:
        config = ctx.adapter
        assert isinstance(config, ClaudeConfig)
        argv = [config.command, "-p", "--output-format", "stream-json", "--verbose", *session_args(ctx.session)]
        if ctx.model:
            argv += ["--model", ctx.model]
        if config.max_turns:
            argv += ["--max-turns", str(config.max_turns)]
        if config.max_budget_usd:
            argv += ["--max-budget-usd", f"{config.max_budget_usd:g}"]
        argv += permission_args(config, governed=ctx.hook is not None)
        env = dict(ctx.env)
        env.update(
            DISABLE_TELEMETRY="1",
            DISABLE_AUTOUPDATER="1",
            DISABLE_ERROR_REPORTING="1",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            CLAUDE_CODE_MAX_RETRIES=env.get("CLAUDE_CODE_MAX_RETRIES", "1"),
            API_TIMEOUT_MS=env.get("API_TIMEOUT_MS", str(request_timeout_ms(config))),
        )
        if trusted(config) and ctx.hook is None:
            env["IS_SANDBOX"] = "1"  # claude refuses to skip permissions as root without it
        if ctx.hook is not None:
            argv += ["--settings", hook_settings(ctx.hook), "--setting-sources", ""]
            env.pop("CLAUDE_CODE_SHELL_PREFIX", None)  # it would wrap the hook's command
        prompt = RESUME_NOTE if ctx.session and ctx.session.resumed else ctx.bundle_text
        return Invocation([*argv, *base_args(config)], env, stdin=prompt.encode())

    def parse(self, ctx: AttemptContext, result: ProcessResult) -> AdapterRun:
        return to_run(ctx, result, parse_claude_output(read_tail(ctx.paths.stdout)), self.version(ctx))


def parse_claude_output(text: str) -> ParsedRun:
    """The `result` record of `--output-format json` or `stream-json` output. Total: whatever the
    stream holds, what cannot be used is skipped and counted (`unusable_lines`), never raised."""
    records, unusable = json_lines(text)
    if not records and text.strip().startswith("{"):
        records, unusable = json_lines(text.replace("\n", " "))
    final = next((r for r in reversed(records) if r.get("type") == "result"), None)
    assistant = [r for r in records if r.get("type") == "assistant"]
    unusable += sum(1 for r in assistant if not isinstance(r.get("message"), dict))
    tool_uses = facts(block.get("name") for r in assistant for block in _blocks(r) if block.get("type") == "tool_use")
    seen = {"tool_uses": tool_uses, **({"unusable_lines": unusable} if unusable else {})}
    if final is None:
        return ParsedRun(
            False, False, None, "claude wrote no result record (killed, or cut off mid-stream)", diagnostics=seen
        )
    return _verdict(final, seen)


def _verdict(final: dict[str, Any], seen: dict[str, Any]) -> ParsedRun:
    is_error = bool(final.get("is_error"))
    denials = claude_denials(final.get("permission_denials"))  # a list, whatever claude printed there
    text_out = final.get("result") if isinstance(final.get("result"), str) else None
    usage, problems = _usage(final)
    diagnostics = {
        **seen,
        "num_turns": fact(final.get("num_turns")),
        "api_error_status": fact(final.get("api_error_status")),
        "permission_denials": len(denials),
        "terminal_reason": fact(final.get("terminal_reason")),
        "max_turns_reached": final.get("subtype") == "error_max_turns",  # its budget ran out (docs/determinism.md)
        **({"usage_problems": problems} if problems else {}),
    }
    if final.get("subtype") == "error_max_budget_usd":  # it stopped itself on the cap agentd gave it
        diagnostics["budget_stop"] = {
            "by": "claude (--max-budget-usd)",
            "cap": "the attempt's cap",
            "per_attempt": True,
            **({"spent_usd": usage.cost_usd} if usage.cost_usd is not None else {}),
        }
    return ParsedRun(
        finished=True,
        succeeded=not is_error,
        final_message=text_out,
        failure=_failure(final, text_out) if is_error else None,
        usage=usage,
        model=_model(final.get("modelUsage")),
        denials=denials,
        diagnostics=diagnostics,
    )


def _blocks(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The content blocks of an assistant record that are objects (its message may be anything)."""
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []


def _failure(final: dict[str, Any], text_out: str | None) -> str:
    """What claude said went wrong: its result text, else its errors, else its subtype."""
    errors = final.get("errors")
    listed = "; ".join(text_of(e) for e in errors) if isinstance(errors, list) else text_of(errors)
    return text_or(text_out) or listed or f"claude reported {text_of(final.get('subtype')) or 'an error'}"


USAGE_NAMES = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_tokens": "cache_read_input_tokens",
    "cache_write_tokens": "cache_creation_input_tokens",
}


def _usage(final: dict[str, Any]) -> tuple[Usage, list[str]]:
    """Tokens from `usage`, the cost from `total_cost_usd`: judged, never trusted."""
    reported, problems = usage_of(final, "usage", USAGE_NAMES, "claude result")
    reported["cost_usd"] = (final.get("total_cost_usd"), "claude result.total_cost_usd")
    return judge_harness_usage(reported, problems)


def _model(model_usage: Any) -> str | None:
    """The model that cost the most, without claude's context suffix (`claude-opus-4-8[1m]`)."""
    if not isinstance(model_usage, dict) or not model_usage:
        return None

    def cost(name: str) -> float:
        entry = model_usage[name]
        return (believed(entry.get("costUSD"), "cost_usd") or 0.0) if isinstance(entry, dict) else 0.0

    return re.sub(r"\[[^\]]*\]$", "", max(model_usage, key=cost))[:FACT_MAX_CHARS] or None
