"""This agent's side of a fleet (docs/fleet.md): the intake that feeds the local queue from the
fleet's queue on PostgreSQL, and the confirmation every fleet task needs before an attempt of it starts.

It runs inside `agentd dispatch` when `[fleet] dsn_file` is set. Every round it writes back the results
of fleet tasks that finished here (with their token), renews the leases of those that wait or run, which
confirms them for a short window (the local claim takes a fleet task only inside it: store/budget.py
CONFIRMED), and claims as many new ones as `[fleet] max_local` leaves room for. An attempt's end clears
its task's confirmation and rings for a round at once. PostgreSQL is only ever asked in short
transactions on a worker thread, so an outage or a partition slows nothing but the fleet's own work:
local tasks keep running, fleet tasks wait (not started) until the fleet answers again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import anyio.to_thread
from pydantic import ValidationError

from agentd.adapters.routes import credential_group, key_digest
from agentd.clock import Clock
from agentd.config import Config
from agentd.config.environment import read_dsn_file, read_env_file
from agentd.config.gateway import upstream_of
from agentd.edge import UnusableFile
from agentd.errors import InputError, SchemaMismatch, contained
from agentd.gateway.resets import MAX_AHEAD
from agentd.outlook.metrics import DispatchMetrics, NullMetrics
from agentd.process.wake import Doorbell
from agentd.records import CredentialGroup, ProviderReset, TaskIntent
from agentd.records.fleet import FleetOrigin
from agentd.store import AsyncStore, FleetQueue, FleetUnavailable, HeldLease, Lease, Store, Taken
from agentd.work.intake import admit_task

logger = logging.getLogger(__name__)
T = TypeVar("T")

MAX_CLAIM = 16  # tasks one claim takes at most, whatever room max_local leaves


def fleet_result(store: Store, task_id: int) -> dict[str, Any]:
    """What the fleet is told of a finished task: the facts of its record, the last attempt's sealed
    manifest and this agent's event chain head, so the fleet view can point an auditor at the evidence
    (`agentd evidence verify`)."""
    facts = store.fleet_task_facts(task_id)
    attempt_id = facts["attempt_id"]
    sealed = store.sealed_manifests(attempt_id).get(attempt_id) if attempt_id else None
    head = store.chain_head()
    return {
        **facts,
        "manifest_sha256": sealed[1] if sealed else None,
        "chain_head": {"sequence": head[0], "hash": head[1]} if head else None,
    }


def credentials_of(config: Config) -> dict[str, list[CredentialGroup]]:
    """This agent's provider credentials by the fleet's name for each (a digest of the provider's origin and its
    key), read from the adapters' env_files: who a reset another agent heard holds back here."""
    found: dict[str, list[CredentialGroup]] = {}
    for adapter_id, adapter in config.adapters.items():
        env_file = getattr(adapter, "env_file", None)
        try:
            secrets = read_env_file(Path(env_file)) if env_file else {}
        except (OSError, UnusableFile):
            continue
        upstream = upstream_of(adapter, secrets)
        key = secrets.get(upstream.key_var, "") if upstream is not None and upstream.key_var else ""
        group = credential_group(config, adapter_id)
        if upstream is not None and key and group is not None:
            digest = key_digest(upstream.base_url, key)
            if group not in found.setdefault(digest, []):
                found[digest].append(group)
    return found


def fleet_status(local_status: str) -> Literal["completed", "failed"]:
    """A finished local task as the fleet counts it: completed, or failed (the local status says how)."""
    return "completed" if local_status == "completed" else "failed"


def read_dsn(path: Path) -> str:
    """config/environment.py's read_dsn_file. :raises FleetUnavailable: the file cannot be used, and why."""
    try:
        return read_dsn_file(path)
    except UnusableFile as exc:
        raise FleetUnavailable(f"[fleet] dsn_file: {exc}") from None


