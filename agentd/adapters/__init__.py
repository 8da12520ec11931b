"""Adapter kinds by name; `adapter_for` picks the implementation for an adapter's config."""

from __future__ import annotations

from agentd.adapters.base import Adapter, AdapterRun, AttemptContext, Usage
from agentd.adapters.script import ScriptAdapter
from agentd.errors import InputError
from agentd.records import AdapterConfig

__all__ = ["Adapter", "AdapterRun", "AttemptContext", "Usage", "adapter_for"]

_KINDS: dict[str, Adapter] = {"script": ScriptAdapter()}


def adapter_for(config: AdapterConfig) -> Adapter:
    try:
        return _KINDS[config.kind]
    except KeyError:
        raise InputError(f"adapter {config.adapter_id}: kind {config.kind!r} is not runnable in this agentd") from None
