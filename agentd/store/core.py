"""The Store: every verb group over one connection, opening, migrating, and the services' AsyncStore.
Imported by `agentd.store` the first time one of these is asked for (agentd/store/__init__.py)."""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

from agentd.clock import Clock
from agentd.edge import quoted
from agentd.errors import InputError, SchemaMismatch
from agentd.faults import os_storage_error, storage_error
from agentd.process.files import hand_over, private_folders, write_new
from agentd.records import AttemptEnd
from agentd.store.archive import ArchiveVerbs
from agentd.store.attempts import AttemptVerbs, BundleHistory
from agentd.store.backup import BackupVerbs
from agentd.store.base import SERVICE_BUSY_RETRY_S, connect
from agentd.store.budget import BudgetVerbs
from agentd.store.calls import CallVerbs
from agentd.store.charts import ChartVerbs
from agentd.store.claim import ClaimVerbs, Planner
from agentd.store.constitution import ConstitutionVerbs
from agentd.store.control import ControlVerbs
from agentd.store.deliveries import DeliveryVerbs
from agentd.store.ending import Ended, Follow, Followed, record_end
from agentd.store.events import ChainBreak, EventVerbs
from agentd.store.fleet_leases import FleetLeaseVerbs
from agentd.store.graph import GraphVerbs
from agentd.store.lock import LockVerbs
from agentd.store.migrations import (
    Migration,
    apply_migrations,
    available_migrations,
    require_current,
)
from agentd.store.outbox import OutboxVerbs
from agentd.store.resets import ResetVerbs
from agentd.store.retention import RetentionVerbs
from agentd.store.schedules import ScheduleVerbs
from agentd.store.sensing import SensingVerbs
from agentd.store.status import StatusVerbs
from agentd.store.steering import SteerVerbs
from agentd.store.tasks import TaskVerbs
from agentd.store.web import WebVerbs
from agentd.store.workflows import WorkflowVerbs

if TYPE_CHECKING:  # pydantic's records: what a tick hands over, built where it is read
    from agentd.records import DueSchedule, WorkflowRecord

__all__ = [
    "AsyncStore",
    "ChainBreak",
    "Ended",
    "Follow",
    "Followed",
    "Planner",
    "Store",
    "init_state_dir",
    "migrate",
    "open_store",
]

P = ParamSpec("P")
T = TypeVar("T")

DB_NAME = "agentd.db"


class Store(
    TaskVerbs,
    SteerVerbs,
    GraphVerbs,
    ClaimVerbs,
    AttemptVerbs,
    BudgetVerbs,
    CallVerbs,
    LockVerbs,
    OutboxVerbs,
    DeliveryVerbs,
    EventVerbs,
    SensingVerbs,
    WorkflowVerbs,
    ScheduleVerbs,
    StatusVerbs,
    RetentionVerbs,
    ControlVerbs,
    ConstitutionVerbs,
    FleetLeaseVerbs,
    WebVerbs,
    ChartVerbs,
    ResetVerbs,
    ArchiveVerbs,
    BackupVerbs,
):
    """Domain verbs over one connection, one group per concept (each extends StoreBase directly);
    each public verb is at most one transaction."""

    schema_version: int = 0

    def tick_intents(self, now: datetime) -> tuple[list[DueSchedule], list[WorkflowRecord], bool]:
        """What a dispatch tick acts on before its claim, in one read: the schedules due, the
        workflows awaiting a step task, and whether an outbox entry waits to be applied."""
        return self.due_schedules(now), self.workflows_awaiting_step(), self.outbox_waiting()

    def bundle_history(
        self,
        task_id: int,
        recent_items: int,
        workflow_id: int | None,
        *,
        calls: int = 0,
        spend_since: datetime | None = None,
    ) -> BundleHistory:
        """What an attempt's bundle reads, in one call: the task's earlier failed attempts and (`calls` of)
        their failed tool calls, the latest outcomes of other tasks (`recent_items` of them), the workflow the
        task is a step of, and (`spend_since`) what the day's attempts cost so far."""
        recent = self.recent_outcomes(recent_items, task_id) if recent_items else []
        workflow = self.get_workflow_or_raise(workflow_id) if workflow_id is not None else None
        return BundleHistory(
            self.failure_summaries(task_id),
            self.failed_calls(task_id, calls) if calls else [],
            recent,
            workflow,
            self.spend_since(spend_since) if spend_since is not None else None,
        )

    def end_attempt(self, end: AttemptEnd, follow: Follow | None = None) -> Ended:
        """The attempt's outcome commit (store/ending.py), one durable transaction. With `follow`, when
        the next task is claimable at once and nothing else is due first (the attempt asked for nothing
        after it, no schedule is due, no workflow awaits its step, no outbox entry waits), the claim of the
        next task and the service row saying it runs join that transaction: one fsync at the attempt
        boundary where there were three (docs/decisions.md, "Group commit")."""
        with self.transaction() as tx:
            record_end(tx, end)
            if follow is None or end.outbox or any(self.tick_intents(self.clock.now())):
                return Ended(end)
            claim = self.claim_next_task(self.clock.now(), follow.runner_id, follow.plan, follow.evidence_root)
            if claim is None:  # nothing due, paused, or a fleet task not yet confirmed
                return Ended(end)
            head = follow.report(self, claim) if claim.attempt is not None else None
            return Ended(end, Followed(claim, head))

    def idle_outlook(self, now: datetime) -> tuple[int, datetime | None]:
        """What an idle dispatcher needs in one read: tasks claimable now, and when the next task or
        schedule falls due."""
        due = [d for d in (self.next_due_at(now), self.next_schedule_due()) if d is not None]
        return self.waiting_count(now), min(due, default=None)


