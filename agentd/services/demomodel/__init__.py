"""A fake model server on 127.0.0.1: `agentd demo-model` serves it so claude, codex, hermes and ollama adapters
can be tried with no key and no network (its play: playbook.py), and the tests script it turn by turn to run the
real harness CLIs offline (tests/fakemodel re-exports it).

It speaks enough of four model APIs for Claude Code, Codex, Hermes and agentd's Ollama client:

* Anthropic Messages: ``POST /v1/messages`` (query strings such as ``?beta=true`` are accepted).
  It streams SSE when the body says ``"stream": true`` and otherwise returns one ``message`` object.
  ``POST /v1/messages/count_tokens`` always answers ``{"input_tokens": 10}``.
* OpenAI Responses: ``POST /v1/responses``. It streams SSE when ``"stream": true`` (with
  ``sequence_number`` on every event) and otherwise returns one ``response`` object.
* OpenAI Chat Completions: ``POST /v1/chat/completions``, also under ``/api/v1/``. It streams SSE
  chunks ending in ``data: [DONE]``, with a usage chunk when ``stream_options.include_usage`` is
  set, and otherwise returns one ``chat.completion``.
* Ollama: ``POST /api/generate`` and ``POST /api/chat``. They stream NDJSON unless the body says
  ``"stream": false``, in which case they return one object.

Probes never consume a turn: ``GET /v1/models`` and ``GET /api/v1/models`` (an OpenAI-style list
with ``context_length``, which also carries the Anthropic list fields), ``GET /api/tags``,
``POST /api/show``, ``GET /api/version`` and the Anthropic ``count_tokens``. ``HEAD`` on any path
(Claude Code sends ``HEAD /`` to warm up its connection before its first call) is answered 200
with no body. Any other path gets a 404 JSON body and is recorded with protocol ``"unknown"``.

Each model call takes the next scripted turn. The queue is shared by all protocols: `Reply`,
`ToolCall`, `Fail` (for ``times`` calls) and `Hang`. When the queue is empty the call gets
``respond(request)`` if given (the demo's play), else ``default``, or a 500 "no scripted turn left" if
there is neither. Every request is recorded
in `FakeModelServer.requests` before it is answered. Its ``protocol`` is one of ``anthropic``,
``anthropic.count_tokens``, ``responses``, ``chat``, ``ollama.generate``, ``ollama.chat``,
``models``, ``ollama.tags``, ``ollama.show``, ``ollama.version``, ``head`` or ``unknown``. Header
names are lower-cased.

HTTP: it speaks HTTP/1.1. JSON answers carry ``Content-Length`` and keep the connection alive.
Streams are sent chunked, with ``Connection: close`` and a flush after every event. A 429 also
carries ``retry-after: 0``, or, for a `Fail` with ``resets_in_s``, that reset in the three forms providers
use (``retry-after``, ``anthropic-ratelimit-requests-reset``, ``x-ratelimit-reset-requests``).
``stop()`` unblocks hung handlers and idle keep-alive connections, then joins every handler thread.

What it does not do:

* The script does not look at the conversation (only ``respond`` does). Turns are handed out in
  order, whatever the request says; a tool result is not checked, and it does not validate model
  names (it echoes the request's model).
* Usage numbers come from the script, not from counting tokens. Every answer of every protocol carries
  them (input, output, and the cache counts where the API has a place for them), except a Chat
  Completions stream that did not ask with ``stream_options.include_usage``, as OpenAI does.
* Each turn has at most one tool call and no reasoning or thinking blocks, images, citations or
  logprobs.
* It never reports an error in the middle of a stream (Responses ``response.failed``, Anthropic
  ``error`` events). Errors are HTTP statuses sent before any body.
* It does not do TLS, HTTP/2, WebSockets (for example a Responses websocket transport), or
  compressed request bodies (``Content-Encoding``).
* ``/api/generate`` cannot carry a tool call. A `ToolCall` turn there is answered with a 500
  that names the scripting mistake.
"""

from agentd.services.demomodel.common import (
    DEFAULT_CONTEXT_LENGTH,
    NO_TURN_LEFT,
    Fail,
    Hang,
    RecordedRequest,
    Reply,
    ToolCall,
    Turn,
)
from agentd.services.demomodel.playbook import demo_turn
from agentd.services.demomodel.server import FakeModelServer

__all__ = [
    "DEFAULT_CONTEXT_LENGTH",
    "NO_TURN_LEFT",
    "Fail",
    "FakeModelServer",
    "Hang",
    "RecordedRequest",
    "Reply",
    "ToolCall",
    "Turn",
    "demo_turn",
]