class FleetLink:
    """The intake loop and the confirmation, each over a connection of its own."""

    def __init__(
        self, config: Config, db: AsyncStore, clock: Clock, metrics: DispatchMetrics | NullMetrics, doorbell: Doorbell
    ) -> None:
        assert config.fleet.dsn_file is not None
        self.config, self.settings, self.db, self.clock = config, config.fleet, db, clock
        self.metrics, self.doorbell = metrics, doorbell
        self.agent = config.agent.agent_id
        self.dsn_file = config.fleet.dsn_file
        self.wake = Doorbell()  # rung when a fleet task ends here: its result goes back at once
        self._queues: dict[str, FleetQueue] = {}
        self._limiters = {"intake": anyio.CapacityLimiter(1)}
        self._down: str | None = None  # why the fleet is unreachable, while it is (logged once)
        self._deferred: set[int] = set()  # the tasks told they wait for the fleet, this outage

    @classmethod
    def of(
        cls, config: Config, db: AsyncStore, clock: Clock, metrics: DispatchMetrics | NullMetrics, doorbell: Doorbell
    ) -> FleetLink | None:
        if config.fleet.dsn_file is None:
            return None
        return cls(config, db, clock, metrics, doorbell)  # config check made sure psycopg is there

    @property
    def round_s(self) -> float:
        """Between two rounds: poll_s, but often enough to renew every lease three times in its life."""
        return min(self.settings.poll_s, self.settings.lease_s / 3)

    @property
    def confirmed_s(self) -> float:
        """How long a renewal confirms a lease for an attempt to start: two rounds, so a fleet task waiting
        here stays claimable while the fleet answers, and its lease has most of lease_s left when it starts."""
        return 2 * self.round_s

    async def run(self) -> None:
        """Round after round until cancelled; an unreachable fleet is logged once and tried again, and a
        round that fails otherwise is logged and retried: only an unusable disk ends the service."""
        while True:
            with contained(logger, "fleet_round_failed: retrying in %.0fs", self.round_s):
                await self.step()
            await self.wake.wait(self.round_s)

    async def step(self) -> None:
        """One round; an unreachable fleet is said once, and its tasks waiting here are told they wait."""
        try:
            await self.round()
        except FleetUnavailable as exc:
            self._unreachable("intake", str(exc))
            await self._defer(str(exc))

    async def round(self) -> None:
        await self._share_resets()
        held = await self.db.read(Store.fleet_leases_held)
        for lease in [lease for lease in held if lease.finished]:
            await self._report(lease)
        waiting = [lease for lease in held if not lease.finished]
        tokens = {lease.fleet_id: lease.token for lease in waiting}
        lost = await self._ask("intake", FleetQueue.renew_all, tokens, self.settings.lease_s)
        for lease in waiting:
            if lease.fleet_id in lost:
                await self._lost(lease.task_id, f"renewal refused: token {lease.token} is no longer the fleet's")
        await self._confirmed([lease.task_id for lease in waiting if lease.fleet_id not in lost])
        room = self.settings.max_local - (len(waiting) - len(lost))
        if room > 0:
            await self._claim(min(room, MAX_CLAIM))
        self.metrics.fleet_leases(len(await self.db.read(Store.fleet_leases_held)))

    async def _share_resets(self) -> None:
        """A provider's reset is the fleet's (docs/gateway.md, "Quotas and resets"): the resets this agent heard go
        up; those another agent heard for a credential this agent's adapters use come down, so no agent on the
        key claims into a limit the provider has already said is reached."""
        now = self.clock.now()
        resting = await self.db.read(Store.resting_credentials, now)
        for reset in (r for r in resting if r.fleet_credential):
            await self._ask(
                "intake", FleetQueue.publish_reset, reset.fleet_credential, reset.until, reset.reason, self.agent
            )
        known = {r.fleet_credential: r.until for r in resting if r.fleet_credential}
        mine = await anyio.to_thread.run_sync(credentials_of, self.config)
        for credential, until, reason, agent in await self._ask("intake", FleetQueue.provider_resets):
            if agent == self.agent or credential not in mine or (credential in known and known[credential] >= until):
                continue  # its own, none of this agent's business, or already held at least as long
            if until - now > MAX_AHEAD:
                continue  # no provider resets that far ahead: anyone with the DSN can write a row
            for group in mine[credential]:
                heard = ProviderReset(group, until, f"{reason} (heard from agent {agent})"[:2000], credential)
                await self.db.call(Store.record_provider_reset, heard, now)

    async def _claim(self, room: int) -> None:
        started = time.monotonic()
        types, labels = sorted(self.config.task_types), self.settings.labels
        leases = await self._ask("intake", FleetQueue.claim, self.agent, types, labels, self.settings.lease_s, room)
        self.metrics.fleet_claimed(len(leases), time.monotonic() - started)
        if not leases:
            return
        now = self.clock.now()
        judged = [(lease, self._judge(lease)) for lease in leases]
        taken = [verdict for _, verdict in judged if isinstance(verdict, Taken)]
        if taken:  # kept first: a refusal the fleet does not take (unreachable) must not cost the others
            until = now + timedelta(seconds=self.confirmed_s)  # the claim confirmed them
            await self.db.call(Store.record_fleet_claims, taken, now, until)
            self.doorbell.ring()  # the dispatcher claims it now, not at its next poll
            logger.info("fleet_claimed count=%d fleet_ids=%s", len(taken), ",".join(str(t.fleet_id) for t in taken))
        for lease, verdict in judged:
            if isinstance(verdict, str):
                await self._refuse(lease, verdict)

    def _judge(self, lease: Lease) -> Taken | str:
        """Each row is its own boundary (docs/fleet.md, "Poison in a row"): admitted, or the reason it is
        refused, whatever judging it raised; the other rows of its claim go on either way."""
        with contained(logger, "fleet_row_unjudged fleet_id=%d", lease.task.fleet_id) as failed:
            try:
                return self._admit(lease)
            except InputError as exc:
                return str(exc)
        return f"agentd could not judge it ({type(failed.error).__name__})"

    def _admit(self, lease: Lease) -> Taken:
        """Judged as `agentd task add` judges a task, and its origin as FleetOrigin; anything else is
        refused here and reported failed to the fleet with the reason."""
        task = lease.task
        if task.unreadable:  # what agentd cannot hold (agentd/store/fleet_rows.py), said column by column
            raise InputError("; ".join(task.unreadable.values()))
        try:
            origin = FleetOrigin.model_validate(task.origin)
            intent = TaskIntent.model_validate(
                {
                    "task_type": task.task_type,
                    "source": f"fleet:{task.fleet_id}",
                    "subject": task.subject,
                    "payload": task.payload,
                    "priority": task.priority,
                }
            )
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'task'}: {e['msg']}" for e in exc.errors())
            raise InputError(problems) from None
        new = admit_task(intent, self.config, self.clock.now(), trusted=False)
        return Taken(new, task.fleet_id, lease.token, origin.model_dump())

    async def _refuse(self, lease: Lease, reason: str) -> None:
        result = {"status": "refused", "summary": f"agent {self.agent} cannot run it: {reason}"[:2000]}
        if await self._ask("intake", FleetQueue.finish, lease.task.fleet_id, lease.token, "failed", result):
            self.metrics.fleet_reported("refused")
        logger.warning("fleet_task_refused fleet_id=%d reason=%s", lease.task.fleet_id, reason)

    async def _report(self, lease: HeldLease) -> None:
        result = {**await self.db.read(fleet_result, lease.task_id), "agent": self.agent}
        status = fleet_status(lease.status)
        if await self._ask("intake", FleetQueue.finish, lease.fleet_id, lease.token, status, result):
            await self.db.call(Store.fleet_lease_reported, lease.task_id, status, self.clock.now())
            self.metrics.fleet_reported(status)
        else:
            await self._lost(lease.task_id, f"result refused: token {lease.token} is no longer the fleet's")

    async def _lost(self, task_id: int, reason: str) -> None:
        done = await self.db.call(Store.fleet_lease_lost, task_id, reason, self.clock.now())
        self.metrics.fleet_lost()
        logger.warning("fleet_lease_lost task_id=%d %s", task_id, reason)
        if done == "requested":
            self.doorbell.ring()  # the running attempt's cancel watcher looks now

    # --- before an attempt ------------------------------------------------------------------------

    async def _confirmed(self, task_ids: list[int]) -> None:
        """The renewal just now confirmed these leases: their tasks may start for a while (confirmed_s),
        and the dispatcher is told when one waits to."""
        now = self.clock.now()
        until = now + timedelta(seconds=self.confirmed_s)
        if await self.db.call(Store.fleet_leases_confirmed, task_ids, now, until):
            self.doorbell.ring()
        self._deferred.clear()

    async def _defer(self, reason: str) -> None:
        """The fleet cannot be asked: its tasks waiting here wait, not started (their confirmation runs
        out), each told once for this outage (fleet_task_deferred)."""
        held = await self.db.read(Store.fleet_leases_held)
        waiting = [lease.task_id for lease in held if lease.status in ("pending", "retryable_failure")]
        new = [task_id for task_id in waiting if task_id not in self._deferred]
        if new:
            await self.db.call(Store.defer_fleet_tasks, new, reason, self.clock.now())
            self._deferred.update(new)

    # --- PostgreSQL, off the event loop ------------------------------------------------------------

    async def _ask(self, who: str, verb: Callable[..., T], *args: Any) -> T:
        """Run a FleetQueue verb on the caller's connection in a worker thread; a connection that failed
        is dropped (the next call connects again). :raises FleetUnavailable:"""

        def call() -> T:
            queue = self._queues.get(who)
            if queue is None or queue.broken:
                queue = FleetQueue.open(read_dsn(self.dsn_file))
                try:
                    queue.require_current()
                except SchemaMismatch as exc:
                    queue.close()
                    raise FleetUnavailable(str(exc)) from None
                self._queues[who] = queue
            return verb(queue, *args)

        try:
            answer = await anyio.to_thread.run_sync(call, limiter=self._limiters[who])
        except FleetUnavailable:
            self._drop(who)
            raise
        if self._down is not None:
            logger.info("fleet_reachable again after: %s", self._down)
            self._down = None
        self.metrics.fleet_reachable(True)
        return answer

    def _drop(self, who: str) -> None:
        queue = self._queues.pop(who, None)
        if queue is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close; it is gone either way
                queue.close()

    def _unreachable(self, who: str, why: str) -> None:
        self.metrics.fleet_reachable(False)
        if self._down is None:
            logger.warning("fleet_unreachable (%s): %s; fleet tasks wait, local work goes on", who, why)
            self._down = why

    def close(self) -> None:
        for who in list(self._queues):
            self._drop(who)
