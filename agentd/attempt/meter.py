"""The budget while an attempt runs (docs/policy.md, "Budgets while an attempt runs").

A `Meter` reads what the harness reports it has spent as it goes, prices it with the adapter's `prices`
table, and ends the run (RunTimer.end → the cgroup is killed, the attempt ends `budget_exceeded`) as soon
as the attempt would pass the least of its caps: `[budget] per_attempt_usd`, and what is left of the
day's budget (in all, and its adapter's) when it started.

Where the running figure comes from:
- claude-code: the usage of each assistant message in its stream-json (stdout.log), summed per message.
- codex: the `token_count` records of its thread's rollout file ($CODEX_HOME/sessions/…/rollout-…-<thread>.jsonl),
  whose running total its `--json` stream does not carry (that reports usage once, at turn.completed).
Both are what the harness says, written where the attempt's own processes can write, so a report never
lowers the figure: per message id (claude) or per total (codex), each count is the largest yet read, and
codex's totals are read only from the file named for the thread codex named in its own stream (docs/policy.md,
"Budgets while an attempt runs"). The attempt's recorded usage stays the harness's final figure when it has
one, else this running one.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import anyio

from agentd import frozen_value
from agentd.adapters.codex import since, thread_id
from agentd.adapters.harness import estimate_cost
from agentd.attempt.live import LINE_MAX_BYTES, Lines, Source, json_record
from agentd.config import Config
from agentd.config.budget import LIVE_USAGE, Spend, price_of
from agentd.errors import contained
from agentd.process.timer import RunTimer
from agentd.records import AdapterConfig, TokenPrice
from agentd.usage import Usage, judge_number

logger = logging.getLogger(__name__)

TICK_S = 0.25
ENDED_BY = "budget"  # RunTimer.end's word: ProcessResult.limit_hit


@frozen_value
class Cap:
    """The most this attempt may spend, and which cap that is."""

    usd: float
    which: str  # "[budget] per_attempt_usd", "what was left of the day's budget", …
    per_attempt: bool = False  # the attempt's own cap (passing it again is certain): else a day's


def attempt_cap(config: Config, adapter_id: str, spend: Spend) -> Cap | None:
    """The least of the caps that apply to an attempt starting now (`spend`: today's so far), or None."""
    budget = config.budget
    caps = []
    if budget.per_attempt_usd is not None:
        caps.append(Cap(budget.per_attempt_usd, "[budget] per_attempt_usd", per_attempt=True))
    if budget.daily_usd is not None:
        caps.append(Cap(max(0.0, budget.daily_usd - spend.total_usd), "what was left of the day's budget"))
    if (adapter_cap := budget.adapter_daily_usd.get(adapter_id)) is not None:
        used = spend.by_adapter[adapter_id].total_usd if adapter_id in spend.by_adapter else 0.0
        caps.append(Cap(max(0.0, adapter_cap - used), f"what was left of adapter {adapter_id}'s day"))
    return min(caps, key=lambda cap: cap.usd) if caps else None


def _tokens(usage: Any, names: dict[str, str]) -> dict[str, int]:
    if not isinstance(usage, dict):
        return {}
    found = {}
    for ours, theirs in names.items():
        number, _ = judge_number(usage.get(theirs), ours)
        if isinstance(number, int):
            found[ours] = number
    return found


CLAUDE_NAMES = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_tokens": "cache_read_input_tokens",
    "cache_write_tokens": "cache_creation_input_tokens",
}
CODEX_NAMES = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_tokens": "cached_input_tokens",
}


def raise_counts(held: dict[str, int], seen: dict[str, int]) -> None:
    """Each count `held` has raised to the one `seen` gives, where that is larger. What the harness reports is
    written where the attempt's processes can write too (a line into claude's stdout pipe, a line into codex's
    rollout), so a report re-using a message id, or a total lower than one already read, never lowers the
    figure; the normal case stays exact: claude 2.1.197 prints each content block of a message as a line
    of its own, all carrying the same usage, and codex's totals only grow (measured against tests/fakemodel)."""
    for kind, count in seen.items():
        if count > held.get(kind, -1):
            held[kind] = count


@dataclass
class Running:
    """The running total of one harness's reports."""

    kind: str
    by_message: dict[str, dict[str, int]] = field(default_factory=dict)  # claude: per message id, its largest usage
    total: dict[str, int] = field(default_factory=dict)  # codex: the largest of its own running totals
    before: Usage | None = None  # codex: the total a resumed thread held at its interruption, not this attempt's

    def feed(self, record: dict[str, Any]) -> None:
        if self.kind == "claude-code":
            message = record.get("message")
            if record.get("type") == "assistant" and isinstance(message, dict):
                tokens = _tokens(message.get("usage"), CLAUDE_NAMES)
                if tokens:
                    raise_counts(self.by_message.setdefault(str(message.get("id"))[:200], {}), tokens)
            return
        payload = record.get("payload")
        info = payload.get("info") if isinstance(payload, dict) and payload.get("type") == "token_count" else None
        if isinstance(info, dict) and (tokens := _tokens(info.get("total_token_usage"), CODEX_NAMES)):
            raise_counts(self.total, tokens)

    def usage(self) -> Usage:
        if self.kind == "claude-code":  # claude's input_tokens leaves out the cache: priced as input, cached as cached
            sums = {key: sum(m.get(key, 0) for m in self.by_message.values()) for key in CLAUDE_NAMES}
            return Usage(
                sums["input_tokens"] + sums["cache_read_tokens"] + sums["cache_write_tokens"],
                sums["output_tokens"],
                sums["cache_read_tokens"],
                sums["cache_write_tokens"],
            )
        if not self.total:
            return Usage()
        total = Usage(
            self.total.get("input_tokens", 0), self.total.get("output_tokens", 0), self.total.get("cache_read_tokens")
        )
        return since(total, self.before) if self.before else total


