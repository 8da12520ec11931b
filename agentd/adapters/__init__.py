"""The adapters: one per kind of worker (claude, codex, hermes, ollama, a script), each turning an
attempt into a process and its output into an AdapterRun.

May import: records, config, gateway, process, store, work, evidence, outlook.

May call: nothing.

Adapter kinds by name; `adapter_for` picks the implementation for an adapter's config.
"""

from __future__ import annotations

from agentd.adapters.base import Adapter, AdapterRun, AttemptContext, Usage
from agentd.adapters.claude import ClaudeCodeAdapter
from agentd.adapters.codex import CodexAdapter
from agentd.adapters.hermes import HermesAgentAdapter
from agentd.adapters.ollama import OllamaGenerateAdapter
from agentd.adapters.script import ScriptAdapter
from agentd.records import AdapterConfig

__all__ = ["Adapter", "AdapterRun", "AttemptContext", "Usage", "adapter_for"]

_KINDS: dict[str, Adapter] = {
    "script": ScriptAdapter(),
    "claude-code": ClaudeCodeAdapter(),
    "codex": CodexAdapter(),
    "hermes-agent": HermesAgentAdapter(),
    "ollama-generate": OllamaGenerateAdapter(),
}


def adapter_for(config: AdapterConfig) -> Adapter:
    return _KINDS[config.kind]
