"""The archiver (docs/backup-and-archive.md, "Archive", "Witnessed head"): in the sensor service, off every
attempt's path, it uploads each sealed attempt folder the queue holds (migration 0025) and, at most every
head_interval_s, the chain's new events and its head. A bucket that cannot be reached is tried again after a
backoff that doubles up to BACKOFF_MAX_S (on the injected clock); what was not uploaded stays queued, across
restarts, and goes when the bucket answers again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

import anyio

from agentd.archive.bucket import ArchiveUnavailable, Bucket, Retention
from agentd.archive.folder import pack_folder
from agentd.archive.location import Location, attempt_key, events_key, head_key
from agentd.clock import Clock, format_ts
from agentd.config import Config
from agentd.config.environment import read_archive_credentials as read_credentials
from agentd.edge import scrub
from agentd.errors import contained
from agentd.evidence.rollback import published_head
from agentd.process.files import Refused
from agentd.store import AsyncStore, QueuedFolder, Store
from agentd.store.events import CHAIN_COLUMNS

logger = logging.getLogger(__name__)

BACKOFF_FIRST_S = 2.0
BACKOFF_MAX_S = 300.0
BATCH = 64  # folders read from the queue at a time
ROUND_BATCHES = 16  # batches in one round before the head's turn
SEGMENT_EVENTS = 5000  # events per chain segment object
BACKGROUND_NICE = 10  # the upload threads' niceness: on a busy VM the attempts and the commits come first
T = TypeVar("T")


def _in_the_background() -> None:
    """An upload thread's own priority lowered (Linux schedules threads one by one): packing and signing uploads
    is background work, and on a VM of two cores it must not take the CPU the drain's attempts would use. Never
    the anyio worker threads: those also run the service's database calls, and a niceness cannot be raised back."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux, or not allowed: the normal priority, then
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)


def backoff_s(failures: int) -> float:
    """The wait after `failures` failures in a row: 2 s, 4 s, 8 s … up to BACKOFF_MAX_S."""
    return float(min(BACKOFF_FIRST_S * 2 ** max(failures - 1, 0), BACKOFF_MAX_S))


@dataclass
class Round:
    """What one round did: folders uploaded, the head witnessed (if it was), and why the bucket is down."""

    uploaded: int = 0
    witnessed: tuple[int, str] | None = None
    down: str | None = None
    held_back: list[str] = field(default_factory=list)  # attempt ids whose folder could not be packed
    more: bool = False  # a backlog is left: the next round comes at once


async def archive_beside(config: Config, db: AsyncStore, clock: Clock) -> None:
    """The archiver's rounds until cancelled, beside the sensor service's runs (docs/decisions.md, "The evidence
    archive (issue 54)": why there). Without [archive] (any more), archiving is turned off: nothing is queued from
    now on, and what was queued is forgotten (retention may take those folders again)."""
    if config.archive.enabled:
        await Archiver(config, db, clock).run()
        return
    with contained(logger, "archive_off_failed: the queue is kept until the next start"):
        await db.call(Store.set_archiving, False)


