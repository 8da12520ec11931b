"""The agent: identity, constitution, wallets (seed 000 §1, §1a, §1b), profiles and skills (§3, §4)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentd.records.base import Identifier, JsonObject, Record, Timestamp


class ExternalName(Record):
    schema_id = "agent-runtime/agent.external-name/v1"
    name: str
    registered_at: Timestamp | None = None
    source: Literal["aibtc-api", "local-cache"]
    wallet_ref: str


class OnchainIdentity(Record):
    schema_id = "agent-runtime/agent.onchain-identity/v1"
    contract: str
    token_id: str | None = None
    reputation_ref: str | None = None


class AgentFields(Record):
    """AgentIdentity as an identity TOML's [agent] writes it: the constitution's paths come from
    [constitution], so soul_ref and purpose_ref are not among them."""

    agent_id: Identifier
    internal_name: Identifier
    external_name: ExternalName | None = None
    onchain_identity: OnchainIdentity | None = None
    display_name: str
    codename: str | None = None
    host: str | None = None
    user: str | None = None
    runtime_instance_id: str | None = None
    metadata: JsonObject | None = None


class AgentIdentity(AgentFields):
    schema_id = "agent-runtime/agent.identity/v1"
    schema_mode = "validation"
    purpose_ref: str | None = None
    soul_ref: str | None = None


class AgentConstitution(Record):
    schema_id = "agent-runtime/agent.constitution/v1"
    agent_id: str
    soul_path: str
    purpose_path: str
    soul_hash: str = Field(description="sha256 of SOUL.md, computed, never typed")
    purpose_hash: str = Field(description="sha256 of PURPOSE.md, computed, never typed")
    version: str
    revised_at: Timestamp


class WalletIdentity(Record):
    schema_id = "agent-runtime/wallet.identity/v1"
    schema_mode = "validation"
    agent_id: str
    chain: str
    network: str | None = None
    address: str
    public_key: str | None = None
    name: str | None = None
    capabilities: list[str] | None = None
    onchain_identity_contract: str | None = None
    reputation_ref: str | None = None
    metadata: JsonObject | None = None


class ContextPolicy(Record):
    schema_id = "agent-runtime/agent.context-policy/v1"
    max_prompt_chars: int = Field(gt=0, le=100_000_000)
    include_recent_memory: bool


class ResultPolicy(Record):
    schema_id = "agent-runtime/agent.result-policy/v1"
    allow_follow_up_tasks: bool
    allow_external_messages: bool
    max_follow_up_depth: int = Field(
        default=3, ge=0, le=100, description="agentd: follow-ups of follow-ups go at most this deep (seed 004)"
    )
    max_follow_ups_per_outcome: int = Field(
        default=10, ge=0, le=1000, description="agentd: one outcome asks for at most this many follow-ups"
    )
    require_approval_for_side_effects: bool = Field(
        default=False,
        description="agentd: an outcome's follow-up tasks and external messages wait for `agentd approve`",
    )


class SubagentProfile(Record):
    """seed §3. `integration_policy` is removed: agentd would have nothing to enforce it with."""

    schema_id = "agent-runtime/agent.profile/v1"
    schema_mode = "validation"
    profile_id: Identifier
    style: Literal["claude-like", "codex-like", "hermes-like"]
    role: str
    default_adapter_id: Identifier
    default_model: str | None = None
    prompt_parts: list[str]
    skill_ids: list[Identifier]
    context_policy: ContextPolicy
    result_policy: ResultPolicy


class SkillCommand(Record):
    schema_id = "agent-runtime/skill.command/v1"
    name: Identifier
    command: str | list[str] = Field(description="argv (a string is split like a shell would, but never run by one)")
    description: str | None = None


class SkillManifest(Record):
    schema_id = "agent-runtime/skill.manifest/v1"
    schema_mode = "validation"
    skill_id: Identifier
    description: str
    tags: list[str] | None = None
    instruction_path: str = "SKILL.md"
    subagent_path: str | None = None
    cli_commands: list[SkillCommand] | None = None
    sensor_path: str | None = None
    input_schema_id: str | None = None
    output_schema_id: str | None = None
