"""A webhook receiver on 127.0.0.1 (port 0) that answers with whatever bytes a test scripts: a huge or
endless body, a trickle, a reset, HTTP/0.9 garbage, silence. It counts the bytes it managed to send,
so a test can bound what the sender read. Used by tests/test_delivery_answers.py and tests/chaos.py."""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from support import serve_in_thread

WRITE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Answer:
    """What the receiver sends back, as bytes on the wire."""

    head: bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"  # status line and header fields, as is
    body: bytes = b""  # sent right after the head
    filler: int = 0  # then this many bytes of b"x" in WRITE_BYTES writes, until the sender hangs up
    pause_s: float = 0.0  # between filler writes (a trickle) and between the head's bytes when trickle_head
    trickle_head: bool = False  # the head one byte at a time
    silent: bool = False  # read the request, never answer
    reset: bool = False  # end with a TCP reset instead of a close


def answer(
    status: int | bytes = 200,
    reason: bytes = b"OK",
    headers: Iterable[tuple[bytes, bytes]] = (),
    body: bytes = b"",
    *,
    length: int | None = None,
    filler: int = 0,
    chunked: bool = False,
    **how: float | bool,
) -> Answer:
    """An HTTP/1.1 answer: Content-Length is the body's (plus filler) unless `length` says otherwise;
    `chunked` sends the filler as one endless chunk instead (a body that never ends)."""
    code = status if isinstance(status, bytes) else str(status).encode()
    fields = [*headers]
    if chunked:
        fields.append((b"Transfer-Encoding", b"chunked"))
        body = b"%x\r\n" % (1 << 40) + body
    else:
        fields.append((b"Content-Length", str(len(body) + filler if length is None else length).encode()))
    head = b"HTTP/1.1 " + code + b" " + reason + b"\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in fields)
    return Answer(head=head + b"\r\n", body=body, filler=filler, **how)  # type: ignore[arg-type]


class HostileReceiver:
    """`script(n)` is the answer to the n-th request (from 0). `sent` is the bytes written per request,
    `heads` the requests' header blocks."""

    def __init__(self, script: Callable[[int], Answer] | Answer) -> None:
        self.script = script if callable(script) else (lambda _n: script)
        self.sent: list[int] = []
        self.heads: list[bytes] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = serve_in_thread(self.server)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def _handler(self) -> type[socketserver.BaseRequestHandler]:
        receiver = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                receiver.serve(self.request)

        return Handler

    def serve(self, sock: socket.socket) -> None:
        head = _read_request(sock)
        with self._lock:
            number = len(self.heads)
            self.heads.append(head)
            self.sent.append(0)
        scripted = self.script(number)
        try:
            self._answer(sock, scripted, number)
        except OSError:
            return  # the sender hung up: what it read is counted
        if scripted.reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def _answer(self, sock: socket.socket, scripted: Answer, number: int) -> None:
        if scripted.silent:
            self.stopping.wait(600)
            return
        if scripted.trickle_head:
            for byte in scripted.head:
                self._send(sock, bytes([byte]), number)
                if self.stopping.wait(scripted.pause_s):
                    return
        else:
            self._send(sock, scripted.head, number)
        self._send(sock, scripted.body, number)
        left = scripted.filler
        while left > 0 and not self.stopping.is_set():
            self._send(sock, b"x" * min(left, WRITE_BYTES), number)
            left -= WRITE_BYTES
            if scripted.pause_s:
                self.stopping.wait(scripted.pause_s)

    def _send(self, sock: socket.socket, data: bytes, number: int) -> None:
        sock.sendall(data)
        with self._lock:
            self.sent[number] += len(data)


def _read_request(sock: socket.socket) -> bytes:
    """The request's head, then its body (Content-Length long), read and dropped."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        0,
    )
    while len(body) < length and (chunk := sock.recv(65536)):
        body += chunk
    return head
