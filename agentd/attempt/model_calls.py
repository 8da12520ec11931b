"""An attempt's model calls through agentd's gateway (docs/gateway.md): the budget before each call, the usage the
provider's answer reported after it, the call's evidence, and what a provider's rate limit ends.

`ModelCalls` is what the gateway (agentd/gateway/server.py) asks about each call of the attempt's token:

- **before**: the call's worst case (its input, as its body's size says, and its `max_tokens`, at the model's
  price) against what is left of the attempt's cap. Past it, the profile's `on_budget` decides: `stop` refuses
  the call (the upstream never sees it) and ends the attempt `budget_exceeded`; `ask` holds it for a person
  ("budget reached: $X spent, allow up to $Y more?"), whose allow raises the cap once by $Y.
- **while it streams**: an answer whose output crosses the cap is cut.
- **after**: the usage the answer reported is the attempt's (the harness's own report is kept beside it, never
  trusted over it); the call is a `model_call_finished` event and a line of model_calls.jsonl in the evidence
  (its bodies redacted, bounded); a 429 ends the attempt `rate_limited` with the provider's reset, if it said one.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import anyio

from agentd.adapters.harness import estimate_cost
from agentd.adapters.routes import key_digest
from agentd.attempt.calls import decision_on
from agentd.attempt.meter import Cap
from agentd.attempt.prepare import Prepared
from agentd.clock import Clock, format_ts
from agentd.gateway.calls import GO, CallRecord, CallRequest, Verdict, refusal
from agentd.hashing import sha256_hex
from agentd.process.timer import RunTimer
from agentd.process.wake import Doorbell
from agentd.records import TokenPrice
from agentd.store import AsyncStore, Store
from agentd.usage import TOKEN_KINDS, Usage

logger = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4  # a request body's tokens, for its worst case before it is sent (the answer says the real count)
DEFAULT_MAX_OUTPUT = 8192  # a call that names no max_tokens: the worst case of its answer
MAX_EVENTS = 1000  # model_call_finished events per attempt; the rest are counted in the last
EVIDENCE_MAX_BYTES = 64 * 1024 * 1024  # model_calls.jsonl: past it, a call's line keeps its digests, not its bodies
DECISION_POLL_S = 1.0
BUDGET_STOP = "budget"  # RunTimer.end's word, as the meter's (agentd/attempt/meter.py)
RATE_LIMITED = "rate_limited"


@dataclass
class Spent:
    """What the attempt's calls cost so far, by the providers' own answers."""

    counts: dict[str, int] = field(default_factory=dict)
    unknown: bool = False  # a call answered without usage: the figure is a floor

    def add(self, usage: Usage) -> None:
        for kind in TOKEN_KINDS:
            value = getattr(usage, kind)
            if isinstance(value, int):
                self.counts[kind] = self.counts.get(kind, 0) + value

    def usage(self) -> Usage:
        get = self.counts.get
        return Usage(get("input_tokens"), get("output_tokens"), get("cache_read_tokens"), get("cache_write_tokens"))


def priced(usage: Usage, api: str | None) -> Usage:
    """`usage` as agentd prices it: input counting its cached tokens (Anthropic's answers leave them out)."""
    if api != "anthropic" or usage.input_tokens is None:
        return usage
    cached = (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)
    return Usage(usage.input_tokens + cached, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)


class ModelCalls:
    def __init__(
        self,
        prepared: Prepared,
        db: AsyncStore,
        clock: Clock,
        doorbell: Doorbell,
        *,
        cap: Cap | None,
        price: TokenPrice | None,
        on_budget: str,
        ask_timeout_s: float,
    ) -> None:
        self.prepared, self.db, self.clock, self.doorbell = prepared, db, clock, doorbell
        self.cap, self.price, self.on_budget, self.ask_timeout_s = cap, price, on_budget, ask_timeout_s
        self.timer: RunTimer = prepared.ctx.timer
        self.spent = Spent()
        self.raised_usd = 0.0  # what people allowed past the cap
        self.calls = 0
        self.events = 0
        self.stopped: dict[str, Any] | None = None  # the budget's stop, for the diagnostics
        self.rate_limit: dict[str, Any] | None = None  # the provider's 429, for the diagnostics and the judge
        self.cut = 0
        self.evidence_bytes = 0

    # --- the gateway's hooks ------------------------------------------------------------------------

    async def before(self, call: CallRequest) -> Verdict:
        if call.api is None:
            return GO  # not a model call (a model list, a health probe): nothing to meter
        if self.stopped is not None or self.rate_limit is not None:
            return refusal(429 if self.rate_limit else 402, "this attempt is ending: " + self._ending())
        worst = self._cost(self._worst(call))
        if worst is None or self.cap is None or self._spent_usd() + worst <= self._cap_usd():
            return GO
        if self.on_budget == "ask" and await self._asked(worst):
            return GO
        self._stop(f"the call's worst case (${worst:.4f}) would pass {self.cap.which}")
        return refusal(402, f"budget exceeded: {self.stopped and self.stopped['why']}", "budget_exceeded")

    def on_progress(self, call: CallRequest, output_tokens: int) -> bool:
        """An answer streaming past the cap is cut (the gateway ends it; the record says `cut`)."""
        if self.cap is None or self.price is None:
            return True
        so_far = self._cost(Usage(0, output_tokens))
        return so_far is None or self._spent_usd() + so_far <= self._cap_usd()

    async def after(self, record: CallRecord) -> None:
        self.calls += 1
        usage = priced(record.metered.usage, record.call.api)
        self.spent.add(usage)
        self.spent.unknown = self.spent.unknown or (record.forwarded and not record.metered.reported)
        self.cut += record.cut
        await anyio.to_thread.run_sync(self._keep, record, usage)
        await self._event(record, usage)
        if record.status == 429 and record.reset_at is not None and record.reset_at > self.clock.now():
            self._rate_limited(record)  # a 429 that names no wait (`retry-after: 0`) is the harness's to retry
        elif record.cut and self.cap is not None and self._spent_usd() > self._cap_usd():
            self._stop("an answer streamed past the cap and was cut")

    # --- what the attempt's end reads -----------------------------------------------------------------

    def usage(self) -> Usage:
        """The attempt's usage by the providers' answers, priced at the adapter's prices when it has them."""
        return estimate_cost(self.spent.usage(), self.price)

    def findings(self) -> dict[str, Any]:
        found: dict[str, Any] = {"model_calls": self.calls, "usage_source": "gateway"}
        if self.spent.unknown:
            found["usage_unknown_calls"] = True
        if self.cut:
            found["model_calls_cut"] = self.cut
        if self.raised_usd:
            found["budget_raised_usd"] = round(self.raised_usd, 6)
        if self.stopped is not None:
            found["budget_stop"] = self.stopped
        if self.rate_limit is not None:
            found["rate_limit"] = self.rate_limit
        return found

    # --- the budget --------------------------------------------------------------------------------------

    def _worst(self, call: CallRequest) -> Usage:
        return Usage(call.body_bytes // CHARS_PER_TOKEN, call.max_output_tokens or DEFAULT_MAX_OUTPUT)

    def _cost(self, usage: Usage) -> float | None:
        return estimate_cost(usage, self.price).cost_usd if self.price is not None else None

    def _spent_usd(self) -> float:
        return self._cost(self.spent.usage()) or 0.0

    def _cap_usd(self) -> float:
        return (self.cap.usd if self.cap is not None else 0.0) + self.raised_usd

    def _stop(self, why: str) -> None:
        assert self.cap is not None
        spent = self.usage()
        self.stopped = {
            "cap_usd": round(self._cap_usd(), 6),
            "cap": self.cap.which,
            "per_attempt": self.cap.per_attempt,
            "by": "agentd's gateway, before the call",
            "why": why,
            "spent_usd": spent.cost_usd or 0.0,
            "input_tokens": spent.input_tokens or 0,
            "output_tokens": spent.output_tokens or 0,
        }
        self.timer.end(BUDGET_STOP)

    async def _asked(self, worst: float) -> bool:
        """A person decides whether the attempt may spend more: held as a tool call is (docs/policy.md), the
        attempt's clock paused while it waits; allowed, the cap goes up once by the attempt's own cap (or the
        call's worst case, if that is more)."""
        assert self.cap is not None
        more = max(self.cap.usd, worst)
        summary = f"budget reached: ${self._spent_usd():.4f} spent, allow up to ${more:.4f} more?"
        said = {"spent_usd": round(self._spent_usd(), 6), "cap_usd": round(self._cap_usd(), 6), "more_usd": more}
        text = json.dumps(said, sort_keys=True, separators=(",", ":"))
        payload = {
            "tool": "model",
            "summary": summary,
            "rule": f"budget: {self.cap.which} (profile on_budget = 'ask')",
            "input_json": text,
            "input_chars": len(text),
            "input_sha256": sha256_hex(text.encode()),
        }
        task_id, attempt_id = self.prepared.task.task_id, self.prepared.attempt_id
        call_id = await self.db.call(Store.hold_call, task_id, attempt_id, payload, self.clock.now())
        self.timer.hold()
        try:
            held = await self._decision(call_id)
        finally:
            self.timer.release()
        if held.status == "allowed":
            self.raised_usd += more
            return True
        return False

    async def _decision(self, call_id: str) -> Any:
        late = f"no one decided within [policy] ask_timeout_s = {self.ask_timeout_s:g}s"
        return await decision_on(self.db, self.doorbell, self.clock, call_id, self.ask_timeout_s, late)

    # --- rate limits ---------------------------------------------------------------------------------

    def _rate_limited(self, record: CallRecord) -> None:
        """The provider turned the attempt away: it ends now, free, and runs again at the provider's reset."""
        route = self.prepared.routed.route if self.prepared.routed else None
        self.rate_limit = {
            "status": record.status,
            **({"credential": key_digest(route.upstream, route.key)} if route and route.key else {}),
            "reset_at": format_ts(record.reset_at) if record.reset_at else None,
            "reason": f"{record.status} from the provider ({record.call.api or 'a call'}, "
            f"{record.call.model or 'no model'})",
        }
        self.timer.end(RATE_LIMITED)  # with its grace: the harness writes its session down; no call leaves meanwhile

    def _ending(self) -> str:
        if self.rate_limit is not None:
            return str(self.rate_limit["reason"])
        return str(self.stopped["why"]) if self.stopped else "its budget is spent"

    # --- evidence ------------------------------------------------------------------------------------

    async def _event(self, record: CallRecord, usage: Usage) -> None:
        if self.events >= MAX_EVENTS:
            return
        self.events += 1
        payload = {
            "n": self.calls,
            "api": record.call.api,
            "model": record.metered.model or record.call.model,
            "status": record.status,
            "forwarded": record.forwarded,
            "stream": record.call.stream,
            "latency_ms": round(record.latency_ms, 1),
            **({"first_byte_ms": round(record.first_byte_ms, 1)} if record.first_byte_ms is not None else {}),
            **{kind: getattr(usage, kind) for kind in TOKEN_KINDS if getattr(usage, kind) is not None},
            "request_sha256": record.request.sha256,
            "response_sha256": record.response.sha256,
            **({"cut": True} if record.cut else {}),
            **({"error": record.error[:500]} if record.error else {}),
            **({"reset_at": format_ts(record.reset_at)} if record.reset_at else {}),
        }
        task_id, attempt_id = self.prepared.task.task_id, self.prepared.attempt_id
        await self.db.call(Store.record_model_call, task_id, attempt_id, payload, self.clock.now())

    def _keep(self, record: CallRecord, usage: Usage) -> None:
        """One line of model_calls.jsonl in the attempt's evidence: the call and its bodies (redacted by the
        route), bounded per attempt (past it, the digests alone)."""
        line: dict[str, Any] = {
            "n": self.calls,
            "started_at": format_ts(record.started_at),
            "api": record.call.api,
            "path": record.call.path[:500],
            "model": record.metered.model or record.call.model,
            "status": record.status,
            "usage": {kind: getattr(usage, kind) for kind in TOKEN_KINDS},
            "cut": record.cut,
        }
        bodies = len(record.request.kept) + len(record.response.kept)
        kept = self.evidence_bytes + bodies <= EVIDENCE_MAX_BYTES
        self.evidence_bytes += bodies if kept else 0
        for side, body in (("request", record.request), ("response", record.response)):
            said: dict[str, Any] = {"sha256": body.sha256, "bytes": body.size, "whole": body.whole}
            if kept:
                said["text"] = body.kept.decode("utf-8", errors="replace")
            line[side] = said
        path = self.prepared.ctx.paths.model_calls
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(line, sort_keys=True) + "\n")
