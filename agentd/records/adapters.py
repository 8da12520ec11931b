"""Adapter configs (seed 000 §2): a discriminated union over the five kinds."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from agentd.records.base import Identifier, Record, Sandbox

MAX_TIMEOUT_MS = 7 * 24 * 3600 * 1000  # a week: longer than any attempt should run


class HarnessAutonomy(Record):
    schema_id = "agent-runtime/adapter.autonomy/v1"
    profile: Literal["restricted", "trusted-vm"] = "restricted"
    required_args: list[str] | None = None


class ClaudeAutonomy(HarnessAutonomy):
    schema_id = "agent-runtime/adapter.claude-autonomy/v1"
    required_settings_files: list[str] | None = None


class ScriptAutonomy(Record):
    schema_id = "agent-runtime/adapter.script-autonomy/v1"
    profile: Literal["runtime-native"] = "runtime-native"


class CodexProvider(Record):
    schema_id = "agent-runtime/adapter.codex-provider/v1"
    id: Identifier
    name: str | None = None
    base_url: str | None = None
    wire_api: Literal["responses"] = "responses"
    requires_openai_auth: bool | None = None
    env_key: str | None = Field(default=None, description="agentd: env var whose value codex sends as the bearer token")


class TokenPrice(Record):
    """agentd: USD per million tokens, for adapters whose CLI reports no cost."""

    schema_id = "agent-runtime/adapter.token-price/v1"
    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)
    cached_input_per_mtok: float | None = Field(default=None, ge=0)


class _SubprocessAdapter(Record):
    adapter_id: Identifier
    command: str = Field(min_length=1, description="the executable; never a shell string")
    working_dir: str | None = None
    timeout_ms: int = Field(gt=0, le=MAX_TIMEOUT_MS)
    env_file: str | None = None
    env: dict[str, str] | None = None
    extra_args: list[str] | None = None


class ClaudeCodeAdapterConfig(_SubprocessAdapter):
    schema_id = "agent-runtime/adapter.claude-code/v1"
    kind: Literal["claude-code"]
    sandbox: Sandbox | None = None
    model: str | None = None
    autonomy: ClaudeAutonomy | None = None
    max_turns: int | None = Field(default=None, gt=0, description="agentd: --max-turns")
    max_budget_usd: float | None = Field(
        default=None, gt=0, description="agentd: per-attempt spend cap passed to the CLI"
    )
    allowed_tools: list[str] | None = Field(default=None, description="agentd: --allowedTools")


class CodexAdapterConfig(_SubprocessAdapter):
    schema_id = "agent-runtime/adapter.codex/v1"
    kind: Literal["codex"]
    sandbox: Sandbox | None = None
    model: str | None = None
    provider: CodexProvider | None = None
    autonomy: HarnessAutonomy | None = None
    prices: dict[str, TokenPrice] | None = Field(
        default=None, description="agentd: price table by model, codex reports no cost"
    )


class HermesAgentAdapterConfig(_SubprocessAdapter):
    schema_id = "agent-runtime/adapter.hermes-agent/v1"
    kind: Literal["hermes-agent"]
    sandbox: Sandbox | None = None
    model: str | None = None
    autonomy: HarnessAutonomy | None = None
    provider: str | None = Field(default=None, description="agentd: hermes model.provider")
    base_url: str | None = Field(default=None, description="agentd: hermes model.base_url")
    context_length: int | None = Field(default=None, ge=64000, le=100_000_000, description="agentd")
    api_key_env: str | None = Field(
        default=None, description="agentd: env var (from env_file) whose value becomes hermes's model.api_key"
    )
    max_retries: int = Field(default=1, ge=1, le=5, description="agentd: hermes agent.api_max_retries")


class OllamaGenerateAdapterConfig(Record):
    schema_id = "agent-runtime/adapter.ollama-generate/v1"
    adapter_id: Identifier
    kind: Literal["ollama-generate"]
    endpoint: str
    model: str
    timeout_ms: int = Field(gt=0, le=MAX_TIMEOUT_MS)


class ScriptAdapterConfig(_SubprocessAdapter):
    schema_id = "agent-runtime/adapter.script/v1"
    kind: Literal["script"]
    autonomy: ScriptAutonomy | None = None


HarnessAdapterConfig = ClaudeCodeAdapterConfig | CodexAdapterConfig | HermesAgentAdapterConfig
SubprocessAdapterConfig = HarnessAdapterConfig | ScriptAdapterConfig
AdapterConfig = Annotated[
    HarnessAdapterConfig | OllamaGenerateAdapterConfig | ScriptAdapterConfig,
    Field(discriminator="kind"),
]
ADAPTER_MODELS: tuple[type[Record], ...] = (
    ClaudeCodeAdapterConfig,
    CodexAdapterConfig,
    HermesAgentAdapterConfig,
    OllamaGenerateAdapterConfig,
    ScriptAdapterConfig,
)
