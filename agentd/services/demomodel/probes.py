"""Probes: answered from the server's configuration (its models and context length), never consume a turn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from agentd.services.demomodel.common import _MODIFIED_AT, _OLLAMA_VERSION


class FakeModelServer(Protocol):
    """What a probe reads of the server (server.py's FakeModelServer)."""

    models: tuple[str, ...]
    context_length: int


_Probe = Callable[[Any, Any], dict[str, Any]]


def _ollama_name(name: str) -> str:
    return name if ":" in name else f"{name}:latest"


def _models_list(fake: FakeModelServer, body: Any) -> dict[str, Any]:
    """An OpenAI model list (Hermes reads `context_length`) that also carries the Anthropic list fields."""
    data = [
        {
            "id": name,
            "object": "model",
            "type": "model",
            "created": 0,
            "created_at": _MODIFIED_AT,
            "owned_by": "fakemodel",
            "display_name": name,
            "context_length": fake.context_length,
            "max_model_len": fake.context_length,
        }
        for name in fake.models
    ]
    return {"object": "list", "data": data, "has_more": False, "first_id": fake.models[0], "last_id": fake.models[-1]}


def _ollama_details() -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "gguf",
        "family": "llama",
        "families": ["llama"],
        "parameter_size": "1M",
        "quantization_level": "Q4_0",
    }


def _ollama_tags(fake: FakeModelServer, body: Any) -> dict[str, Any]:
    models = [
        {
            "name": _ollama_name(name),
            "model": _ollama_name(name),
            "modified_at": _MODIFIED_AT,
            "size": 1,
            "digest": "0" * 64,
            "details": _ollama_details(),
        }
        for name in fake.models
    ]
    return {"models": models}


def _ollama_show(fake: FakeModelServer, body: Any) -> dict[str, Any]:
    length = fake.context_length
    return {
        "license": "",
        "modelfile": "# fake model\n",
        "parameters": f"num_ctx {length}",
        "template": "{{ .Prompt }}",
        "details": _ollama_details(),
        "model_info": {
            "general.architecture": "llama",
            "general.context_length": length,
            "general.parameter_count": 1_000_000,
            "llama.context_length": length,
        },
        "capabilities": ["completion", "tools"],
        "modified_at": _MODIFIED_AT,
    }


def _ollama_version(fake: FakeModelServer, body: Any) -> dict[str, Any]:
    return {"version": _OLLAMA_VERSION}


def _count_tokens(fake: FakeModelServer, body: Any) -> dict[str, Any]:
    return {"input_tokens": 10}
