"""ollama-generate: POST /api/generate to the adapter's endpoint (seed 000 §2; reference §4).

No subprocess: httpx streams the NDJSON answer into the attempt's stdout.log as it arrives,
under the adapter's timeout_ms. The final text is the concatenated `response`; tokens are
`prompt_eval_count` and `eval_count`. A refused connection, an HTTP error or a malformed line
is a failure with its reason (429: rate limited).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anyio

from agentd.adapters.base import AdapterRun, AttemptContext, OnStarted, output_tail_bytes
from agentd.adapters.denials import text_of
from agentd.adapters.harness import fact, judge_harness_usage, text_or
from agentd.process.http import client as http_client
from agentd.process.output import CappedFile
from agentd.records import OllamaGenerateAdapterConfig as OllamaConfig


@dataclass
class Stream:
    """An answer as it streams in: its texts, its `done` record, and what ended it early."""

    texts: list[str] = field(default_factory=list)
    final: dict[str, Any] | None = None
    failure: str | None = None
    status: int | None = None
    lines: int = 0


class OllamaGenerateAdapter:
    kind = "ollama-generate"

    async def execute(self, ctx: AttemptContext, on_started: OnStarted) -> AdapterRun:
        config = ctx.adapter
        assert isinstance(config, OllamaConfig)
        model = ctx.model or config.model
        body = {"model": model, "prompt": ctx.bundle_text, "stream": True}
        ctx.paths.stdin.write_text(json.dumps({**body, "prompt": "<prompt.md>"}) + "\n", encoding="utf-8")
        await on_started(None)
        cap = ctx.output_cap_bytes
        sink, stream = CappedFile(ctx.paths.stdout, cap, output_tail_bytes(cap)), Stream()
        started = anyio.current_time()
        try:
            with anyio.move_on_after(ctx.timeout_s) as deadline:
                await _generate(config.endpoint.rstrip("/") + "/api/generate", body, ctx.timeout_s, sink, stream)
        finally:  # no await here: closing the evidence cannot be interrupted
            sink.close()
            ctx.paths.stderr.write_text(stream.failure or "", encoding="utf-8")
        if deadline.cancelled_caught:
            stream.failure = f"no complete answer from {config.endpoint} within {ctx.timeout_s:g}s"
        return stream_run(stream, model, deadline.cancelled_caught, anyio.current_time() - started)


def stream_run(stream: Stream, model: str | None, timed_out: bool, elapsed_s: float) -> AdapterRun:
    """What the answer streamed so far says: the text, the `done` record's counts (judged), the model."""
    ok = stream.failure is None and stream.final is not None
    final = stream.final or {}
    usage, problems = judge_harness_usage(
        {
            "input_tokens": (final.get("prompt_eval_count"), "ollama done record.prompt_eval_count"),
            "output_tokens": (final.get("eval_count"), "ollama done record.eval_count"),
        },
        [],
    )
    return AdapterRun(
        exit_status="timeout" if timed_out else ("ok" if ok else "error"),
        ok=ok,
        failure=None if ok else (stream.failure or "the stream ended without a done record"),
        final_message="".join(stream.texts) if ok else None,
        rate_limited=stream.status == 429,
        usage=usage,
        model=text_or(final.get("model"), model),
        diagnostics={
            "http_status": stream.status,
            "lines": stream.lines,
            "elapsed_s": round(elapsed_s, 3),
            "done_reason": fact(final.get("done_reason")),
            **({"usage_problems": problems} if problems else {}),
        },
    )


async def _generate(url: str, body: dict[str, Any], timeout_s: float, sink: CappedFile, stream: Stream) -> None:
    import httpx  # only an attempt that sends loads it (agentd/process/http.py)

    try:
        client = http_client(httpx.Timeout(timeout_s))
        async with client, client.stream("POST", url, json=body) as response:
            stream.status = response.status_code
            if response.status_code >= 400:
                text = (await response.aread()).decode("utf-8", errors="replace")
                sink.write(text.encode())
                stream.failure = f"HTTP {response.status_code}: {_error_text(text)}"
                return
            async for line in response.aiter_lines():
                sink.write(line.encode() + b"\n")
                if line.strip() and not take_line(line, stream):
                    return
    except httpx.ConnectError as exc:
        stream.failure = f"cannot connect to {url}: {exc}"
    except httpx.HTTPError as exc:
        stream.failure = f"{type(exc).__name__} talking to {url}: {exc}"


def take_line(line: str, stream: Stream) -> bool:
    """One NDJSON line; False ends the stream (an error or a line that is no JSON object). Total:
    whatever the line holds, it says what it could not use, never raises."""
    stream.lines += 1
    try:
        chunk = json.loads(line)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError; so is a number too long
        stream.failure = f"malformed line {stream.lines} from ollama: {line[:200]!r}"
        return False
    if not isinstance(chunk, dict) or "error" in chunk:
        error = chunk.get("error") if isinstance(chunk, dict) else chunk
        stream.failure = f"ollama error: {text_of(error)[:300]}"
        return False
    response = chunk.get("response", "")
    stream.texts.append(response if isinstance(response, str) else "")
    if chunk.get("done"):
        stream.final = chunk
    return True


def _error_text(text: str) -> str:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text.strip()[:300]
    return text_of(value.get("error", value))[:300] if isinstance(value, dict) else text[:300]
