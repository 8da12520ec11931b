"""codex: `codex exec --json` (seed 000 §2; docs/adapters.md, "The kinds").

A per-attempt CODEX_HOME holds config.toml: the model, the adapter's custom provider, update
checks, analytics and plugin sync off, and retries lowered so a failing provider fails fast.
Success is exit 0 with `turn.completed` and no `turn.failed` (an `item` of type `error` alone
is a warning). The final text is the `-o` file, else the last `agent_message`. Codex reports
tokens but no cost: the adapter's price table gives an estimate. A `command_execution` item it
`declined` is a command its approval policy or sandbox refused.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import tomli_w

from agentd.adapters.base import (
    FINAL_MESSAGE_MAX_BYTES,
    RESUME_NOTE,
    AdapterRun,
    AttemptContext,
    GatewayAccess,
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
from agentd.config.gateway import OPENAI
from agentd.process.files import read_reported
from agentd.process.output import ProcessResult
from agentd.records import CodexAdapterConfig as CodexConfig
from agentd.usage import TOKEN_KINDS, Usage

LAST_MESSAGE = "codex-last-message.txt"


class CodexAdapter(HarnessAdapter):
    kind = "codex"

    def build(self, ctx: AttemptContext) -> Invocation:
        config = ctx.adapter
        assert isinstance(config, CodexConfig)
        home = scratch(ctx, "codex")
        sandbox = sandbox_of(config, governed=ctx.hook is not None)
        resuming = ctx.session.session_id if ctx.session and ctx.session.resumed else None  # the thread's id
        argv = [
            config.command,
            "exec",
            *(["resume"] if resuming else []),
            "--json",
            "--skip-git-repo-check",
            "-o",
            str(ctx.paths.reported(LAST_MESSAGE)),  # a transport: last_message.txt is the evidence
            # `exec resume` takes no -s; the same setting as a config override (measured on 0.169.0: the
            # resumed turn runs under it, not under the interrupted one's)
            *(["-c", f'sandbox_mode="{sandbox}"'] if resuming else ["-s", sandbox]),
        ]
        if ctx.hook is not None and config.sandbox == "danger-full-access":  # the network it was given, kept
            argv += ["-c", "sandbox_workspace_write.network_access=true"]
        if ctx.model:
            argv += ["-m", ctx.model]
        document = codex_config(config, ctx.model, ctx.gateway)
        if ctx.hook is not None:
            document["hooks"] = hook_table(ctx.hook)
            argv.append("--dangerously-bypass-hook-trust")  # codex exec skips untrusted user-layer hooks silently
        env = {**ctx.env, "CODEX_HOME": str(home)}
        files = {home / "config.toml": tomli_w.dumps(document)}
        # The prompt as stdin ("-"): a bundle can be longer than one argv string may be. A resumed session is
        # told it was interrupted instead: its conversation holds the bundle already (docs/reliability.md).
        prompt = RESUME_NOTE if resuming else ctx.bundle_text
        tail = [resuming, "-"] if resuming else ["-"]
        return Invocation([*argv, *base_args(config), *tail], env, stdin=prompt.encode(), files=files)

    def parse(self, ctx: AttemptContext, result: ProcessResult) -> AdapterRun:
        config = ctx.adapter
        assert isinstance(config, CodexConfig)
        parsed = parse_codex_events(read_tail(ctx.paths.stdout))
        last, _ = read_reported(ctx.paths.reported(LAST_MESSAGE), FINAL_MESSAGE_MAX_BYTES, ctx.reporter)
        if last:  # written by the attempt's user: read without following a link, capped
            parsed = replace(parsed, final_message=last.decode("utf-8", errors="replace"))
        model = ctx.model or config.model
        price = (config.prices or {}).get(model) if model else None
        spent_before = ctx.session.spent_before if ctx.session else None
        usage = since(parsed.usage, spent_before) if spent_before else parsed.usage
        parsed = replace(parsed, usage=estimate_cost(usage, price), model=model)
        return to_run(ctx, result, parsed, self.version(ctx))


def sandbox_of(config: CodexConfig, *, governed: bool) -> str:
    """codex's sandbox. Under a tool policy (`governed`) never none: codex's tools then run in its sandbox (a pid
    namespace of their own, no unix sockets), where they cannot see, stop or kill the hook beside them, nor
    reach agentd's policy socket (measured on 0.169.0; docs/policy.md). `danger-full-access` is then
    `workspace-write` with the network kept."""
    sandbox = config.sandbox or "read-only"
    if sandbox == "danger-full-access" and (governed or not trusted(config)):
        return "workspace-write"  # config check refuses it untrusted; never widened silently
    return sandbox


def hook_table(hook: PolicyHook) -> dict[str, Any]:
    """codex's PreToolUse hook on every tool (docs/policy.md). codex reads its config once, at its start, so
    nothing the attempt writes later changes it."""
    entry = {"type": "command", "command": hook.command("codex"), "timeout": hook.timeout_s}
    return {"PreToolUse": [{"matcher": ".*", "hooks": [entry]}]}


def codex_config(config: CodexConfig, model: str | None, gateway: GatewayAccess | None = None) -> dict[str, Any]:
    """$CODEX_HOME/config.toml: quiet, loopback-friendly, failing fast. Under the model gateway the provider's
    base URL is the gateway's (a codex without a provider gets one for OpenAI's API through the gateway)."""
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
        if provider.base_url or gateway is not None:
            entry["base_url"] = gateway.base(provider.base_url or OPENAI) if gateway else provider.base_url
        if provider.env_key:
            entry["env_key"] = provider.env_key
        if provider.requires_openai_auth is not None:
            entry["requires_openai_auth"] = provider.requires_openai_auth
        document["model_provider"] = provider.id
        document["model_providers"] = {provider.id: entry}
    elif gateway is not None:  # codex's own OpenAI provider, reached through the gateway
        through_gateway = {
            "name": "OpenAI through agentd",
            "base_url": gateway.base(OPENAI),
            "env_key": "OPENAI_API_KEY",
        }
        document["model_provider"] = "agentd"
        document["model_providers"] = {"agentd": {**through_gateway, "wire_api": "responses", "request_max_retries": 1}}
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


def since(total: Usage, before: Usage) -> Usage:
    """This attempt's share of a resumed thread's counts: codex reports the thread's running total, which
    held `before` when the session was interrupted (agentd/attempt/session.py). A count unknown on either
    side stays unknown; one that went down (not codex's own total) is 0, never negative."""
    counts: dict[str, Any] = {}
    for kind in TOKEN_KINDS:
        now, then = getattr(total, kind), getattr(before, kind)
        counts[kind] = None if now is None else max(0, now - (then or 0))
    return Usage(**counts)


THREAD_STARTED_MAX_BYTES = 64 * 1024  # codex prints thread.started first: it is in the stream's head


def thread_id(stdout: Path) -> str | None:
    """The session id codex named in its stream (`thread.started`), if it is a UUID (it goes into the next
    attempt's argv, and the stream is the attempt's to write)."""
    try:
        with stdout.open("rb") as stream:
            head = stream.read(THREAD_STARTED_MAX_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    events, _ = json_lines(head)
    named = next((e.get("thread_id") for e in events if e.get("type") == "thread.started"), None)
    if not isinstance(named, str):
        return None
    try:
        return str(uuid.UUID(named)) if len(named) == 36 else None
    except ValueError:
        return None
