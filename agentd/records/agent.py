"""The agent: identity, constitution, wallets (seed 000 §1, §1a, §1b), profiles and skills (§3, §4)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from agentd.records.base import Command, Identifier, JsonObject, Record, Timestamp


class ExternalName(Record):
    schema_id = "agent-runtime/agent.external-name/v1"
    name: str = Field(description="the AIBTC-registered name")
    registered_at: Timestamp | None = Field(default=None, description="when it was registered")
    source: Literal["aibtc-api", "local-cache"] = Field(description="where agentd read it from")
    wallet_ref: str = Field(description="the segwit address that authored the registration")


class OnchainIdentity(Record):
    schema_id = "agent-runtime/agent.onchain-identity/v1"
    contract: str = Field(description="the ERC-8004-compatible Clarity contract")
    token_id: str | None = Field(default=None, description="the agent's entry in it")
    reputation_ref: str | None = Field(default=None, description="contract/method to read the reputation summary")


class AgentFields(Record):
    """AgentIdentity as an identity TOML's [agent] writes it: the constitution's paths come from
    [constitution], so soul_ref and purpose_ref are not among them."""

    agent_id: Identifier = Field(description="the canonical key; must equal internal_name")
    internal_name: Identifier = Field(description="the name operators and peers use; load-bearing, never overridden")
    external_name: ExternalName | None = Field(default=None, description="the AIBTC-registered name, if any")
    onchain_identity: OnchainIdentity | None = Field(default=None, description="the on-chain identity entry, if any")
    display_name: str = Field(description="a label for people")
    codename: str | None = Field(default=None, description="a legacy alias")
    host: str | None = Field(default=None, description="the VM the agent lives on")
    user: str | None = Field(default=None, description="the operator responsible")
    runtime_instance_id: str | None = Field(default=None, description="an id of this installation")
    metadata: JsonObject | None = Field(default=None, description="anything else, kept as data")


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
    agent_id: str = Field(description="the agent it belongs to")
    chain: str = Field(description="stacks, bitcoin, ethereum, …")
    network: str | None = Field(default=None, description="mainnet, testnet, devnet, …")
    address: str = Field(description="the wallet address")
    public_key: str | None = Field(default=None, description="its public key")
    name: str | None = Field(default=None, description="a BNS or similar name")
    capabilities: list[str] | None = Field(
        default=None, description="what it is used for: sign, heartbeat, message, claim, publish"
    )
    onchain_identity_contract: str | None = Field(
        default=None, description="must match [agent] onchain_identity.contract when both are set"
    )
    reputation_ref: str | None = Field(default=None, description="contract/method for reputation reads")
    metadata: JsonObject | None = Field(default=None, description="anything else, kept as data")


class ContextPolicy(Record):
    schema_id = "agent-runtime/agent.context-policy/v1"
    max_prompt_chars: int = Field(
        description="the bundle's limit; over it, recent work, skills, earlier attempts, then the task are cut",
        gt=0,
        le=100_000_000,
    )
    include_recent_memory: bool = Field(description="bundle the outcomes of the agent's latest tasks")


class ResultPolicy(Record):
    schema_id = "agent-runtime/agent.result-policy/v1"
    allow_follow_up_tasks: bool = Field(
        description="an outcome's follow_up_tasks are enqueued (else refused and recorded)"
    )
    allow_external_messages: bool = Field(
        description="an outcome's external_messages are delivered (else refused and recorded)"
    )
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


Glob = Annotated[str, Field(min_length=1, max_length=1000, pattern=r"^[^\x00]*$")]
# A command-line flag a rule looks for as a whole word: `-f` (one letter) or `--force-with-lease`.
Flag = Annotated[str, Field(pattern=r"^(-[A-Za-z0-9]|--[A-Za-z0-9][A-Za-z0-9-]{0,63})$")]


class ToolRule(Record):
    """agentd: one rule of a tool policy (docs/policy.md): a decision for the tool calls it matches, every
    matcher given holding at once; the first rule that matches decides."""

    schema_id = "agentd/tool.rule/v1"
    schema_mode = "validation"
    decision: Literal["allow", "deny", "ask"] = Field(description="what a call it matches gets")
    tool: Glob = Field(default="*", description="a glob over the tool's name: Bash, Write, WebFetch, mcp__github__*")
    command: Glob | None = Field(
        default=None, description="a glob over a shell command, and over each simple command in it (docs/policy.md)"
    )
    path: Glob | None = Field(
        default=None, description='"inside_workspace", "outside_workspace", or a glob over a file path'
    )
    host: Glob | None = Field(default=None, description="a glob over a URL's host")
    flags: list[Flag] | None = Field(
        default=None,
        min_length=1,
        max_length=50,
        description="with `command`: the simple command that matches also has one of these flags as a word "
        "(`-f` also inside a bundle such as `-uf`, `--force` also as `--force=…`); docs/policy.md",
    )
    reason: str | None = Field(default=None, max_length=500, description="said to the model and recorded")

    @model_validator(mode="after")
    def _flags_need_a_command(self) -> ToolRule:
        if self.flags is not None and self.command is None:
            raise ValueError("flags needs a command glob: the flags are looked for in the commands it matches")
        return self


# An egress allow-list entry: `host:port`, the host exact or `*.` and a domain (docs/gateway.md).
HostPort = Annotated[
    str,
    Field(
        min_length=3,
        max_length=300,
        pattern=r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,62}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*:[0-9]{1,5}$",
    ),
]


class Egress(Record):
    """agentd: where an attempt of the profile may connect, through agentd's proxy (docs/gateway.md)."""

    schema_id = "agentd/profile.egress/v1"
    schema_mode = "validation"
    allow: list[HostPort] = Field(default=[], max_length=200, description='"host:port" pairs; "*.example.org:443"')


class SubagentProfile(Record):
    """seed §3. `integration_policy` is removed: agentd would have nothing to enforce it with."""

    schema_id = "agent-runtime/agent.profile/v1"
    schema_mode = "validation"
    profile_id: Identifier = Field(description="the profile's id")
    style: Literal["claude-like", "codex-like", "hermes-like"] = Field(
        description="the kind of harness the prompt is written for"
    )
    role: str = Field(description="the operational role, said first in the bundle")
    default_adapter_id: Identifier = Field(
        description="the adapter a task of this profile runs on unless its type or intent names one"
    )
    default_model: str | None = Field(default=None, description="the model unless the task or its type names one")
    prompt_parts: list[str] = Field(description="operational framing, in the bundle after the constitution")
    skill_ids: list[Identifier] = Field(description="skills every task of this profile carries")
    context_policy: ContextPolicy = Field(description="what the bundle may hold")
    result_policy: ResultPolicy = Field(description="which side effects an outcome may ask for")
    tool_policy: list[ToolRule] = Field(
        default=[], max_length=200, description="agentd: rules for its tool calls, before [policy] rules"
    )
    egress: Egress = Field(default_factory=Egress, description="agentd: hosts its attempts may reach (the proxy)")
    on_budget: Literal["stop", "ask"] = Field(
        default="stop", description="agentd: a model call past the budget ends the attempt, or waits for a person"
    )


class SkillCommand(Record):
    schema_id = "agent-runtime/skill.command/v1"
    name: Identifier
    command: Command = Field(description="argv (a string is split like a shell would, but never run by one)")
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