@dataclass
class Meter:
    cap: Cap
    price: TokenPrice
    running: Running
    find: Callable[[], list[Source]]  # the files to read, once there are any (then these, and no others)
    sources: list[Source] = field(default_factory=list)
    stopped: dict[str, Any] | None = None  # what it had spent when the meter ended it

    def spent(self) -> Usage:
        return estimate_cost(self.running.usage(), self.price)

    async def run(self, timer: RunTimer) -> None:
        """Read every TICK_S until the cap is passed (the run is ended) or the caller cancels this."""
        with contained(logger, "the running budget stopped watching"):
            while self.stopped is None:
                await anyio.sleep(TICK_S)
                await anyio.to_thread.run_sync(self._read)
                spent = self.spent()
                if spent.cost_usd is not None and spent.cost_usd > self.cap.usd:
                    self.stopped = {
                        "cap_usd": round(self.cap.usd, 6),
                        "cap": self.cap.which,
                        "per_attempt": self.cap.per_attempt,
                        "by": "agentd",
                        "spent_usd": spent.cost_usd,
                        "input_tokens": spent.input_tokens,
                        "output_tokens": spent.output_tokens,
                    }
                    timer.end(ENDED_BY)

    def _read(self) -> None:
        if not self.sources:
            self.sources = self.find()
        for source in self.sources:
            for line in source.read():
                record = json_record(line.decode("utf-8", errors="replace"))
                if record is not None:
                    self.running.feed(record)


ROLLOUT_FOLDERS = 3  # codex 0.169.0: sessions/YYYY/MM/DD/rollout-<local time>-<thread id>.jsonl


def thread_rollouts(home: Path, thread: str) -> list[str]:
    """The files under `home`/sessions that codex would name for `thread` (measured on 0.169.0: one, made when
    the thread starts, before its first model call, and appended to when the thread is resumed), as paths
    under `home`. Nothing else under sessions/ is ever read; a folder that is a link is not entered (and the
    file is opened without following one: `open_beneath`)."""
    folders = [PurePosixPath("sessions")] if _is_folder(home / "sessions") else []
    for _ in range(ROLLOUT_FOLDERS):
        folders = [folder / entry.name for folder in folders for entry in _listed(home / folder) if _folder(entry)]
    suffix = f"-{thread}.jsonl"
    named = (folder / e.name for folder in folders for e in _listed(home / folder))
    return sorted(str(path) for path in named if path.name.startswith("rollout-") and path.name.endswith(suffix))


def _listed(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError:
        return []


def _folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def codex_rollouts(home: Path, stdout: Path, owner: int | None) -> Callable[[], list[Source]]:
    """The rollout files of the thread codex named in its stream (`thread.started`, agentd/adapters/codex.py
    `thread_id`), once both exist: each the run user's (`owner`), a regular file reached without a link.
    Found once, read from then on. Another file named for the thread (the attempt's processes may write
    under sessions/) is read too: the figure is the largest any holds, so a planted one can only raise it."""

    def find() -> list[Source]:
        thread = thread_id(stdout)
        if thread is None:
            return []
        return [_rollout(home, path, owner) for path in thread_rollouts(home, thread)]

    return find


def _rollout(home: Path, path: str, owner: int | None) -> Source:
    return Source(home, path, Lines(LINE_MAX_BYTES, keep_long=False), owner)


def thread_spent(home: Path, thread: str | None, owner: int | None) -> Usage | None:
    """codex's running total for `thread` as its rollout file under `home`/sessions holds it now (an interrupted
    session's, kept for its resume: agentd/attempt/session.py); None when it holds none, or when there is
    not exactly one file named for the thread. None is the safe side: the resumed attempt then counts the
    thread's whole total, so what is taken off it is never a figure a planted file chose."""
    running = Running("codex")
    rollouts = thread_rollouts(home, thread) if thread else []
    if len(rollouts) != 1:
        return None
    source = _rollout(home, rollouts[0], owner)
    try:
        while True:  # to its end: a read that completes no line (a long one, being skipped) is not the end
            offset = source.offset
            for line in source.read():
                if (record := json_record(line.decode("utf-8", errors="replace"))) is not None:
                    running.feed(record)
            if source.offset == offset:
                break
    except OSError as exc:  # a folder the run user kept from the services: the resumed attempt counts the whole
        logger.warning("codex's running total under %s could not be read: %s", home, exc)
        return None
    return running.usage() if running.total and source.refused is None else None


def meter_for(
    adapter: AdapterConfig,
    model: str | None,
    cap: Cap | None,
    stdout: Path,
    scratch: Path,
    owner: int | None,
    before: Usage | None = None,
) -> Meter | None:
    """The meter of an attempt that has a cap and a running figure to hold it to; None for the others.
    `before`: what a resumed codex thread had spent when it was interrupted (its counts go on from there)."""
    price = price_of(adapter, model)
    if cap is None or price is None or adapter.kind not in LIVE_USAGE:
        return None
    if adapter.kind == "claude-code":
        source = Source(stdout.parent, stdout.name, Lines(LINE_MAX_BYTES, keep_long=False))
        return Meter(cap, price, Running(adapter.kind), lambda: [source])
    return Meter(cap, price, Running(adapter.kind, before=before), codex_rollouts(scratch / "codex", stdout, owner))


def spent_line(stopped: dict[str, Any]) -> str:
    return (
        f"stopped at ${stopped['spent_usd']:.4f} spent ({stopped['input_tokens']} input, {stopped['output_tokens']} "
        f"output tokens), past {stopped['cap']} (${stopped['cap_usd']:g})"
    )
