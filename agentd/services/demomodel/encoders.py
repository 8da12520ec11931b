"""One encoder per model API: how a turn looks on the wire, streamed and whole."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from agentd.services.demomodel.common import (
    NDJSON,
    SSE,
    Reply,
    ToolCall,
    _Answer,
    _answer_parts,
    _Call,
    _hex_id,
    _ndjson,
    _now_iso,
    _openai_error,
    _sse,
    _sse_data,
)


class _Encoder:
    """How one protocol renders a scripted answer as a stream, as one JSON object, and as an error body."""

    protocol: ClassVar[str]
    media_type: ClassVar[str] = SSE
    streams_by_default: ClassVar[bool] = False
    supports_tools: ClassVar[bool] = True

    def wants_stream(self, body: dict[str, Any]) -> bool:
        value = body.get("stream")
        return self.streams_by_default if value is None else value is True

    def stream(self, turn: _Answer, call: _Call) -> Iterator[bytes]:
        raise NotImplementedError

    def complete(self, turn: _Answer, call: _Call) -> dict[str, Any]:
        raise NotImplementedError

    def error(self, status: int, message: str) -> dict[str, Any]:
        raise NotImplementedError

    def opening(self, call: _Call) -> bytes:
        """The first event of a stream: what `Hang(after_headers=True)` sends before it stalls."""
        return next(self.stream(Reply(""), call))


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class _Anthropic(_Encoder):
    protocol = "anthropic"

    def _message(self, turn: _Answer, call: _Call, content: list[dict[str, Any]], done: bool) -> dict[str, Any]:
        _, tool = _answer_parts(turn)
        stop_reason = ("tool_use" if tool else "end_turn") if done else None
        return {
            "id": f"msg_fake_{call.tag}",
            "type": "message",
            "role": "assistant",
            "model": call.model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": turn.input_tokens,
                "output_tokens": turn.output_tokens if done else 1,
                "cache_creation_input_tokens": turn.cache_write_tokens,
                "cache_read_input_tokens": turn.cache_read_tokens,
            },
        }

    def _tool_block(self, tool: ToolCall, call: _Call, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"type": "tool_use", "id": f"toolu_fake_{call.tool_tag}", "name": tool.name, "input": arguments}

    def complete(self, turn: _Answer, call: _Call) -> dict[str, Any]:
        text, tool = _answer_parts(turn)
        content: list[dict[str, Any]] = []
        if text or tool is None:
            content.append({"type": "text", "text": text})
        if tool is not None:
            content.append(self._tool_block(tool, call, tool.arguments))
        return self._message(turn, call, content, done=True)

    def stream(self, turn: _Answer, call: _Call) -> Iterator[bytes]:
        text, tool = _answer_parts(turn)
        yield _sse("message_start", {"type": "message_start", "message": self._message(turn, call, [], done=False)})
        yield _sse("ping", {"type": "ping"})
        index = 0
        if text or tool is None:
            deltas = [{"type": "text_delta", "text": piece} for piece in call.chunks(text)]
            yield from self._block(index, {"type": "text", "text": ""}, deltas)
            index += 1
        if tool is not None:
            arguments = json.dumps(tool.arguments)
            deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in call.chunks(arguments)]
            yield from self._block(index, self._tool_block(tool, call, {}), deltas)
        yield _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": turn.output_tokens},
            },
        )
        yield _sse("message_stop", {"type": "message_stop"})

    def _block(self, index: int, start: dict[str, Any], deltas: list[dict[str, Any]]) -> Iterator[bytes]:
        yield _sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
        for delta in deltas:
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})

    def error(self, status: int, message: str) -> dict[str, Any]:
        default = "api_error" if status >= 500 else "invalid_request_error"
        return {"type": "error", "error": {"type": _ANTHROPIC_ERROR_TYPES.get(status, default), "message": message}}


class _Responses(_Encoder):
    protocol = "responses"

    def _response(self, call: _Call, status: str, output: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
        return {
            "id": f"resp_fake_{call.tag}",
            "object": "response",
            "created_at": call.created,
            "status": status,
            "model": call.model,
            "output": output,
            "usage": usage,
            "error": None,
            "incomplete_details": None,
        }

    @staticmethod
    def _usage(turn: _Answer) -> dict[str, Any]:
        return {
            "input_tokens": turn.input_tokens,
            "input_tokens_details": {"cached_tokens": turn.cache_read_tokens},
            "output_tokens": turn.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": turn.input_tokens + turn.output_tokens,
        }

    @staticmethod
    def _message_item(call: _Call, text: str, done: bool) -> dict[str, Any]:
        content = [{"type": "output_text", "text": text, "annotations": []}] if done else []
        status = "completed" if done else "in_progress"
        return {
            "id": f"msg_fake_{call.tag}",
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    @staticmethod
    def _function_item(call: _Call, tool: ToolCall, done: bool) -> dict[str, Any]:
        return {
            "id": f"fc_fake_{call.tool_tag}",
            "type": "function_call",
            "status": "completed" if done else "in_progress",
            "name": tool.name,
            "call_id": f"call_fake_{call.tool_tag}",
            "arguments": json.dumps(tool.arguments) if done else "",
        }

    def complete(self, turn: _Answer, call: _Call) -> dict[str, Any]:
        text, tool = _answer_parts(turn)
        output: list[dict[str, Any]] = []
        if text or tool is None:
            output.append(self._message_item(call, text, done=True))
        if tool is not None:
            output.append(self._function_item(call, tool, done=True))
        return self._response(call, "completed", output, self._usage(turn))

    def stream(self, turn: _Answer, call: _Call) -> Iterator[bytes]:
        sequence = itertools.count()

        def event(kind: str, **fields: Any) -> bytes:
            return _sse(kind, {"type": kind, "sequence_number": next(sequence), **fields})

        text, tool = _answer_parts(turn)
        started = self._response(call, "in_progress", [], None)
        yield event("response.created", response=started)
        yield event("response.in_progress", response=started)
        output_index = 0
        if text or tool is None:
            yield from self._text_events(event, call, text, output_index)
            output_index += 1
        if tool is not None:
            yield from self._function_events(event, call, tool, output_index)
        yield event("response.completed", response=self.complete(turn, call))

    def _text_events(self, event: Callable[..., bytes], call: _Call, text: str, index: int) -> Iterator[bytes]:
        item_id = f"msg_fake_{call.tag}"
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        yield event("response.output_item.added", output_index=index, item=self._message_item(call, "", done=False))
        yield event("response.content_part.added", **where, part={"type": "output_text", "text": "", "annotations": []})
        for piece in call.chunks(text):
            yield event("response.output_text.delta", **where, delta=piece, logprobs=[])
        yield event("response.output_text.done", **where, text=text, logprobs=[])
        yield event(
            "response.content_part.done", **where, part={"type": "output_text", "text": text, "annotations": []}
        )
        yield event("response.output_item.done", output_index=index, item=self._message_item(call, text, done=True))

    def _function_events(self, event: Callable[..., bytes], call: _Call, tool: ToolCall, index: int) -> Iterator[bytes]:
        where = {"item_id": f"fc_fake_{call.tool_tag}", "output_index": index}
        arguments = json.dumps(tool.arguments)
        yield event("response.output_item.added", output_index=index, item=self._function_item(call, tool, done=False))
        for piece in call.chunks(arguments):
            yield event("response.function_call_arguments.delta", **where, delta=piece)
        yield event("response.function_call_arguments.done", **where, name=tool.name, arguments=arguments)
        yield event("response.output_item.done", output_index=index, item=self._function_item(call, tool, done=True))

    def error(self, status: int, message: str) -> dict[str, Any]:
        return _openai_error(status, message)


class _ChatCompletions(_Encoder):
    protocol = "chat"

    @staticmethod
    def _usage(turn: _Answer) -> dict[str, Any]:
        return {
            "prompt_tokens": turn.input_tokens,
            "completion_tokens": turn.output_tokens,
            "total_tokens": turn.input_tokens + turn.output_tokens,
            "prompt_tokens_details": {"cached_tokens": turn.cache_read_tokens},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }

    @staticmethod
    def _envelope(call: _Call, kind: str) -> dict[str, Any]:
        return {"id": f"chatcmpl-fake-{call.tag}", "object": kind, "created": call.created, "model": call.model}

    def _chunk(self, call: _Call, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return _sse_data({**self._envelope(call, "chat.completion.chunk"), "choices": [choice]})

    def _tool_call(self, call: _Call, tool: ToolCall, arguments: str) -> dict[str, Any]:
        function = {"name": tool.name, "arguments": arguments}
        return {"index": 0, "id": f"call_fake_{call.tool_tag}", "type": "function", "function": function}

    def complete(self, turn: _Answer, call: _Call) -> dict[str, Any]:
        text, tool = _answer_parts(turn)
        message: dict[str, Any] = {"role": "assistant", "content": text if text or tool is None else None}
        if tool is not None:
            message["tool_calls"] = [self._tool_call(call, tool, json.dumps(tool.arguments))]
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if tool else "stop", "logprobs": None}
        return {**self._envelope(call, "chat.completion"), "choices": [choice], "usage": self._usage(turn)}

    def stream(self, turn: _Answer, call: _Call) -> Iterator[bytes]:
        text, tool = _answer_parts(turn)
        yield self._chunk(call, {"role": "assistant", "content": ""})
        for piece in call.chunks(text):
            yield self._chunk(call, {"content": piece})
        if tool is not None:
            first, *rest = call.chunks(json.dumps(tool.arguments)) or [""]
            yield self._chunk(call, {"tool_calls": [self._tool_call(call, tool, first)]})
            for piece in rest:
                yield self._chunk(call, {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        yield self._chunk(call, {}, finish_reason="tool_calls" if tool else "stop")
        if self._include_usage(call.body):
            yield _sse_data(
                {**self._envelope(call, "chat.completion.chunk"), "choices": [], "usage": self._usage(turn)}
            )
        yield b"data: [DONE]\n\n"

    @staticmethod
    def _include_usage(body: dict[str, Any]) -> bool:
        options = body.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True

    def error(self, status: int, message: str) -> dict[str, Any]:
        return _openai_error(status, message)


class _Ollama(_Encoder):
    """The NDJSON framing shared by /api/generate and /api/chat; subclasses say where the text goes."""

    media_type = NDJSON
    streams_by_default = True

    def _piece(self, text: str) -> dict[str, Any]:
        raise NotImplementedError

    def _whole(self, text: str, tool: ToolCall | None) -> dict[str, Any]:
        return self._piece(text)

    def _tool_piece(self, tool: ToolCall) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def _stamp(call: _Call) -> dict[str, Any]:
        return {"model": call.model, "created_at": _now_iso()}

    def _final(self, turn: _Answer) -> dict[str, Any]:
        return {
            "done": True,
            "done_reason": "stop",
            "total_duration": 1_000_000,
            "load_duration": 1000,
            "prompt_eval_count": turn.input_tokens,
            "prompt_eval_duration": 1000,
            "eval_count": turn.output_tokens,
            "eval_duration": 1000,
        }

    def opening(self, call: _Call) -> bytes:
        return _ndjson({**self._stamp(call), **self._piece(""), "done": False})

    def stream(self, turn: _Answer, call: _Call) -> Iterator[bytes]:
        text, tool = _answer_parts(turn)
        for piece in call.chunks(text):
            yield _ndjson({**self._stamp(call), **self._piece(piece), "done": False})
        if tool is not None:
            yield _ndjson({**self._stamp(call), **self._tool_piece(tool), "done": False})
        yield _ndjson({**self._stamp(call), **self._piece(""), **self._final(turn)})

    def complete(self, turn: _Answer, call: _Call) -> dict[str, Any]:
        text, tool = _answer_parts(turn)
        return {**self._stamp(call), **self._whole(text, tool), **self._final(turn)}

    def error(self, status: int, message: str) -> dict[str, Any]:
        return {"error": message}


class _OllamaGenerate(_Ollama):
    protocol = "ollama.generate"
    supports_tools = False

    def _piece(self, text: str) -> dict[str, Any]:
        return {"response": text}

    def _final(self, turn: _Answer) -> dict[str, Any]:
        return {**super()._final(turn), "context": [1, 2, 3]}


class _OllamaChat(_Ollama):
    protocol = "ollama.chat"

    def _piece(self, text: str) -> dict[str, Any]:
        return {"message": {"role": "assistant", "content": text}}

    @staticmethod
    def _tool_calls(tool: ToolCall) -> list[dict[str, Any]]:
        function = {"index": 0, "name": tool.name, "arguments": tool.arguments}
        return [{"id": f"call_fake_{_hex_id()}", "function": function}]

    def _tool_piece(self, tool: ToolCall) -> dict[str, Any]:
        return {"message": {"role": "assistant", "content": "", "tool_calls": self._tool_calls(tool)}}

    def _whole(self, text: str, tool: ToolCall | None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tool is not None:
            message["tool_calls"] = self._tool_calls(tool)
        return {"message": message}