class Archiver:
    """Uploads over one boto3 client (thread-safe), `concurrency` at a time, on threads of its own at a lower
    priority (BACKGROUND_NICE)."""

    def __init__(self, config: Config, db: AsyncStore, clock: Clock) -> None:
        assert config.archive.enabled
        self.config, self.settings, self.db, self.clock = config, config.archive, db, clock
        self.agent = config.agent.agent_id
        self.location = Location.of(config.archive)
        self._bucket: Bucket | None = None
        self._failures = 0
        self._stale = False  # a request failed: the next one makes the client again
        self.retry_at: datetime | None = None
        self.down: str | None = None
        self._limiter = anyio.CapacityLimiter(self.settings.concurrency)
        self._threads = ThreadPoolExecutor(
            self.settings.concurrency + 1, thread_name_prefix="agentd-archive", initializer=_in_the_background
        )

    async def start(self) -> None:
        """Archiving on: the queue fills from every outcome commit from now on (and with every sealed folder
        still on disk, the first time)."""
        queued = await self.db.call(Store.set_archiving, True)
        if queued:
            logger.info("archive_enabled queued=%s bucket=%s", queued, self.location.url)

    async def run(self) -> None:
        """Round after round until cancelled; a round that fails otherwise is logged and the next one comes."""
        started = False
        try:
            while True:
                done = Round()  # a round that raised: the next one after poll_s, never at once
                with contained(logger, "archive_round_failed: retrying in %.0fs", self.settings.poll_s):
                    if not started:  # a start that failed (the database busy past its wait) is tried again
                        await self.start()
                        started = True
                    done = await self.step(self.clock.now())
                await anyio.sleep(0 if done.more else self.settings.poll_s)
        finally:
            self._threads.shutdown(wait=False, cancel_futures=True)

    async def step(self, now: datetime) -> Round:
        """One round: every due folder uploaded, then the head witnessed if it moved and is due. Nothing while
        the backoff after a failure lasts."""
        done = Round()
        if self.retry_at is not None and now < self.retry_at:
            done.down = self.down
            return done
        try:
            await self._upload_due(now, done)
            done.witnessed = await self._witness_if_due(now)
        except ArchiveUnavailable as exc:
            self._failures += 1
            self._stale = True
            self.retry_at = now + timedelta(seconds=backoff_s(self._failures))
            if self.down is None:
                logger.warning("archive_unreachable: %s; trying again from %s", exc, format_ts(self.retry_at))
            self.down = done.down = scrub(str(exc))[:500]
            return done
        if self.down is not None:
            logger.info("archive_reachable again after %s failed round(s)", self._failures)
        self._failures, self.retry_at, self.down = 0, None, None
        return done

    # --- attempt folders ------------------------------------------------------------------------------

    async def _upload_due(self, now: datetime, done: Round) -> None:
        """Due folders, BATCH at a time, up to ROUND_BATCHES batches: a backlog larger than that leaves `more` set
        and goes on in the next round at once, after the head's turn (never starved by a queue that keeps filling)."""
        for _ in range(ROUND_BATCHES):
            due = await self.db.read(Store.archive_due, now, BATCH)
            if not due:
                return
            uploaded: list[str] = []
            failed: list[ArchiveUnavailable] = []
            async with anyio.create_task_group() as group:
                for queued in due:
                    group.start_soon(self._upload_guarded, queued, now, uploaded, failed, done)
            await self.db.call(Store.folders_archived, uploaded)
            done.uploaded += len(uploaded)
            if failed:
                raise failed[0]
            if len(due) < BATCH:
                return
        done.more = True

    async def _upload_guarded(
        self, queued: QueuedFolder, now: datetime, uploaded: list[str], failed: list[ArchiveUnavailable], done: Round
    ) -> None:
        try:
            async with self._limiter:  # `concurrency` at once; the others wait here, and look again
                if failed:  # the bucket is down: the rest of the batch waits for the next round
                    return
                await self._off_loop(self._upload, queued, now)
        except ArchiveUnavailable as exc:
            failed.append(exc)
        except (OSError, Refused) as exc:  # the folder, not the bucket: this one waits, the others go
            why = f"{type(exc).__name__}: {scrub(str(exc))[:300]}"
            tried = now + timedelta(seconds=backoff_s(queued.tries + 1))
            await self.db.call(Store.archive_failed, queued.attempt_id, why, tried)
            logger.warning("archive_folder_failed attempt=%s: %s", queued.attempt_id, why)
            done.held_back.append(queued.attempt_id)
        else:
            uploaded.append(queued.attempt_id)

    def _upload(self, queued: QueuedFolder, now: datetime) -> None:
        root = self.config.paths.state_dir / "attempts" / str(queued.task_id) / queued.attempt_id
        body = pack_folder(root)
        metadata = {
            "manifest-sha256": queued.manifest_sha256 or "none",
            "task-id": str(queued.task_id),
            "attempt-id": queued.attempt_id,
            "sequence": str(queued.sequence),
        }
        self.bucket().put(attempt_key(queued.task_id, queued.attempt_id), body, metadata, self._retention(now))

    # --- the chain and its head -----------------------------------------------------------------------

    async def _witness_if_due(self, now: datetime) -> tuple[int, str] | None:
        """The head the services published beside the database (durable: agentd/evidence/rollback.py), with the
        events up to it, if it moved and head_interval_s has passed since the last one."""
        progress = await self.db.read(Store.archive_progress)
        if progress.head_at is not None and (now - progress.head_at).total_seconds() < self.settings.head_interval_s:
            return None
        head = published_head(self.config.paths.state_dir)
        if head is None or head == progress.head:
            return None
        await self._send_chain(progress.events_through, head[0], now)
        body = json.dumps(
            {"agent": self.agent, "sequence": head[0], "hash": head[1], "witnessed_at": format_ts(now)}, sort_keys=True
        )
        metadata = {"sequence": str(head[0]), "hash": head[1]}
        retention = self._retention(now)
        fresh = await self._off_loop(
            lambda: self.bucket().put(head_key(head[0]), body.encode(), metadata, retention, only_if_absent=True)
        )
        if not fresh:
            logger.info("archive_head_known sequence=%s: witnessed before, kept as it was", head[0])
        await self._witness_in_fleet(head)
        await self.db.call(Store.head_witnessed, head, now)
        logger.info("archive_head_witnessed sequence=%s hash=%s", head[0], head[1][:12])
        return head

    async def _send_chain(self, after: int, through: int, now: datetime) -> None:
        """The events after `after` through `through`, in segments of SEGMENT_EVENTS, each row whole."""
        while after < through:
            rows = await self.db.read(Store.chain_rows, after, through, SEGMENT_EVENTS)
            if not rows:
                return
            first, last = rows[0][CHAIN_COLUMNS.index("sequence")], rows[-1][CHAIN_COLUMNS.index("sequence")]
            text = "".join(json.dumps(dict(zip(CHAIN_COLUMNS, row, strict=True))) + "\n" for row in rows)
            metadata, retention = {"events": str(len(rows))}, self._retention(now)
            await self._off_loop(self._put, events_key(first, last), text.encode(), metadata, retention)
            await self.db.call(Store.chain_archived, last)
            after = last

    async def _witness_in_fleet(self, head: tuple[int, str]) -> None:
        """The head into the fleet's PostgreSQL too, when this agent has a fleet: a second witness. A fleet that
        cannot be reached is logged; the bucket's witness stands."""
        dsn_file = self.config.fleet.dsn_file
        if dsn_file is None:
            return

        def witness() -> None:
            from agentd.config.environment import read_dsn_file
            from agentd.store import FleetQueue

            queue = FleetQueue.open(read_dsn_file(dsn_file))
            try:
                queue.witness_head(self.agent, head[0], head[1])
            finally:
                queue.close()

        with contained(logger, "archive_fleet_head_failed sequence=%s: the bucket's witness stands", head[0]):
            await self._off_loop(witness)

    async def _off_loop(self, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` on one of the archiver's own (lower-priority) threads."""
        return await asyncio.wrap_future(self._threads.submit(work, *args))

    # --- the bucket -----------------------------------------------------------------------------------

    def bucket(self) -> Bucket:
        """The client, made at first use; its credentials read again after each failure (a rotated key)."""
        if self._bucket is None or self._stale:
            assert self.settings.credentials_file is not None
            try:
                credentials = read_credentials(self.settings.credentials_file)
            except Exception as exc:  # ConfigError or OSError: said, and tried again later
                raise ArchiveUnavailable(f"[archive] credentials_file: {exc}") from None
            self._bucket = Bucket(self.location, self.agent, credentials, timeout_s=self.settings.timeout_s)
            self._stale = False
        return self._bucket

    def _put(self, key: str, body: bytes, metadata: dict[str, str], retention: Retention | None) -> None:
        self.bucket().put(key, body, metadata, retention)

    def _retention(self, now: datetime) -> Retention | None:
        days = self.settings.retention_days
        return Retention(self.settings.lock_mode, now + timedelta(days=days)) if days else None
