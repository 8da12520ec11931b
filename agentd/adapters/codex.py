"""codex: `codex exec --json` (seed 000 §2; docs/adapters.md, "The kinds").

A per-attempt CODEX_HOME holds config.toml: the model, the adapter's custom provider, update
checks, analytics and plugin sync off, and retries lowered so a failing provider fails fast.
Success is exit 0 with `turn.completed` and no `turn.failed` (an `item` of type `error` alone
is a warning). The final text is the `-o` file, else the last `agent_message`. Codex reports
tokens but no cost: the adapter's price table gives an estimate. A `command_execution` item it
`declined` is a command its approval policy or sandbox refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import tomli_w

from agentd.adapters.base import (
    FINAL_MESSAGE_MAX_BYTES,
    AdapterRun,
    AttemptContext,
    Invocation,
    PolicyHook,
    read_tail,
)
from agentd.adapters.denials import codex_denials
from agentd.adapters.harness import (
    HarnessAdapter,
    ParsedRun,
    base_args,
    estimate_cost,
    facts,
    json_lines,
    judge_harness_usage,
    request_timeout_ms,
    scratch,
    text_or,
    to_run,
    trusted,
    usage_of,
)
from agentd.process.files import read_reported
from agentd.process.runner import ProcessResult
from agentd.records import CodexAdapterConfig as CodexConfig
from agentd.usage import Usage

LAST_MESSAGE = "codex-last-message.txt"


class CodexAdapter(HarnessAdapter):
    kind = "codex"

    def build(self, ctx: AttemptContext) -> Invocation:
        config = ctx.adapter
        assert isinstance(config, CodexConfig)
        home = scratch(ctx, "codex")
        sandbox = config.sandbox or "read-only"
        if sandbox == "danger-full-access" and not trusted(config):
            sandbox = "workspace-write"  # config check refuses this combination; never widen silently
        argv = [
            config.command,
            "exec",
            "--json",
            "--skip-git-repo-check",
            "-o",
            str(ctx.paths.reported(LAST_MESSAGE)),  # a transport: last_message.txt is the evidence
            "-s",
            sandbox,
        ]
        if ctx.model:
            argv += ["-m", ctx.model]
        document = codex_config(config, ctx.model)
        if ctx.hook is not None:
            document["hooks"] = hook_table(ctx.hook)
            argv.append("--dangerously-bypass-hook-trust")  # codex exec skips untrusted user-layer hooks silently
        env = {**ctx.env, "CODEX_HOME": str(home)}
        files = {home / "config.toml": tomli_w.dumps(document)}
        # The prompt as stdin ("-"): a bundle can be longer than one argv string may be.
        return Invocation([*argv, *base_args(config), "-"], env, stdin=ctx.bundle_text.encode(), files=files)

    def parse(self, ctx: AttemptContext, result: ProcessResult) -> AdapterRun:
        config = ctx.adapter
        assert isinstance(config, CodexConfig)
        parsed = parse_codex_events(read_tail(ctx.paths.stdout))
        last, _ = read_reported(ctx.paths.reported(LAST_MESSAGE), FINAL_MESSAGE_MAX_BYTES, ctx.reporter)
        if last:  # written by the attempt's user: read without following a link, capped
            parsed = replace(parsed, final_message=last.decode("utf-8", errors="replace"))
        model = ctx.model or config.model
        price = (config.prices or {}).get(model) if model else None
        parsed = replace(parsed, usage=estimate_cost(parsed.usage, price), model=model)
        return to_run(ctx, result, parsed, self.version(ctx))


def hook_table(hook: PolicyHook) -> dict[str, Any]:
    """codex's PreToolUse hook on every tool (docs/policy.md). codex reads its config once, at its start, so
    nothing the attempt writes later changes it."""
    entry = {"type": "command", "command": hook.command("codex"), "timeout": hook.timeout_s}
    return {"PreToolUse": [{"matcher": ".*", "hooks": [entry]}]}


def codex_config(config: CodexConfig, model: str | None) -> dict[str, Any]:
    """$CODEX_HOME/config.toml: quiet, loopback-friendly, failing fast."""
    document: dict[str, Any] = {
        "check_for_update_on_startup": False,
        "analytics": {"enabled": False},
        "features": {"plugins": False, "remote_plugin": False, "apps": False},
    }
    if model:
        document["model"] = model
    if config.provider is not None:
        provider = config.provider
        entry: dict[str, Any] = {
            "name": provider.name or provider.id,
            "wire_api": provider.wire_api,
            "request_max_retries": 1,
            "stream_max_retries": 1,
            "stream_idle_timeout_ms": request_timeout_ms(config),
        }
        if provider.base_url:
            entry["base_url"] = provider.base_url
        if provider.env_key:
            entry["env_key"] = provider.env_key
        if provider.requires_openai_auth is not None:
            entry["requires_openai_auth"] = provider.requires_openai_auth
        document["model_provider"] = provider.id
        document["model_providers"] = {provider.id: entry}
    return document


def parse_codex_events(text: str) -> ParsedRun:
    """codex's JSONL events reduced to a verdict: turn.completed or turn.failed. Total: whatever the
    stream holds, what cannot be used is skipped and counted (`unusable_lines`), never raised."""
    events, unusable = json_lines(text)
    completed = next((e for e in reversed(events) if e.get("type") == "turn.completed"), None)
    failed = next((e for e in reversed(events) if e.get("type") == "turn.failed"), None)
    items = [e["item"] for e in events if e.get("type") == "item.completed" and isinstance(e.get("item"), dict)]
    messages = [i.get("text") for i in items if i.get("type") == "agent_message" and isinstance(i.get("text"), str)]
    last = messages[-1] if messages else None
    diagnostics = {
        "commands": facts(i.get("command") for i in items if i.get("type") == "command_execution"),
        "warnings": facts(i.get("message") for i in items if i.get("type") == "error")[:10],
        **({"unusable_lines": unusable} if unusable else {}),
    }
    denials = codex_denials(items)
    if failed is not None:
        return ParsedRun(True, False, last, _failure(failed), diagnostics=diagnostics, denials=denials)
    if completed is None:
        failure = "codex ended without turn.completed (killed, or cut off)"
        return ParsedRun(False, False, last, failure, diagnostics=diagnostics, denials=denials)
    usage, problems = _usage(completed)
    if problems:
        diagnostics["usage_problems"] = problems
    return ParsedRun(True, True, last, usage=usage, diagnostics=diagnostics, denials=denials)


def _failure(failed: dict[str, Any]) -> str:
    """turn.failed's `error.message` (or its error, if that is text)."""
    error = failed.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    return text_or(message) or "codex reported turn.failed"


USAGE_NAMES = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_tokens": "cached_input_tokens",
    "cache_write_tokens": "cache_write_input_tokens",
}


def _usage(completed: dict[str, Any]) -> tuple[Usage, list[str]]:
    """turn.completed's token counts, judged (codex reports no cost: the adapter estimates one)."""
    reported, problems = usage_of(completed, "usage", USAGE_NAMES, "codex turn.completed")
    return judge_harness_usage(reported, problems)