def open_store(path: Path, clock: Clock, migrations: list[Migration] | None = None, *, readonly: bool = False) -> Store:
    """Open an existing, fully migrated database; refuse one that is missing, behind or edited.
    `readonly` never writes (read-only commands; a read-only copy of a state dir)."""
    if not path.is_file():
        if path.parent.exists() and not os.access(path.parent, os.R_OK | os.X_OK):
            raise os_storage_error(PermissionError(13, "Permission denied", str(path.parent)))
        raise SchemaMismatch(f"no database at {path}; run `agentd init` (or `agentd migrate`) first")
    conn = connect(path, readonly=readonly)
    try:
        version = require_current(conn, migrations or available_migrations(), path)
    except BaseException:
        conn.close()
        raise
    store = Store(conn, clock, path)
    store.schema_version = version
    return store


AGENT_FILE = "agent_id"  # whose state dir this is: one agent per state dir


def own_state_dir(state_dir: Path, agent_id: str, *, bind: bool) -> None:
    """Refuse a state dir that names another agent: two agents' TOMLs naming one state_dir would mix
    their queues, event chains and evidence. `bind`: name this agent in a state dir that names none yet
    (`agentd init`, or the first writing command or service start on one from before the file). The
    name is published whole (written aside, then linked: never half a name, and the first agent wins)."""
    path = state_dir / AGENT_FILE
    owner = _state_dir_owner(path)
    if owner is None and bind and state_dir.is_dir():
        aside = state_dir / f".{AGENT_FILE}.{os.getpid()}"
        try:
            write_new(aside, agent_id + "\n")
            hand_over(aside, state_dir)  # bound by an operator as root: still the services' to read
            with contextlib.suppress(FileExistsError):
                os.link(aside, path)
        except OSError as exc:
            raise os_storage_error(exc, state_dir) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(aside)
        owner = _state_dir_owner(path)
    if owner is not None and owner != agent_id:
        raise InputError(
            f"{state_dir} is the state dir of agent {quoted(owner)} ({path}); this config is agent {agent_id!r}. "
            "Give each agent its own [paths] state_dir"
        )


def _state_dir_owner(path: Path) -> str | None:
    """The agent a state dir's AGENT_FILE names; None if it has none. Never through a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise os_storage_error(exc, path) from None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(1024).decode("utf-8", errors="replace").strip()


def init_state_dir(state_dir: Path, workspace: Path | None = None) -> None:
    """The state dir (0700) and, when given, the workspace; existing modes are tightened. A folder root
    makes in a state dir of another user's is that user's (process/files.py hand_over)."""
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        private_folders(state_dir / "attempts", state_dir)
        for directory in (state_dir, state_dir / "attempts"):
            if directory.stat().st_mode & 0o777 != 0o700:
                os.chmod(directory, 0o700)
        if workspace is not None:
            workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise os_storage_error(exc, state_dir) from None


def migrate(path: Path, clock: Clock, migrations: list[Migration] | None = None) -> list[Migration]:
    """Create the database if needed and apply pending migrations; return those applied."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise os_storage_error(exc, path.parent) from None
    conn = connect(path)
    try:
        try:
            applied = apply_migrations(conn, clock.now(), migrations or available_migrations())
        except sqlite3.Error as exc:
            raise storage_error(exc, path) or exc from None
        if applied:
            store = Store(conn, clock, path)
            with store.transaction() as tx:
                for migration in applied:
                    tx.event(
                        "migration_applied",
                        clock.now(),
                        payload={"version": migration.version, "name": migration.name, "checksum": migration.checksum},
                    )
        return applied
    finally:
        conn.close()


class AsyncStore:
    """Store verbs for the async services: `await db.call(Store.claim_next_task, now)`.

    One worker thread at a time touches the connection (the limiter), and each call runs a
    whole verb, so one transaction costs one thread hop. A cancelled caller still waits for
    the verb to finish: a transaction is never abandoned half-way.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        import anyio  # the services' (a command's one read needs no event loop)

        store.busy_retry_s = SERVICE_BUSY_RETRY_S  # a service waits out a long-held write lock
        self._limiter = anyio.CapacityLimiter(1)

    async def call(self, verb: Callable[Concatenate[Store, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        import anyio.to_thread

        bound = functools.partial(verb, self.store, *args, **kwargs)
        return await anyio.to_thread.run_sync(bound, limiter=self._limiter)

    async def read(self, verb: Callable[Concatenate[Store, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """A short read of indexed rows, on the event loop's own thread: in WAL a reader never waits
        for a writer, and a read of a few rows (~0.1 ms) costs less than the hop (~0.25–0.5 ms on
        a small VM). The limiter still keeps it off the connection while a verb runs."""
        async with self._limiter:
            return verb(self.store, *args, **kwargs)

    def close(self) -> None:
        self.store.close()
