"""The gateway itself (docs/gateway.md): an asyncio HTTP/1.1 server the dispatcher runs, in front of the model
providers. A harness sends its calls here with the token agentd gave its attempt where an API key goes; the
gateway asks the caller's hooks, swaps the token for the route's real key, forwards the call, streams the
answer back as it comes, and records what the call cost by the provider's own answer.

Fail closed: no call is forwarded without an admitted token (401, the upstream never asked), a hook that
fails refuses the call, an upstream that fails is a 502 (or, once the answer has begun, an answer cut
short), and the key is never in a log line, an error or a record.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
from typing import Any

import anyio
import h11

from agentd.clock import Clock
from agentd.errors import contained
from agentd.gateway.calls import (
    EMPTY_BODY,
    KEEP_BYTES,
    AmbiguousBody,
    CallRecord,
    CallRequest,
    Hooks,
    Keeper,
    Route,
    Verdict,
    call_request,
    error_body,
)
from agentd.gateway.resets import limited, reset_time
from agentd.gateway.upstream import Answer, Upstream, UpstreamError, origin_of
from agentd.gateway.usage import Metered, UsageReader, framing_of, protocol_of
from agentd.gateway.wire import (
    IDLE_S,
    MAX_REQUEST_BYTES,
    Harness,
    Incoming,
    Refused,
    answer_headers,
    tokens_in,
    upstream_headers,
)
from agentd.hashing import new_ulid
from agentd.redaction import MARK
from agentd.usage import Usage

logger = logging.getLogger(__name__)

AFTER_WITHIN_S = 10.0  # the caller's `after`, run even as the gateway stops, is given this long
REFUSED_LOG_EVERY_S = 60.0  # unknown tokens: one log line a minute, with the count


class Admission:
    """One admitted token: where its calls go, whose hooks judge them, and its calls under way."""

    def __init__(self, route: Route, hooks: Hooks) -> None:
        self.route, self.hooks = route, hooks
        self.live: dict[anyio.CancelScope, Exchange] = {}


class Exchange:
    """One call while it runs: what becomes its record."""

    def __init__(self, call: CallRequest, request: bytes, keep_bytes: int) -> None:
        self.call = call
        self.request = request
        self.status: int | None = None
        self.forwarded = False
        self.first_byte: float | None = None
        self.response = Keeper(keep_bytes)
        self.reader: UsageReader | None = None
        self.headers: list[tuple[str, str]] = []
        self.cut = False
        self.error: str | None = None

    def fail(self, error: str, cut: bool = False) -> None:
        """The first failure is the one recorded."""
        if self.error is None:
            self.error, self.cut = error, self.cut or cut


class Gateway:
    """Admit tokens (`admit`, `revoke`) and serve their calls on the listening sockets given (`serve`)."""

    def __init__(
        self,
        clock: Clock,
        *,
        upstream: Upstream | None = None,
        keep_bytes: int = KEEP_BYTES,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        idle_s: float = IDLE_S,
    ) -> None:
        self.clock = clock
        self.keep_bytes, self.max_request_bytes, self.idle_s = keep_bytes, max_request_bytes, idle_s
        self.upstream = upstream or Upstream()
        self._admitted: dict[bytes, Admission] = {}
        self.calls_open = 0
        self.refused = 0
        self._refused_logged_at = -REFUSED_LOG_EVERY_S
        self._refused_since_log = 0

    # -- tokens ------------------------------------------------------------------------------------

    def admit(self, token: str, route: Route, hooks: Hooks) -> None:
        """From now on, calls carrying `token` go to `route`, judged by `hooks`."""
        if len(token) < 16:
            raise ValueError("a gateway token has at least 16 characters")
        self._admitted[_digest(token)] = Admission(route, hooks)

    def revoke(self, token: str) -> None:
        """From now on, `token` is refused; its calls under way are cut (their records say so)."""
        admission = self._admitted.pop(_digest(token), None)
        for scope, exchange in list(admission.live.items()) if admission else ():
            exchange.fail("the token was revoked while the call was under way", cut=True)
            scope.cancel()

    def _admission(self, tokens: set[str]) -> Admission | None:
        """The one admission the request's tokens name (None: none, or two different ones)."""
        found = {id(a): a for token in tokens if (a := self._admitted.get(_digest(token))) is not None}
        return next(iter(found.values())) if len(found) == 1 else None

    # -- serving -----------------------------------------------------------------------------------

    async def serve(self, listener: socket.socket) -> None:
        """Serve the connections `listener` accepts until cancelled (the caller closes the listener)."""
        listener.setblocking(False)
        accept = asyncio.get_running_loop().sock_accept
        async with anyio.create_task_group() as connections:
            while True:
                sock, _ = await accept(listener)
                connections.start_soon(self._connection, sock)

    async def aclose(self) -> None:
        await self.upstream.aclose()

    async def _connection(self, sock: socket.socket) -> None:
        """One harness's connection, its own boundary: whatever fails in it is logged and ends it alone."""
        with sock, contained(logger, "gateway_connection_failed"):
            harness = await Harness.accept(sock, self.idle_s)
            await self._requests(harness)

    async def _requests(self, harness: Harness) -> None:
        try:
            while True:
                try:
                    incoming = await harness.next_request(self.max_request_bytes)
                except Refused as refused:
                    await harness.answer_json(refused.status, error_body(refused.kind, str(refused)), close=True)
                    return
                if incoming is None:
                    return
                if not await self._exchange(harness, incoming):
                    return
        finally:
            await harness.close()

    async def _exchange(self, harness: Harness, incoming: Incoming) -> bool:
        """One call, answered and recorded; False when its connection cannot go on."""
        started_at, started = self.clock.now(), self.clock.monotonic()
        tokens, target = tokens_in(incoming)
        admission = self._admission(tokens)
        if admission is None:
            if tokens or incoming.method != "HEAD":  # claude's connection warm-up, `HEAD /`, carries no key
                self._refuse_token(incoming.method, target)
            message = "agentd gateway: no admitted token (send the attempt's token as its API key)"
            await harness.answer_json(401, error_body("authentication_error", message))
            return True
        path = target.decode("latin-1")
        try:
            call = call_request(
                new_ulid(self.clock), protocol_of(incoming.method, path), incoming.method, path, incoming.body
            )
        except AmbiguousBody as exc:
            await harness.answer_json(400, error_body("invalid_request_error", str(exc)))
            return True
        if not path.startswith("/"):  # `*`, or a whole URL: only a path is appended to the route's origin
            await harness.answer_json(400, error_body("invalid_request_error", "the request's target is not a path"))
            return True
        exchange = Exchange(call, incoming.body, self.keep_bytes)
        try:
            await self._run(harness, admission, exchange, incoming)
        finally:
            await self._record(admission, exchange, started_at, started)
        if not harness.answered:  # begun and not ended: cut short, as any HTTP client reads it
            harness.abort()
        return harness.answered

    async def _run(self, harness: Harness, admission: Admission, exchange: Exchange, incoming: Incoming) -> None:
        """The call, within a scope that the harness hanging up, or its token revoked, cancels."""
        scope = anyio.CancelScope()
        admission.live[scope] = exchange
        self.calls_open += 1
        try:
            with scope:
                async with anyio.create_task_group() as watching:
                    watching.start_soon(self._watch, harness, scope, exchange)
                    await self._answer(harness, admission, exchange, incoming)
                    watching.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            exchange.fail("the gateway stopped while the call was under way", cut=True)
            raise
        except Exception as exc:  # a bug (ours, or a hook's): the call fails, its record says so, and it goes on up
            first = _first(exc)
            exchange.fail(
                scrubbed(f"the gateway failed: {type(first).__name__}: {first}", admission.route.key), cut=True
            )
            raise
        finally:
            admission.live.pop(scope, None)
            self.calls_open -= 1

    async def _watch(self, harness: Harness, scope: anyio.CancelScope, exchange: Exchange) -> None:
        await harness.hung_up()
        if not harness.answered:  # (it may close as soon as it has read the last byte)
            exchange.fail("the harness closed its connection before the answer ended")
            scope.cancel()

    async def _answer(self, harness: Harness, admission: Admission, exchange: Exchange, incoming: Incoming) -> None:
        verdict = await self._verdict(admission, exchange)
        if not verdict.forwards:
            assert verdict.status is not None
            exchange.status = verdict.status
            await harness.answer_json(verdict.status, verdict.body or {}, verdict.headers)
            return
        route = admission.route
        headers = upstream_headers(incoming.headers, route)
        exchange.forwarded = True
        try:
            answer = await self.upstream.send(
                origin_of(route.upstream), incoming.method, exchange.call.path, headers, incoming.body
            )
        except UpstreamError as exc:
            await self._upstream_failed(harness, exchange, route, exc)
            return
        try:
            await self._relay(harness, admission, exchange, answer)
        except UpstreamError as exc:
            exchange.fail(scrubbed(f"the upstream failed mid-answer: {exc}", route.key), cut=True)
        except h11.LocalProtocolError as exc:  # more bytes than its content-length said, say
            exchange.fail(scrubbed(f"the upstream's answer broke HTTP/1.1 framing: {exc}", route.key), cut=True)
        except (ConnectionError, OSError):
            exchange.fail("the harness's connection failed before the answer ended")
        finally:
            answer.close()

    async def _verdict(self, admission: Admission, exchange: Exchange) -> Verdict:
        """The hook's verdict; a hook that fails refuses the call (fail closed)."""
        try:
            return await admission.hooks.before(exchange.call)
        except Exception as exc:
            logger.error("gateway_hook_failed hook=before path=%s: %s: %s", exchange.call.path, type(exc).__name__, exc)
            return Verdict(503, error_body("api_error", "agentd gateway: this call could not be judged"))

    async def _upstream_failed(self, harness: Harness, exchange: Exchange, route: Route, exc: UpstreamError) -> None:
        error = scrubbed(f"the upstream failed: {exc}", route.key)
        logger.warning("gateway_upstream_failed path=%s %s", exchange.call.path, error)
        exchange.status = 502
        await harness.answer_json(502, error_body("api_error", f"agentd gateway: {error}"))
        exchange.error = error

    async def _relay(self, harness: Harness, admission: Admission, exchange: Exchange, answer: Answer) -> None:
        """The answer, passed to the harness as it arrives; each piece hashed, kept (bounded) and read."""
        call, hooks = exchange.call, admission.hooks
        exchange.status = answer.status
        exchange.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in answer.headers]
        if call.api is not None:
            media = next((v.decode("latin-1") for k, v in answer.headers if k == b"content-type"), None)
            exchange.reader = UsageReader(call.api, framing_of(call.api, media))
        reader, estimate = exchange.reader, 0
        await harness.send_head(answer.status, answer_headers(answer.headers), answer.reason)
        async for piece in answer.pieces(before_waiting=harness.flush):
            if exchange.first_byte is None:
                exchange.first_byte = self.clock.monotonic()
            exchange.response.update(piece)
            if reader is not None:
                reader.feed(piece)
                if reader.output_estimate != estimate:
                    estimate = reader.output_estimate
                    if not self._go_on(hooks, call, estimate):
                        exchange.fail("cut: the output passed what the caller allows", cut=True)
                        return
            await harness.send(piece)
        await harness.end()

    @staticmethod
    def _go_on(hooks: Hooks, call: CallRequest, estimate: int) -> bool:
        try:
            return hooks.on_progress(call, estimate) is True
        except Exception as exc:  # a hook that fails cuts the stream: fail closed
            logger.error("gateway_hook_failed hook=on_progress path=%s: %s: %s", call.path, type(exc).__name__, exc)
            return False

    async def _record(self, admission: Admission, exchange: Exchange, started_at: Any, started: float) -> None:
        """The call's record, handed to the caller's `after` (even as the gateway stops, within a bound)."""
        route, now = admission.route, self.clock.monotonic()
        metered = exchange.reader.finish() if exchange.reader is not None else Metered(Usage())
        reset = None
        if exchange.status is not None and exchange.forwarded and limited(exchange.status, exchange.response.head()):
            reset = reset_time(exchange.headers, self.clock.now())
        request = Keeper(self.keep_bytes)
        request.update(exchange.request)
        record = CallRecord(
            call=exchange.call,
            status=exchange.status,
            forwarded=exchange.forwarded,
            started_at=started_at,
            latency_ms=(now - started) * 1000,
            first_byte_ms=None if exchange.first_byte is None else (exchange.first_byte - started) * 1000,
            metered=metered,
            reset_at=reset,
            request=request.body(route.redactor, route.key) if exchange.request else EMPTY_BODY,
            response=exchange.response.body(route.redactor, route.key),
            cut=exchange.cut,
            error=exchange.error,
        )
        logger.debug("gateway_call api=%s status=%s ms=%.1f", exchange.call.api, exchange.status, record.latency_ms)
        with anyio.move_on_after(AFTER_WITHIN_S, shield=True):
            try:
                await admission.hooks.after(record)
            except Exception as exc:
                logger.error(
                    "gateway_hook_failed hook=after path=%s: %s: %s", exchange.call.path, type(exc).__name__, exc
                )

    def _refuse_token(self, method: str, target: bytes) -> None:
        """An unknown or revoked token: counted, and said once a minute (never the token itself)."""
        self.refused += 1
        self._refused_since_log += 1
        now = self.clock.monotonic()
        if now - self._refused_logged_at >= REFUSED_LOG_EVERY_S:
            path = target.split(b"?", 1)[0][:200].decode("latin-1")
            logger.warning(
                "gateway_refused count=%d last=%s %s: no admitted token", self._refused_since_log, method, path
            )
            self._refused_logged_at, self._refused_since_log = now, 0


def _first(exc: BaseException) -> BaseException:
    """The first exception a task group's group holds (the one that ended it)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _digest(token: str) -> bytes:
    """Tokens are looked up by their sha256: the table never holds them, and a lookup's time says nothing."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def scrubbed(text: str, key: str) -> str:
    return text.replace(key, MARK) if len(key) >= 6 else text
