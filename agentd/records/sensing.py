"""Value types of sensor intake: a judged line (accepted or rejected), what a run recorded, and a
sensor's schedule state."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentd import frozen_value
from agentd.records.tasks import SensorEvent
from agentd.records.work import NewTask
from agentd.records.workflows import SignalDecision


@frozen_value
class WorkflowStart:
    workflow_type: str
    instance_key: str
    state: str
    context: dict[str, Any] | None
    signal: str | None = None  # for the existing workflow: see AcceptedEvent.wake


@frozen_value
class AcceptedEvent:
    line: int
    event: SensorEvent
    task: NewTask | None = None
    workflow: WorkflowStart | None = None
    stale: bool = False
    wake: SignalDecision | None = None  # the workflow's signal, judged on the workflow as it was read

    @property
    def described(self) -> str:
        """The observed event, for people: why a sensor signaled a workflow."""
        source = f" ({self.event.source_ref[:200]})" if self.event.source_ref else ""
        return f"sensor event {self.event.dedupe_key}{source}"


@frozen_value
class RejectedLine:
    line: int
    reason: str


@dataclass
class IntakeCounts:
    recorded: int = 0
    created: int = 0
    deduped: int = 0
    stale: int = 0
    rejected: int = 0
    workflows_created: int = 0
    workflows_deduped: int = 0
    workflows_signaled: int = 0
    signals_ignored: int = 0
    task_ids: list[int] = field(default_factory=list)

    def add(self, other: IntakeCounts) -> None:
        for name, value in other.as_dict().items():
            setattr(self, name, getattr(self, name) + value)
        self.task_ids += other.task_ids

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if isinstance(v, int)}


@frozen_value
class SensorState:
    sensor_id: str
    last_run_at: datetime | None
    next_run_at: datetime | None
    last_result: str | None
    last_error: str | None
    runs: int


@frozen_value
class OpenSensorRun:
    """A sensor run recorded in flight, and the service process that owns it."""

    sensor_id: str
    run_id: str
    owner: dict[str, Any]
    started_at: datetime
