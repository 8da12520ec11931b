"""A run's timeout that the attempt's governance can pause and end (docs/policy.md): held while a tool call
waits for a person, ended at once by a budget stop or a policy violation."""

from __future__ import annotations

import math

import anyio

POLICY_VIOLATION = "policy_violation"  # why a run a tool call ran in without agentd's decision was ended


class RunTimer:
    """A run's timeout that can be held and ended from outside the run (docs/policy.md): `hold` stops the
    clock while a tool call waits for a person (holds nest), `release` starts it again with the time that
    was left, `end` stops the run now and says why (`ProcessResult.limit_hit`)."""

    def __init__(self) -> None:
        self.scope: anyio.CancelScope | None = None
        self.holds = 0
        self.left_s = 0.0  # while held: what was left of the timeout when the first hold began
        self.held_s = 0.0  # how long the clock was held, in all
        self.since = 0.0
        self.ended: str | None = None
        self.at_once = False

    def bind(self, scope: anyio.CancelScope) -> None:
        self.scope = scope
        if self.ended is not None:
            scope.cancel()
        elif self.holds:
            self._stop_clock()

    def hold(self) -> None:
        self.holds += 1
        if self.holds == 1 and self.scope is not None:
            self._stop_clock()

    def release(self) -> None:
        self.holds = max(0, self.holds - 1)
        if self.holds == 0 and self.scope is not None and self.since:
            now = anyio.current_time()
            self.held_s += now - self.since
            self.scope.deadline, self.since = now + self.left_s, 0.0

    def end(self, why: str, at_once: bool = False) -> None:
        """Stop the run now; `at_once`: with no grace (its processes are killed, not asked to stop)."""
        self.ended = self.ended or why
        self.at_once = self.at_once or at_once
        if self.scope is not None:
            self.scope.cancel()

    def held_total_s(self) -> float:
        """How long the clock has been held in all, the hold under way included."""
        return self.held_s + (anyio.current_time() - self.since if self.since else 0.0)

    def _stop_clock(self) -> None:
        assert self.scope is not None
        self.since = anyio.current_time()
        self.left_s = max(0.0, self.scope.deadline - self.since)
        self.scope.deadline = math.inf
