"""What the dispatcher says about itself (docs/operate.md, "What `agentd status` calls live"): its status
line (systemd's STATUS=, its service row, `agentd status`), the idle outlook and the budget hold it last
saw, and the events that mark them once (`dispatch_idle`, `budget_held`). The dispatcher's loop tells it
what happened (a claim ran, nothing was claimable); it keeps what that means for what is shown."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from agentd.clock import Clock, age, format_ts
from agentd.config import Config
from agentd.config.budget import BudgetHold
from agentd.config.budget import describe as budget_line
from agentd.outlook.status import BudgetOutlook, IdleOutlook, budget_outlook, idle_outlook
from agentd.process.wake import Doorbell
from agentd.services.shell import Shell
from agentd.store import AsyncStore, Store

logger = logging.getLogger("agentd.services.dispatch")


class DispatchView:
    def __init__(self, config: Config, db: AsyncStore, clock: Clock, shell: Shell, doorbell: Doorbell) -> None:
        self.config, self.db, self.clock, self.shell, self.doorbell = config, db, clock, shell, doorbell
        self.held: tuple[BudgetHold, int] | None = None  # what the budget held back at the last claim
        self.idle: IdleOutlook | None = None  # the pause and what waits, as the last claim that found nothing saw
        self._idle_fresh = False  # `idle` was read by this tick: the line it publishes need not read again
        self._idle_noted = False  # dispatch_idle written for this stretch of idleness
        self._published = ""  # the state the service row was last written for (`publish`)

    def ran(self) -> None:
        """A claim was taken: whatever held or idled the dispatcher before is over."""
        self.held, self.idle, self._idle_noted = None, None, False

    def published(self, state: str) -> None:
        """The service row says `state` already (written inside the outcome commit that claimed it)."""
        self._published = state

    async def budget(self, now: datetime) -> BudgetOutlook | None:
        """What the day's spend holds back ([budget]); no read at all when nothing is capped."""
        return await self.db.call(budget_outlook, self.config, now) if self.config.budget.capped else None

    async def nothing_claimed(self, now: datetime, outlook: BudgetOutlook | None) -> bool:
        """The claim found nothing: read what waits (for the line this tick publishes) and say whether the
        dispatcher is paused; if not, note what the budget held back."""
        self.idle, self._idle_fresh = await self.db.call(idle_outlook, now), True
        if self.idle.pause is not None:  # the operator paused it: nothing is claimed until `dispatch resume`
            return True
        await self._note_budget(outlook, now)
        return False

    async def _note_budget(self, outlook: BudgetOutlook | None, now: datetime) -> None:
        """If the budget held tasks back, say so (an event once per hold, the status line while it lasts)."""
        if outlook is None or outlook.hold is None or not outlook.waiting:
            self.held = None
            return
        hold = outlook.hold
        if self.held is None or self.held[0].reason != hold.reason:
            logger.info("%s", budget_line(hold, outlook.waiting))
            payload = {"waiting": outlook.waiting, "reason": hold.reason, "until": format_ts(hold.until)}
            await self.db.call(Store.record_event, "budget_held", now, payload)
        self.held = (hold, outlook.waiting)

    def state(self, running_task: int | None, stopping: bool) -> str:
        """What the dispatcher is doing, as a key that changes only when its state does (not with a
        count or the time): running which task, stopping, paused, held by the budget, or idle."""
        if running_task is not None:
            return f"running task {running_task}"
        if stopping:
            return "stopping"
        if self.idle is not None and self.idle.pause is not None:
            return f"paused {self.idle.pause.paused_at}"
        return f"budget {self.held[0].reason}" if self.held is not None else "idle"

    async def publish(self, state: str, line: Callable[[], Awaitable[str]]) -> None:
        """Write the status line to the service row when the state changed (an attempt began or
        ended, a pause, a budget hold), so `agentd status` never shows the attempt rows one thing and
        the service row another until the next refresh; one write per change, none per idle tick."""
        if state != self._published:
            self._published = state
            await self.shell.publish(line)

    async def line(self, running: str | None, stopping: bool) -> str:
        """What the dispatcher is doing, in one line: systemd's STATUS=, `agentd status`, the logs."""
        if running is not None:
            return f"stopping: waiting for {running}" if stopping else running
        if stopping:
            return "stopping"
        now = self.clock.now()
        idle, self._idle_fresh = self.idle if self._idle_fresh else None, False
        if idle is None:
            idle = await self.db.call(idle_outlook, now)
        return self._idle_line(now, idle)

    async def sleep_until_due(self, stopping: bool) -> None:
        """Until the next task or schedule falls due (as the tick that found nothing saw it), the
        poll ceiling, or the doorbell."""
        now = self.clock.now()
        idle = self.idle if self.idle is not None else await self.db.call(idle_outlook, now)
        upcoming = idle.upcoming
        delay = self.config.dispatch.poll_ceiling_s
        if self.held is not None:  # a new UTC day is a new budget
            upcoming = min(upcoming or self.held[0].until, self.held[0].until)
        if upcoming is not None:
            delay = min(delay, (upcoming - now).total_seconds())
        if not self._idle_noted:
            await self.db.call(Store.record_event, "dispatch_idle", now, {"next_due_in_s": round(delay, 3)})
            self._idle_noted = True
        if not stopping:
            self.shell.status(self._idle_line(now, idle))
        await self.doorbell.wait(delay)

    def _idle_line(self, now: datetime, idle: IdleOutlook) -> str:
        if idle.pause is not None:
            return idle.pause.describe()
        if self.held is not None:
            return budget_line(*self.held)
        return idle_line(idle, now)


def idle_line(idle: IdleOutlook, now: datetime) -> str:
    """The idle dispatcher's line. It counts the tasks claimable now, and says "claimable" as the console
    and `agentd status` do: "pending" there counts held and delayed tasks too (issue 40)."""
    later = f", next due in {age((idle.upcoming - now).total_seconds())}" if idle.upcoming else ""
    return f"idle, {idle.waiting} claimable{later}"
