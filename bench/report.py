"""The samples a run collects, the issue's goals judged against them, and BENCHMARKS.md: medians
with min..max, each goal's ratio and PASS/FAIL, and the machine the numbers came from."""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from agentd.process import containment

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Samples:
    """Every sample of every measurement, by name, in the order they were first taken."""

    values: dict[str, list[float]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # a measurement that cannot run here: why
    notes: dict[str, list[str]] = field(default_factory=dict)  # lines listed under a heading (start-up imports)

    def add(self, name: str, unit: str, value: float) -> None:
        self.values.setdefault(name, []).append(value)
        self.units[name] = unit

    def skip(self, name: str, unit: str, reason: str) -> None:
        """`name` is not measured on this machine, for a reason the report names."""
        self.skipped[name] = reason
        self.units[name] = unit

    def has(self, name: str) -> bool:
        return bool(self.values.get(name))

    def median(self, name: str) -> float:
        return statistics.median(self.values[name])

    def show(self, name: str) -> str:
        """`46.2 tasks/s (44.1..47.0)`: the median and the range of the samples."""
        found = self.values[name]
        median = f"{number(statistics.median(found))} {self.units[name]}"
        return median if len(found) == 1 else f"{median} ({number(min(found))}..{number(max(found))})"


def number(value: float) -> str:
    size = abs(value)
    digits = 0 if size >= 100 else 1 if size >= 10 else 2 if size >= 0.1 or size == 0 else 3
    return f"{value:,.{digits}f}"


@dataclass(frozen=True)
class Goal:
    """One line of the issue: `subject` against the median of `against` (a ratio), or against a
    fixed `target` when `against` is None; `at_least` says which side of the target passes."""

    title: str
    subject: str
    against: str | None
    target: float
    at_least: bool
    peer: str | None = None  # the optional peer the baseline needs
    beside: str | None = None  # a measurement shown beside an absolute goal, not judged (tmpfs's: ext4's)

    def ratio(self, samples: Samples) -> float:
        """Against a baseline: the median of each repetition's own ratio (its two sides ran back to
        back, under the same load), or of the medians where the sample counts differ."""
        if self.against is None:
            return samples.median(self.subject) / self.target
        subject, against = samples.values[self.subject], samples.values[self.against]
        if len(subject) != len(against):
            return samples.median(self.subject) / samples.median(self.against)
        return statistics.median(mine / theirs for mine, theirs in zip(subject, against, strict=True))

    def passes(self, samples: Samples) -> bool:
        bound = self.target if self.against else 1.0  # an absolute goal's ratio is to its limit
        ratio = self.ratio(samples)
        return ratio >= bound if self.at_least else ratio <= bound

    def wanted(self, units: dict[str, str]) -> str:
        sign = "≥" if self.at_least else "≤"
        if self.against:
            return f"{sign} {number(self.target)}×"
        return f"{sign} {number(self.target)} {units[self.subject]}"


def goal_line(goal: Goal, samples: Samples, judge: bool) -> str:
    """`| title | agentd | against | ratio | goal | verdict |` for the goals table."""
    if not samples.has(goal.subject) or (goal.against and not samples.has(goal.against)):
        missing = f"{goal.peer} not installed" if goal.peer else samples.skipped.get(goal.subject, "not measured")
        agentd = samples.show(goal.subject) if samples.has(goal.subject) else "—"
        return f"| {goal.title} | {agentd} | {missing} | — | {goal.wanted(samples.units)} | SKIP |"
    against = f"{goal.against}: {samples.show(goal.against)}" if goal.against else "the limit"
    if goal.beside and samples.has(goal.beside):
        against += f"; beside it, {goal.beside}: {samples.show(goal.beside)}"
    verdict = ("PASS" if goal.passes(samples) else "FAIL") if judge else "not judged (quick)"
    ratio = f"{number(goal.ratio(samples))}×"
    wanted = goal.wanted(samples.units)
    return f"| {goal.title} | {samples.show(goal.subject)} | {against} | {ratio} | {wanted} | {verdict} |"


def machine_facts() -> list[str]:
    return [
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; agentd at {git_describe()}",
        f"- CPU: {cpu_model()}, {os.cpu_count()} cores; {platform.system()} {platform.release()} {platform.machine()}",
        f"- Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}",
        "- load average (1, 5, 15 min) at the end: " + ", ".join(f"{load:.2f}" for load in os.getloadavg()),
        f"- runs' cgroups: {cgroup_move_cost()}",
    ]


def cgroup_move_cost(idle_s: float = 0.05, moves: int = 10) -> str:
    """What the kernel charges for the move into a run's cgroup after a pause like the gap between
    two short attempts (docs/reliability.md, "What a run's cgroup costs"): the median of `moves`."""
    found = containment.cgroups()
    if found is None:
        return "none (no writable cgroup v2: runs are found by marker)"
    probe = found.own / f"agentd-bench-{os.getpid()}"
    probe.mkdir()
    timings = []
    try:
        for _ in range(moves):
            time.sleep(idle_s)
            started = time.perf_counter()
            found.enter(probe)
            timings.append(time.perf_counter() - started)
            found.leave()
    finally:
        found.leave()
        probe.rmdir()
    return f"a move after {idle_s * 1e3:.0f} ms without one takes {statistics.median(timings) * 1e3:.2f} ms"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def git_describe() -> str:
    """The commit measured (read-only: `git describe`), `-dirty` when the tree has changes."""
    try:
        found = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True, timeout=10
        )
    except OSError:
        return "unknown commit"
    return found.stdout.strip() or "unknown commit"


def render(title: str, intro: list[str], goals: list[Goal], samples: Samples, judge: bool) -> str:
    goal_lines = [goal_line(goal, samples, judge) for goal in goals]
    rows = [f"| {name} | {samples.show(name)} | {len(samples.values[name])} |" for name in samples.values]
    rows += [f"| {name} | not measured: {reason} | 0 |" for name, reason in samples.skipped.items()]
    return "\n".join(
        [
            f"# {title}",
            "",
            *intro,
            "",
            "## Goals (issue #43's first, then the older ones it left standing: #13's, the console's)",
            "",
            "Ratio: the median over the repetitions of agentd ÷ the baseline (measured back to back in each), or "
            "agentd's median ÷ the limit where the goal is absolute.",
            "",
            "| goal | agentd | against | ratio | goal | result |",
            "|---|---|---|---|---|---|",
            *goal_lines,
            "",
            "## Every measurement",
            "",
            "Median (min..max) over the repetitions; each repetition runs every side once, one after another.",
            "",
            "| measurement | median (min..max) | samples |",
            "|---|---|---|",
            *rows,
            "",
            *notes_section(samples),
        ]
    )


def notes_section(samples: Samples) -> list[str]:
    """What each start-up command's imports cost, longest first (cumulative: a package with all it imports)."""
    if not samples.notes:
        return []
    lines = ["## What start-up imports cost", "", "`python -X importtime`'s longest imports, cumulative, one run."]
    for name, entries in samples.notes.items():
        lines += ["", f"{name}:", "", *(f"- {entry}" for entry in entries)]
    return [*lines, ""]
