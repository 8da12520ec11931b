"""The identity TOML's shape (DESIGN §2): one pydantic model per section, each value checked on its
own, with documented defaults and bounds. Parsing the file into a Config is agentd/config.py's job."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from agentd.records import (
    AdapterConfig,
    AgentFields,
    Identifier,
    ScheduleSpec,
    SubagentProfile,
    TaskTypeSpec,
    Timestamp,
    WalletIdentity,
    WorkflowDefinition,
)

ENV_PREFIX = "AGENTD_"
MIB = 1024 * 1024


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class AgentSection(AgentFields):
    """[agent]: AgentIdentity (seed §1) without soul_ref/purpose_ref, which [constitution] owns."""


class ConstitutionSection(Section):
    soul_path: Path
    purpose_path: Path
    version: str
    revised_at: Timestamp


class WalletSection(WalletIdentity):
    """A [[wallets]] entry: a WalletIdentity whose agent_id may be left to the agent's."""

    agent_id: str | None = None  # type: ignore[assignment]


class PathsSection(Section):
    state_dir: Path
    skills_dir: Path
    sensors_dir: Path
    workspace: Path


DAY_S = 86_400.0
YEAR_S = 31_536_000


class DispatchSection(Section):
    # Every duration has an upper bound: each one ends up in a timedelta or a sleep.
    poll_ceiling_s: float = Field(default=30.0, gt=0, le=3600)
    grace_s: float = Field(default=30.0, ge=0, le=DAY_S, description="SIGTERM: time the attempt may finish")
    kill_grace_s: float = Field(default=5.0, gt=0, le=3600, description="adapter SIGTERM → SIGKILL")
    lock_heartbeat_s: float = Field(default=5.0, gt=0, le=3600)
    lock_stale_s: float = Field(default=60.0, gt=0, le=DAY_S)
    default_max_attempts: int = Field(default=3, ge=1, le=100)
    default_profile_id: Identifier | None = None
    backoff_base_s: float = Field(default=30.0, ge=0, le=DAY_S)
    backoff_max_s: float = Field(default=3600.0, ge=0, le=30 * DAY_S)
    backoff_jitter: float = Field(default=0.2, ge=0, le=1)
    rate_limit_backoff_s: float = Field(default=300.0, ge=0, le=DAY_S)
    max_rate_limit_reschedules: int = Field(default=5, ge=0, le=1000)
    output_cap_bytes: int = Field(default=16 * MIB, ge=1024, le=1024 * 1024 * MIB)
    workflow_state_cap: int = Field(default=5, ge=1, le=1000)
    recent_memory_items: int = Field(default=5, ge=0, le=100)
    crash_limit: int = Field(
        default=3, ge=1, le=100, description="boot sweeps in a row that end a task as crashed_runtime"
    )


class SensorsSection(Section):
    max_concurrent: int = Field(default=4, ge=1, le=64)
    default_timeout_s: float = Field(default=60.0, gt=0, le=DAY_S)
    kill_grace_s: float = Field(default=5.0, gt=0, le=3600)
    output_cap_bytes: int = Field(default=16 * MIB, ge=1024, le=1024 * 1024 * MIB)
    tick_s: float = Field(default=1.0, gt=0, le=60)


class MetricsSection(Section):
    enabled: bool = True
    dispatch_listen: str = "127.0.0.1:9478"
    sensors_listen: str = "127.0.0.1:9479"


class ChaosSection(Section):
    """Fault injection for the crash tests and the chaos suite: SIGKILL ourselves at a point."""

    crash_at: Literal["after_claim", "after_outcome_commit"] | None = None


class Settings(BaseSettings):
    """The identity TOML's shape; the environment overrides any scalar of a section."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", frozen=True, allow_inf_nan=False
    )

    agent: AgentSection
    constitution: ConstitutionSection
    wallets: list[WalletSection] = []
    paths: PathsSection
    dispatch: DispatchSection = DispatchSection()
    sensors: SensorsSection = SensorsSection()
    metrics: MetricsSection = MetricsSection()
    chaos: ChaosSection = ChaosSection()
    adapters: list[AdapterConfig] = Field(min_length=1)
    profiles: list[SubagentProfile] = Field(min_length=1)
    task_types: list[TaskTypeSpec] = Field(min_length=1)
    payload_schemas: dict[str, Path] = {}
    workflows: list[WorkflowDefinition] = []
    schedules: list[ScheduleSpec] = []

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (env_settings, init_settings)  # the environment wins over the file


