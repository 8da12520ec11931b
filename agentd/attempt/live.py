"""Live activity: while an attempt runs, what its agent does becomes events in the chain (docs/live.md).

A `LiveWatcher` tails the attempt's stdout.log (claude-code, codex: their JSON streams) or a script's
$AGENTD_PROGRESS_PATH every TICK_S, turns new lines into activity (agentd/adapters/activity.py) and
writes each tick's events in one transaction. At most BURST events at once and RATE_PER_S after, at
most MAX_EVENTS per attempt: what is held back is counted and said once, at the end, in
`activity_capped` (the sealed action trace still has every step). Nothing here can fail the attempt:
a fault is logged and the watching stops; the attempt runs on.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from agentd.adapters.activity import Activity, EventText, StreamParser, progress, stream_parser
from agentd.adapters.script import PROGRESS_FILE
from agentd.attempt.prepare import Prepared
from agentd.clock import Clock, format_ts
from agentd.errors import contained
from agentd.process.files import Refused, open_beneath
from agentd.redaction import Redactor
from agentd.store import AsyncStore, Store

logger = logging.getLogger(__name__)

TICK_S = 0.25  # one transaction per tick at most: the attempt's writes are batched, never one per event
BURST = 20  # events written at once after a quiet spell
RATE_PER_S = 10.0  # events per second after that (a person reads a few a second)
MAX_EVENTS = 2_000  # per attempt, activity_capped included (~1 MB of events at most)
READ_MAX_BYTES = 4 * 1024 * 1024  # read per tick from one file: a flood is read over several ticks
LAST_READS = 4  # more reads once the process ended: up to 20 MiB of what it wrote last
LINE_MAX_BYTES = 1024 * 1024  # a longer JSON line is skipped (a tool result holding a whole file)
PROGRESS_LINE_MAX_BYTES = 4096  # a longer progress line is cut


class Lines:
    """Whole lines out of the bytes a file grows by. A line longer than `limit` is cut (`keep_long`:
    its head is given as the line) or skipped, and what follows it up to its newline is discarded."""

    def __init__(self, limit: int, keep_long: bool) -> None:
        self.limit, self.keep_long = limit, keep_long
        self.partial = bytearray()
        self.discarding = False
        self.skipped = 0

    def feed(self, data: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            lines += self._ended(data[start:end])
            start = end + 1
        return lines + self._add(data[start:])

    def rest(self) -> list[bytes]:
        """At the end of the stream: the last line, if it has no newline."""
        found = [] if self.discarding or not self.partial else [bytes(self.partial)]
        self.partial.clear()
        return found

    def _ended(self, piece: bytes) -> list[bytes]:
        if self.discarding:  # the rest of a line already cut or skipped
            self.discarding = False
            return []
        line = bytes(self.partial) + piece
        self.partial.clear()
        return self._long(line) if len(line) > self.limit else [line]

    def _add(self, piece: bytes) -> list[bytes]:
        if self.discarding:
            return []
        self.partial += piece
        if len(self.partial) <= self.limit:
            return []
        line = bytes(self.partial)
        self.partial.clear()
        self.discarding = True
        return self._long(line)

    def _long(self, line: bytes) -> list[bytes]:
        if self.keep_long:
            return [line[: self.limit]]
        self.skipped += 1
        return []


@dataclass
class Budget:
    """A token bucket (BURST, RATE_PER_S) under a cap (MAX_EVENTS, one kept for activity_capped)."""

    at: float
    tokens: float = BURST
    written: int = 0
    dropped: int = 0

    def admit(self, events: list[Activity], now: float) -> list[Activity]:
        """The events there is room for now; the rest are counted as dropped."""
        kept = events[: self.room(now)]
        self.take(len(kept))
        self.dropped += len(events) - len(kept)
        return kept

    def room(self, now: float) -> int:
        self.tokens = min(BURST, self.tokens + (now - self.at) * RATE_PER_S)
        self.at = now
        return max(0, min(int(self.tokens), MAX_EVENTS - 1 - self.written))

    def take(self, count: int) -> None:
        self.tokens -= count
        self.written += count


@dataclass
class Source:
    """A file the watcher tails: `folder`/`name`, opened without following a link every time (the
    attempt may replace it between two reads)."""

    folder: Path
    name: str
    lines: Lines
    owner: int | None = None  # whose the file must be (the run user's progress file); None: anyone's
    offset: int = 0
    refused: str | None = None

    def grown(self) -> bool:
        try:
            return os.stat(self.folder / self.name, follow_symlinks=False).st_size != self.offset
        except OSError:
            return False

    def read(self) -> list[bytes]:
        if self.refused is not None:
            return []
        try:
            with open_beneath(self.folder, self.name, self.owner) as fd:
                size = os.fstat(fd).st_size
                if size < self.offset:  # replaced or truncated: read the new one from its start
                    self.offset = 0
                data = os.pread(fd, min(size - self.offset, READ_MAX_BYTES), self.offset)
        except FileNotFoundError:
            return []
        except Refused as exc:
            self.refused = str(exc)
            logger.warning("live activity: %s/%s is refused and no longer read: %s", self.folder, self.name, exc)
            return []
        self.offset += len(data)
        return self.lines.feed(data)


@dataclass
class LiveWatcher:
    prepared: Prepared
    db: AsyncStore
    clock: Clock
    source: Source
    parser: StreamParser | None  # None: the source is a script's progress lines
    event_text: EventText
    budget: Budget = field(default_factory=lambda: Budget(anyio.current_time()))
    todos: Activity | None = None  # the newest todo list not yet written (only the newest matters)
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    done: bool = False

    async def run(self) -> None:
        """Tick until the attempt ends (the caller cancels this) or the watching fails."""
        while not self.done:
            await anyio.sleep(TICK_S)
            if self.source.grown() or self.todos is not None:
                await self._guarded(self._tick)

    async def finish(self) -> None:
        """The attempt's process ended: read what it wrote last, and say what was held back."""
        await self._guarded(self._last)

    async def _guarded(self, step: Callable[[], Awaitable[None]]) -> None:
        async with self.lock:
            if self.done:
                return
            # live activity is a view: its failure never fails the attempt
            with contained(logger, "live activity of attempt %s stopped", self.prepared.attempt_id) as failed:
                await step()
            if failed.error is not None:
                self.done = True

    async def _tick(self, last: bool = False) -> None:
        at = self.clock.now()
        found: list[Activity] = []
        if self.source.grown() or (last and self.source.offset):  # an attempt with no activity pays no read
            found = await anyio.to_thread.run_sync(self._read, format_ts(at), last)
        events = self._coalesce(found)
        events = self.budget.admit(events, anyio.current_time())
        if self.todos is not None and self.budget.room(anyio.current_time()):  # waits for room, never dropped
            self.budget.take(1)
            events.append(self.todos)
            self.todos = None
        await self._write(events, at)

    async def _last(self) -> None:
        await self._tick(last=True)
        self.done = True
        dropped = self.budget.dropped + (1 if self.todos is not None else 0)
        if dropped:
            payload = {"dropped": dropped, "max_events": MAX_EVENTS, "rate_per_s": RATE_PER_S}
            await self._write([Activity("activity_capped", payload)], self.clock.now())

    def _read(self, at: str, last: bool) -> list[Activity]:
        """On a worker thread: the new lines as activity (at the end, what the stream leaves open too)."""
        lines = self.source.read()
        for _ in range(LAST_READS if last else 0):  # the process is gone: what it left, not a tick's worth
            if not self.source.grown():
                break
            lines += self.source.read()
        found: list[Activity] = []
        for line in lines + (self.source.lines.rest() if last else []):
            found += self._activity(line, at)
        if last and self.parser is not None:
            found += self.parser.close(at)
        return found

    def _activity(self, line: bytes, at: str) -> list[Activity]:
        text = line.decode("utf-8", errors="replace")
        if self.parser is None:
            return progress(text, self.event_text)
        record = json_record(text)
        if record is None:
            return []
        try:
            return self.parser.feed(record, at)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):  # a shape no parser foresaw
            logger.debug("live activity: a record of attempt %s was not understood", self.prepared.attempt_id)
            return []

    def _coalesce(self, found: list[Activity]) -> list[Activity]:
        """Every event but todo lists, in order; the newest todo list waits in `todos` to be written."""
        for activity in found:
            if activity.type == "todos_updated":
                self.todos = activity
        return [activity for activity in found if activity.type != "todos_updated"]

    async def _write(self, events: list[Activity], at: Any) -> None:
        if not events:
            return
        task_id, attempt_id = self.prepared.task.task_id, self.prepared.attempt_id
        batch = [(event.type, event.payload) for event in events]
        await self.db.call(Store.record_activity, task_id, attempt_id, batch, at)


