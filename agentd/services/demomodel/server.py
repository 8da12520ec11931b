"""Routing, HTTP plumbing and the FakeModelServer itself (the probes are in probes.py)."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from agentd import frozen_value
from agentd.services.demomodel.common import (
    _JOIN_TIMEOUT_S,
    _POLL_INTERVAL_S,
    DEFAULT_CONTEXT_LENGTH,
    HOST,
    NO_TURN_LEFT,
    Fail,
    Hang,
    RecordedRequest,
    Reply,
    ToolCall,
    Turn,
    _Call,
    _reset_headers,
    _Scripted,
)
from agentd.services.demomodel.encoders import (
    _Anthropic,
    _ChatCompletions,
    _Encoder,
    _OllamaChat,
    _OllamaGenerate,
    _Responses,
)
from agentd.services.demomodel.probes import (
    _count_tokens,
    _models_list,
    _ollama_show,
    _ollama_tags,
    _ollama_version,
    _Probe,
)


@frozen_value
class _Route:
    method: str
    protocol: str
    encoder: _Encoder | None = None
    probe: _Probe | None = None


def _build_routes() -> dict[str, _Route]:
    anthropic, responses, chat = _Anthropic(), _Responses(), _ChatCompletions()
    routes = {
        "/v1/messages": _Route("POST", anthropic.protocol, encoder=anthropic),
        "/v1/messages/count_tokens": _Route("POST", "anthropic.count_tokens", probe=_count_tokens),
        "/api/generate": _Route("POST", _OllamaGenerate.protocol, encoder=_OllamaGenerate()),
        "/api/chat": _Route("POST", _OllamaChat.protocol, encoder=_OllamaChat()),
        "/api/tags": _Route("GET", "ollama.tags", probe=_ollama_tags),
        "/api/show": _Route("POST", "ollama.show", probe=_ollama_show),
        "/api/version": _Route("GET", "ollama.version", probe=_ollama_version),
    }
    for prefix in ("/v1", "/api/v1"):
        routes[f"{prefix}/responses"] = _Route("POST", responses.protocol, encoder=responses)
        routes[f"{prefix}/chat/completions"] = _Route("POST", chat.protocol, encoder=chat)
        routes[f"{prefix}/models"] = _Route("GET", "models", probe=_models_list)
    return routes


_ROUTES = _build_routes()


# --------------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------------


def _decode_body(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers, body and each event go out at once, not after a delayed ACK
    server: _HTTPServer

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def do_HEAD(self) -> None:
        """A connection warm-up (Claude Code sends ``HEAD /`` first): recorded as ``head``, answered 200, no body."""
        url = urlsplit(self.path)
        headers = {name.lower(): value for name, value in self.headers.items()}
        path = url.path.rstrip("/") or "/"
        request = RecordedRequest(self.command, path, headers, _decode_body(self._read_body()), "head", url.query)
        self.server.fake._admit(request, consume=False)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request log is `FakeModelServer.requests`."""

    # -- requests --

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked_body()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _read_chunked_body(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int(self.rfile.readline(65537).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    def _dispatch(self) -> None:
        fake = self.server.fake
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        body = _decode_body(self._read_body())
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = RecordedRequest(self.command, path, headers, body, "unknown", url.query)
        route = _ROUTES.get(path)
        if route is None or route.method != self.command:
            fake._admit(request, consume=False)
            status = 404 if route is None else 405
            message = f"fake model: no route for {self.command} {path}"
            kind = "not_found_error" if status == 404 else "invalid_request_error"
            self._send_json(status, {"type": "error", "error": {"type": kind, "message": message}})
        elif route.probe is not None:
            fake._admit(replace(request, protocol=route.protocol), consume=False)
            self._send_json(200, route.probe(fake, body))
        else:
            assert route.encoder is not None
            self._model_call(route.encoder, replace(request, protocol=route.protocol))

    def _model_call(self, encoder: _Encoder, request: RecordedRequest) -> None:
        fake = self.server.fake
        body = request.body
        if not isinstance(body, dict):
            fake._admit(request, consume=False)
            self._send_error(encoder, 400, "fake model: the request body is not a JSON object")
            return
        turn = fake._admit(request, consume=True)
        model = body.get("model")
        call = _Call(
            model=model if isinstance(model, str) and model else fake.models[0],
            body=body,
            chunk_size=fake.chunk_size,
            stream=encoder.wants_stream(body),
        )
        if turn is None:
            self._send_error(encoder, 500, NO_TURN_LEFT)
        elif isinstance(turn, Fail):
            self._send_error(encoder, turn.status, turn.message, turn)
        elif isinstance(turn, Hang):
            self._hang(encoder, call, turn)
        elif isinstance(turn, ToolCall) and not encoder.supports_tools:
            self._send_error(encoder, 500, f"fake model: a ToolCall turn cannot be answered on {request.path}")
        elif call.stream:
            self._send_stream(encoder.media_type, encoder.stream(turn, call))
        else:
            self._send_json(200, encoder.complete(turn, call))

    # -- responses --

    def _send_json(self, status: int, payload: Any, extra_headers: Iterable[tuple[str, str]] = ()) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in extra_headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_error(self, encoder: _Encoder, status: int, message: str, fail: Fail | None = None) -> None:
        extra = _reset_headers(fail) if status == 429 else []
        self._send_json(status, encoder.error(status, message), extra)

    def _start_stream(self, media_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", media_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _send_stream(self, media_type: str, frames: Iterable[bytes]) -> None:
        self._start_stream(media_type)
        for frame in frames:
            self._write_chunk(frame)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _hang(self, encoder: _Encoder, call: _Call, hang: Hang) -> None:
        self.close_connection = True
        if hang.after_headers and call.stream:
            self._start_stream(encoder.media_type)
            self._write_chunk(encoder.opening(call))
        elif hang.after_headers:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.flush()
        self.server.fake._stopping.wait()


class _HTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that tracks its handler threads and connections so that stop() can end them all."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 512  # socketserver's 5 resets most of 200 connections opened at once

    def __init__(self, fake: FakeModelServer, port: int) -> None:
        self.fake = fake
        self._tracking_lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._handler_threads: list[threading.Thread] = []
        super().__init__((HOST, port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name=f"fakemodel-handler-{client_address[1]}",
            daemon=True,
        )
        with self._tracking_lock:
            self._connections.add(request)
            self._handler_threads = [alive for alive in self._handler_threads if alive.is_alive()]
            self._handler_threads.append(thread)
        thread.start()

    def shutdown_request(self, request: Any) -> None:
        with self._tracking_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError) or (self.fake._stopping.is_set() and isinstance(error, OSError)):
            return  # the client went away (a timeout in the test), or stop() cut the connection
        super().handle_error(request, client_address)

    def disconnect_all(self) -> None:
        """Wake handlers blocked reading an idle keep-alive connection."""
        with self._tracking_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def join_handlers(self, timeout: float) -> list[threading.Thread]:
        """Join every handler thread within `timeout` overall; return those still alive."""
        deadline = time.monotonic() + timeout
        with self._tracking_lock:
            threads = list(self._handler_threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [thread for thread in threads if thread.is_alive()]


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


class FakeModelServer:
    """A scripted model server on 127.0.0.1 (a free port), serving from a daemon thread while started.

    >>> with FakeModelServer(turns=[Reply("hi")]) as server:  # doctest: +SKIP
    ...     httpx.post(f"{server.url}/api/generate", json={"model": "m", "stream": False}).json()["response"]
    'hi'
    """

    def __init__(
        self,
        turns: Iterable[Turn] = (),
        default: Turn | None = None,
        *,
        respond: Callable[[RecordedRequest], Turn] | None = None,
        models: Iterable[str] = ("fake-model",),
        chunk_size: int = 3,
        context_length: int = DEFAULT_CONTEXT_LENGTH,
        port: int = 0,
        history: int | None = None,
    ) -> None:
        self.models = tuple(models)
        if not self.models:
            raise ValueError("models must name at least one model")
        if chunk_size < 1:
            raise ValueError(f"chunk_size is words per delta and must be at least 1, got {chunk_size}")
        self.default = default
        self.respond = respond
        self.chunk_size = chunk_size
        self.context_length = context_length
        self._port = port  # 0: a free one the OS picks (tests always; `agentd demo-model` unless --port)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._script: deque[_Scripted] = deque()
        self._requests: deque[RecordedRequest] = deque(maxlen=history)  # None: all (tests read them)
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._serve_thread: threading.Thread | None = None
        self.script(*turns)

    # -- scripting --

    def script(self, *turns: Turn) -> None:
        """Queue more turns after those already queued."""
        for turn in turns:
            if not isinstance(turn, Reply | ToolCall | Fail | Hang):
                raise TypeError(f"not a turn: {turn!r}")
        with self._lock:
            for turn in turns:
                self._script.append(_Scripted(turn, turn.times if isinstance(turn, Fail) else 1))

    @property
    def turns_left(self) -> int:
        """Model calls the queue can still answer (a `Fail` counts `times`), not counting the default."""
        with self._lock:
            return sum(entry.remaining for entry in self._script)

    def _admit(self, request: RecordedRequest, *, consume: bool) -> Turn | None:
        """Record a request and, for a model call, take its turn, in one step so the log follows turn order."""
        with self._changed:
            turn = self._take_turn(request) if consume else None
            self._requests.append(replace(request, turn=turn))
            self._changed.notify_all()
            return turn

    def _take_turn(self, request: RecordedRequest) -> Turn | None:
        if not self._script:
            return self.respond(request) if self.respond is not None else self.default
        head = self._script[0]
        head.remaining -= 1
        if head.remaining == 0:
            self._script.popleft()
        return head.turn

    # -- observing --

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least `n` requests have arrived; return them all. Raises TimeoutError otherwise."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._requests) >= n, timeout):
                raise TimeoutError(f"fake model: {len(self._requests)} of {n} requests arrived within {timeout} s")
            return list(self._requests)

    # -- lifecycle --

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the fake model server is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> FakeModelServer:
        if self._httpd is not None:
            raise RuntimeError("a FakeModelServer starts only once")
        self._httpd = _HTTPServer(self, self._port)
        self._serve_thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": _POLL_INTERVAL_S},
            name="fakemodel-serve",
            daemon=True,
        )
        self._serve_thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, release hung handlers, cut open connections and join every thread. Idempotent."""
        httpd, serve_thread = self._httpd, self._serve_thread
        if httpd is None or serve_thread is None or self._stopping.is_set():
            return
        self._stopping.set()
        httpd.shutdown()
        serve_thread.join()
        httpd.disconnect_all()
        stuck = httpd.join_handlers(_JOIN_TIMEOUT_S)
        httpd.server_close()
        if stuck:
            names = ", ".join(thread.name for thread in stuck)
            raise RuntimeError(f"fake model: handler threads still running after stop: {names}")

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
