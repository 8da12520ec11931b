"""Adapter configs (seed 000 §2): a discriminated union over the five kinds."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from agentd.records.base import EnvVars, Identifier, Record, Sandbox

MAX_TIMEOUT_MS = 7 * 24 * 3600 * 1000  # a week: longer than any attempt should run


class HarnessAutonomy(Record):
    schema_id = "agent-runtime/adapter.autonomy/v1"
    profile: Literal["restricted", "trusted-vm"] = Field(
        default="restricted",
        description="trusted-vm: the harness may act without asking (declared here, never hidden in extra_args)",
    )
    required_args: list[str] | None = Field(
        default=None, description="arguments the autonomy profile needs, checked at config load"
    )


class ClaudeAutonomy(HarnessAutonomy):
    schema_id = "agent-runtime/adapter.claude-autonomy/v1"
    required_settings_files: list[str] | None = Field(
        default=None, description="files that must exist for the autonomy profile"
    )


class ScriptAutonomy(Record):
    schema_id = "agent-runtime/adapter.script-autonomy/v1"
    profile: Literal["runtime-native"] = Field(default="runtime-native", description="a script is runtime-native")


class CodexProvider(Record):
    schema_id = "agent-runtime/adapter.codex-provider/v1"
    id: Identifier = Field(description="codex's model_provider id")
    name: str | None = Field(default=None, description="its display name")
    base_url: str | None = Field(default=None, description="the provider's API base URL")
    wire_api: Literal["responses"] = Field(
        default="responses", description="the wire protocol (codex speaks the Responses API)"
    )
    requires_openai_auth: bool | None = Field(default=None, description="codex's requires_openai_auth")
    env_key: str | None = Field(default=None, description="agentd: env var whose value codex sends as the bearer token")


class TokenPrice(Record):
    """agentd: USD per million tokens, for adapters whose CLI reports no cost."""

    schema_id = "agent-runtime/adapter.token-price/v1"
    input_per_mtok: float = Field(description="USD per million input tokens", ge=0)
    output_per_mtok: float = Field(description="USD per million output tokens", ge=0)
    cached_input_per_mtok: float | None = Field(
        description="USD per million cached input tokens (default: the input price)", default=None, ge=0
    )


class _SubprocessAdapter(Record):
    adapter_id: Identifier = Field(description="the adapter's id (tasks, profiles and budgets name it)")
    command: str = Field(min_length=1, description="the executable; never a shell string")
    working_dir: str | None = Field(
        default=None, description="the attempt's working directory (default: [paths] workspace)"
    )
    timeout_ms: int = Field(
        description="an attempt's hard budget: then SIGTERM to its process group, SIGKILL after kill_grace_s",
        gt=0,
        le=MAX_TIMEOUT_MS,
    )
    env_file: str | None = Field(
        default=None,
        description="KEY=VALUE lines given to the process (secrets live here, redacted from evidence by value)",
    )
    env: EnvVars | None = Field(
        default=None, description="more variables for the process (not secrets: they are evidence)"
    )
    extra_args: list[str] | None = Field(default=None, description="appended to the command line agentd builds")


class ClaudeCodeAdapterConfig(_SubprocessAdapter):
    schema_id = "agent-runtime/adapter.claude-code/v1"
    kind: Literal["claude-code"]
    sandbox: Sandbox | None = Field(default=None, description="the harness's sandbox")
    model: str | None = Field(default=None, description="the model unless the task, type or profile names one")
    autonomy: ClaudeAutonomy | None = Field(default=None, description="the autonomy posture, declared")
    max_turns: int | None = Field(default=None, gt=0, description="agentd: --max-turns")
    max_budget_usd: float | None = Field(
        default=None, gt=0, description="agentd: per-attempt spend cap passed to the CLI"
    )
    allowed_tools: list[str] | None = Field(default=None, description="agentd: --allowedTools")
    prices: dict[str, TokenPrice] | None = Field(
        default=None,
        description="agentd: price table by model, for the budget while claude runs (its own cost comes at the end)",
    )


class CodexAdapterConfig(_SubprocessAdapter):
    schema_id = "agent-runtime/adapter.codex/v1"
    kind: Literal["codex"]
    sandbox: Sandbox | None = Field(default=None, description="codex --sandbox")
    model: str | None = Field(default=None, description="the model unless the task, type or profile names one")
    provider: CodexProvider | None = Field(
        default=None, description="a model provider for codex (written to its config)"
    )
    autonomy: HarnessAutonomy | None = Field(default=None, description="the autonomy posture, declared")
    prices: dict[str, TokenPrice] | None = Field(
        default=None, description="agentd: price table by model, codex reports no cost"
    )


class HermesAgentAdapterConfig(_SubprocessAdapter):
    schema_id = "agent-runtime/adapter.hermes-agent/v1"
    kind: Literal["hermes-agent"]
    sandbox: Sandbox | None = Field(default=None, description="the harness's sandbox")
    model: str | None = Field(default=None, description="the model unless the task, type or profile names one")
    autonomy: HarnessAutonomy | None = Field(default=None, description="the autonomy posture, declared")
    provider: str | None = Field(default=None, description="agentd: hermes model.provider")
    base_url: str | None = Field(default=None, description="agentd: hermes model.base_url")
    context_length: int | None = Field(default=None, ge=64000, le=100_000_000, description="agentd")
    api_key_env: str | None = Field(
        default=None, description="agentd: env var (from env_file) whose value becomes hermes's model.api_key"
    )
    max_retries: int = Field(default=1, ge=1, le=5, description="agentd: hermes agent.api_max_retries")
    max_turns: int | None = Field(default=None, gt=0, description="agentd: hermes agent.max_turns")


class OllamaGenerateAdapterConfig(Record):
    schema_id = "agent-runtime/adapter.ollama-generate/v1"
    adapter_id: Identifier = Field(description="the adapter's id")
    kind: Literal["ollama-generate"]
    endpoint: str = Field(description="the Ollama server's base URL")
    model: str = Field(description="the model to run")
    timeout_ms: int = Field(description="an attempt's hard budget", gt=0, le=MAX_TIMEOUT_MS)


class ScriptAdapterConfig(_SubprocessAdapter):
    schema_id = "agent-runtime/adapter.script/v1"
    kind: Literal["script"]
    autonomy: ScriptAutonomy | None = Field(default=None, description="a script is runtime-native")


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