def json_record(text: str) -> dict[str, Any] | None:
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def redacting(redactor: Redactor) -> EventText:
    """Event text redacted by the attempt's own redactor, without counting into what its evidence
    reports as redacted (the evidence files are redacted, and counted, when the attempt ends)."""

    def redact(text: str) -> str:
        count = redactor.count
        try:
            return redactor.text(text)
        finally:
            redactor.count = count

    return EventText(redact, redactor.reach)


def watcher_for(prepared: Prepared, db: AsyncStore, clock: Clock) -> LiveWatcher | None:
    """The watcher of an attempt whose adapter has something to watch; None for the others."""
    ctx, event_text = prepared.ctx, redacting(prepared.redactor)
    parser = stream_parser(ctx.adapter.kind, prepared.attempt_id, event_text)
    if parser is not None:
        source = Source(ctx.paths.root, ctx.paths.stdout.name, Lines(LINE_MAX_BYTES, keep_long=False))
    elif ctx.adapter.kind == "script":
        source = Source(ctx.paths.run, PROGRESS_FILE, Lines(PROGRESS_LINE_MAX_BYTES, keep_long=True), ctx.reporter)
    else:
        return None
    return LiveWatcher(prepared, db, clock, source, parser, event_text)


def watch(prepared: Prepared, db: AsyncStore, clock: Clock, group: anyio.abc.TaskGroup) -> LiveWatcher | None:
    """Start watching the attempt in `group` (cancelled when the attempt ends); call `finish` on what
    this returns once the adapter is done."""
    watcher = watcher_for(prepared, db, clock)
    if watcher is not None:
        group.start_soon(watcher.run)
    return watcher
