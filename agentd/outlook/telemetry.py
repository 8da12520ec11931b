"""Traces for an OpenTelemetry stack (docs/telemetry.md): `[telemetry] otlp_endpoint` set, the dispatcher sends
each finished attempt (with its tool calls) and each finished task as spans over OTLP/HTTP, through the
OpenTelemetry SDK (the `otel` extra).

The spans are made from the event log alone (agentd/outlook/spans.py), after a cursor kept in
`<state_dir>/telemetry_cursor`, so a restart sends on from where it was and never sends an attempt twice
from one cursor. Dispatch is never held up: the SDK's batch processor sends from a thread of its own, with
its own timeout, and drops what a collector that is down cannot take (its queue is bounded); this loop only
reads the database and hands spans over.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from agentd.clock import Clock
from agentd.config import Config
from agentd.errors import ConfigError, Problem, contained
from agentd.outlook.spans import SpanRecord, attempt_spans, task_span
from agentd.records import RuntimeEvent
from agentd.store import AsyncStore, Store

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

logger = logging.getLogger(__name__)

CURSOR_FILE = "telemetry_cursor"
BATCH = 500  # events read per pass
QUEUE_MAX = 2048  # spans held for a collector that is slow; past that they are dropped (the SDK counts them)


def sdk_missing() -> str | None:
    """Why spans cannot be sent from this install, or None."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        return f"the OpenTelemetry SDK is not installed ({exc.name}): pip install 'agentd[otel]'"
    return None


def fixed_ids() -> Any:
    """An IdGenerator that hands out the ids agentd computed (agentd/outlook/correlation.py), one span at a
    time: the SDK makes its own otherwise, and a span must be the one the envelope names."""
    from opentelemetry.sdk.trace.id_generator import IdGenerator

    class FixedIds(IdGenerator):
        trace_id, span_id = 1, 1

        def generate_trace_id(self) -> int:
            return self.trace_id

        def generate_span_id(self) -> int:
            return self.span_id

    return FixedIds()


class SpanSender:
    """The SDK's provider and batch processor, sending to `<otlp_endpoint>/v1/traces`."""

    def __init__(self, endpoint: str, timeout_s: float, service_name: str, agent_id: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.ids = fixed_ids()
        resource = Resource.create({"service.name": service_name, "service.instance.id": agent_id})
        self.provider: TracerProvider = TracerProvider(resource=resource, id_generator=self.ids)
        exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=timeout_s)
        self.timeout_s = timeout_s
        self.provider.add_span_processor(
            BatchSpanProcessor(exporter, max_queue_size=QUEUE_MAX, schedule_delay_millis=500)
        )
        self.tracer = self.provider.get_tracer("agentd")

    def send(self, record: SpanRecord) -> None:
        """Hand one span to the batch processor (never waits for the collector)."""
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

        self.ids.trace_id, self.ids.span_id = int(record.trace_id, 16), int(record.span_id, 16)
        context = None
        if record.parent_span_id is not None:
            parent = SpanContext(
                int(record.trace_id, 16), int(record.parent_span_id, 16), True, TraceFlags(TraceFlags.SAMPLED)
            )
            context = trace.set_span_in_context(NonRecordingSpan(parent))
        span = self.tracer.start_span(
            record.name, context=context, attributes=record.attributes, start_time=_ns(record.start)
        )
        span.set_status(Status(StatusCode.OK) if record.ok else Status(StatusCode.ERROR, record.status_message))
        span.end(end_time=_ns(record.end))

    def flush(self) -> bool:
        return self.provider.force_flush(int(self.timeout_s * 1000))

    def close(self) -> None:
        self.provider.shutdown()


def _ns(moment: Any) -> int:
    return int(moment.timestamp() * 1_000_000_000)


class TelemetryLoop:
    """Beside dispatch: finished attempts and tasks from the event log, as spans, to the collector."""

    def __init__(self, config: Config, db: AsyncStore, clock: Clock, sender: SpanSender) -> None:
        self.config, self.db, self.clock, self.sender = config, db, clock, sender
        self.cursor_path = config.paths.state_dir / CURSOR_FILE

    @classmethod
    def of(cls, config: Config, db: AsyncStore, clock: Clock) -> TelemetryLoop | None:
        """The loop when [telemetry] otlp_endpoint is set; a ConfigError when the SDK is not installed."""
        section = config.telemetry
        if section.otlp_endpoint is None:
            return None
        if (why := sdk_missing()) is not None:
            raise ConfigError([Problem(str(config.path), "telemetry.otlp_endpoint", f"set, but {why}")])
        sender = SpanSender(
            section.otlp_endpoint, section.export_timeout_s, section.service_name, config.agent.agent_id
        )
        return cls(config, db, clock, sender)

    async def run(self) -> None:
        """Until cancelled: a pass every interval_s; a pass that fails is logged and tried again."""
        try:
            while True:
                with contained(logger, "telemetry_pass_failed"):
                    await self.pass_once()
                await anyio.sleep(self.config.telemetry.interval_s)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.sender.close)  # what is queued gets one last try

    async def pass_once(self) -> int:
        """Send the spans of what finished since the cursor; returns how many were handed over."""
        after = await anyio.to_thread.run_sync(self._cursor)
        events = await self.db.read(Store.read_events, after=after, limit=BATCH)
        sent = 0
        for event in events:
            for record in await self._spans_of(event):
                self.sender.send(record)
                sent += 1
        if events:
            await anyio.to_thread.run_sync(self._save, events[-1].sequence)
        return sent

    async def _spans_of(self, event: RuntimeEvent) -> list[SpanRecord]:
        if event.type not in ("task_attempt_finished", "task_finished") or event.task_id is None:
            return []
        task_events = await self.db.read(Store.read_events, task_id=event.task_id, limit=100_000)
        agent_id = self.config.agent.agent_id
        if event.type == "task_finished":
            found = task_span(agent_id, [e for e in task_events if e.sequence <= event.sequence])
            return [found] if found is not None else []
        return attempt_spans(agent_id, task_events, event.attempt_id or "")

    def _cursor(self) -> int:
        """The last sequence sent; at the first start, the chain's head (what happened before is not sent)."""
        try:
            return int(self.cursor_path.read_text().strip() or 0)
        except FileNotFoundError:
            head = _head(self.config.paths.state_dir)
            self._save(head)
            return head
        except ValueError:
            logger.warning("telemetry: %s is not a number; sending on from the chain's head", self.cursor_path)
            head = _head(self.config.paths.state_dir)
            self._save(head)
            return head

    def _save(self, sequence: int) -> None:
        temporary = self.cursor_path.with_name(CURSOR_FILE + ".tmp")
        temporary.write_text(f"{sequence}\n")
        os.replace(temporary, self.cursor_path)


def _head(state_dir: Path) -> int:
    """The published chain head's sequence (`<state_dir>/chain_head`, SEQ:HASH), 0 when there is none."""
    try:
        return int((state_dir / "chain_head").read_text().split(":", 1)[0])
    except (OSError, ValueError):
        return 0


def spans_of_task(agent_id: str, events: list[RuntimeEvent]) -> Iterator[SpanRecord]:
    """Every span of a task's events (for `agentd evidence export` and tests)."""
    for attempt_id in dict.fromkeys(e.attempt_id for e in events if e.attempt_id is not None):
        yield from attempt_spans(agent_id, events, attempt_id)
    root = task_span(agent_id, events)
    if root is not None:
        yield root
