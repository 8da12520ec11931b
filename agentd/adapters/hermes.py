"""hermes-agent: `hermes -z PROMPT --usage-file FILE` (seed 000 §2; docs/adapters.md, "The kinds").

A per-attempt HERMES_HOME holds config.yaml (provider, base_url, model, context_length, lazy
installs off, session snapshots on: agentd/adapters/hermes_session.py keeps them as evidence).
Hermes exits 0 even when its model call failed, so the run is judged by the usage file (`completed`
true, `failed` false); no usage file means it was killed. The final text is stdout; tokens and cost
status come from the usage file.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from agentd.adapters.base import AdapterRun, AttemptContext, GatewayAccess, Invocation, read_tail
from agentd.adapters.harness import (
    HarnessAdapter,
    ParsedRun,
    base_args,
    fact,
    judge_harness_usage,
    request_timeout_ms,
    scratch,
    text_or,
    to_run,
)
from agentd.adapters.hermes_session import SESSION_FILE, session_document
from agentd.process.files import read_reported, write_new
from agentd.process.output import ProcessResult
from agentd.records import HermesAgentAdapterConfig as HermesConfig
from agentd.usage import TOKEN_KINDS, Usage

USAGE_FILE = "hermes-usage.json"
MAX_USAGE_BYTES = 1024 * 1024
DEFAULT_CONTEXT_LENGTH = 262_144


class HermesAgentAdapter(HarnessAdapter):
    kind = "hermes-agent"

    def build(self, ctx: AttemptContext) -> Invocation:
        config = ctx.adapter
        assert isinstance(config, HermesConfig)
        home = scratch(ctx, "hermes")
        argv = [config.command, "-z", ctx.bundle_text, "--usage-file", str(ctx.paths.reported(USAGE_FILE))]
        if ctx.model:
            argv += ["-m", ctx.model]
        seconds = str(request_timeout_ms(config) // 1000)
        env = {
            **ctx.env,
            "HERMES_HOME": str(home),
            "HERMES_DISABLE_LAZY_INSTALLS": "1",
            "HERMES_API_TIMEOUT": seconds,
            "HERMES_STREAM_READ_TIMEOUT": seconds,
            "HERMES_STREAM_STALE_TIMEOUT": seconds,
            "HERMES_STREAM_STALE_GIVEUP": "1",
            "HERMES_STREAM_RETRIES": "0",
        }
        api_key = env.get(config.api_key_env) if config.api_key_env else None
        files = {home / "config.yaml": hermes_config(config, ctx.model, api_key, ctx.gateway)}
        return Invocation([*argv, *base_args(config)], env, files=files)

    def parse(self, ctx: AttemptContext, result: ProcessResult) -> AdapterRun:
        (ctx.paths.scratch / "hermes" / "config.yaml").unlink(missing_ok=True)  # it held the provider key
        usage, problem = read_reported(ctx.paths.reported(USAGE_FILE), MAX_USAGE_BYTES, ctx.reporter)
        if usage is not None:  # evidence: a copy in the state dir, which the attempt cannot reach
            write_new(ctx.paths.root / USAGE_FILE, usage.decode("utf-8", errors="replace"))
        keep_session(ctx)
        usage_text = usage.decode("utf-8", errors="replace") if usage is not None else None
        run = parse_hermes(usage_text, read_tail(ctx.paths.stdout))
        if problem is not None:
            run = replace(run, diagnostics={**run.diagnostics, "usage_file_problem": problem})
        return to_run(ctx, result, run, self.version(ctx))


def keep_session(ctx: AttemptContext) -> None:
    """Hermes' session snapshots into the evidence, where the action trace reads its tool calls."""
    document = session_document(ctx.paths.scratch, ctx.reporter)
    if document is not None:
        write_new(ctx.paths.root / SESSION_FILE, json.dumps(document, default=str) + "\n")


def hermes_config(
    config: HermesConfig, model: str | None, api_key: str | None = None, gateway: GatewayAccess | None = None
) -> str:
    """$HERMES_HOME/config.yaml. JSON is valid YAML, so no YAML library is needed to write it.

    Hermes reads its provider key only from here; the file is 0600 in the attempt's scratch dir
    and is removed when the run ends.
    """
    document: dict[str, Any] = {
        "model": {
            "provider": config.provider or "custom",
            "default": model or config.model or "",
            "context_length": config.context_length or DEFAULT_CONTEXT_LENGTH,
        },
        "security": {"allow_lazy_installs": False},
        "agent": {"api_max_retries": config.max_retries},
        "sessions": {"write_json_snapshots": True},  # its tool calls and turns (agentd/adapters/hermes_session.py)
    }
    if config.max_turns:  # hermes' own cap on its tool-calling turns (docs/determinism.md)
        document["agent"]["max_turns"] = config.max_turns
    if config.base_url:  # under the model gateway, the gateway's address (docs/gateway.md)
        document["model"]["base_url"] = gateway.base(config.base_url) if gateway else config.base_url
    if api_key:
        document["model"]["api_key"] = api_key
    return json.dumps(document, indent=2) + "\n"


def parse_hermes(usage_text: str | None, stdout: str) -> ParsedRun:
    """Judge by the usage file; stdout is the final text (or, on failure, the error). Total: a usage
    file that is no JSON object is a run that did not finish, and a bad number is unknown usage."""
    if usage_text is None:
        return ParsedRun(False, False, None, "hermes wrote no usage file (killed before it finished)")
    try:
        usage = json.loads(usage_text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; so is a number too long
        return ParsedRun(False, False, None, f"hermes's usage file is not JSON ({str(exc)[:200]})")
    if not isinstance(usage, dict):
        return ParsedRun(False, False, None, f"hermes's usage file is not a JSON object (a {type(usage).__name__})")
    succeeded = bool(usage.get("completed")) and not usage.get("failed")
    text = stdout.strip()
    judged, problems = _usage(usage)
    return ParsedRun(
        finished=True,
        succeeded=succeeded,
        final_message=text if succeeded else None,
        failure=None if succeeded else (text_or(usage.get("failure")) or text or "hermes reported failed"),
        usage=judged,
        model=text_or(usage.get("model")),
        diagnostics={
            "api_calls": fact(usage.get("api_calls")),
            "cost_status": fact(usage.get("cost_status")),
            "provider": fact(usage.get("provider")),
            **({"usage_problems": problems} if problems else {}),
        },
    )


def _usage(usage: dict[str, Any]) -> tuple[Usage, list[str]]:
    """The usage file's counts, and its cost unless `cost_status` says it is unknown; judged."""
    reported = {key: (usage.get(key), f"hermes usage file.{key}") for key in TOKEN_KINDS}  # named as agentd names them
    status = usage.get("cost_status")
    if status is not None and status != "unknown":
        reported["cost_usd"] = (usage.get("estimated_cost_usd"), "hermes usage file.estimated_cost_usd")
    return judge_harness_usage(reported, [], estimated=status == "estimated")
