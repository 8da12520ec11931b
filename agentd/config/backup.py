"""[backup] (docs/backup-and-archive.md): where and how often the shipped timer backs the agent up."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentd.clock import parse_duration

BACKUP_EVERY_S = (300.0, 30 * 86_400.0)  # [backup] every: from 5 minutes to 30 days


class BackupSection(BaseModel):
    """[backup]: `agentd-backup@NAME.timer` runs `agentd backup` into `dest` every `every`; status, the console
    and the metrics call the last good backup overdue past twice that (docs/backup-and-archive.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    dest: Path | None = Field(
        default=None, description="where the timer backs up: a folder (incremental) or a file ending .tar or .tar.gz"
    )
    every: str | None = Field(
        default=None, description="how often the timer backs up: a duration from 5m to 30d (90m, 6h, 1d)"
    )

    @field_validator("every")
    @classmethod
    def _every_is_a_duration(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            seconds = parse_duration(value, "s")
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        low, high = BACKUP_EVERY_S
        if not low <= seconds <= high:
            raise ValueError(f"expected a duration from 5m to 30d, found {value!r}")
        return value

    @model_validator(mode="after")
    def _every_needs_dest(self) -> BackupSection:
        if self.every is not None and self.dest is None:
            raise ValueError("backup.dest: expected where to back up to, since backup.every is set")
        return self

    @property
    def every_s(self) -> float | None:
        return None if self.every is None else parse_duration(self.every, "s")
