"""The benchmark suite stays runnable: its quick form runs in `make test` (numbers are not judged
here; the goals live in bench/run.py and their verdicts in bench/BENCHMARKS.md), its long form is
`make bench`. The quick form needs no peer: without the `[bench]` extra their rows say SKIP."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

sys.path.insert(0, str(REPO))

from bench import latency
from bench.agent import bulk_tasks, fresh
from bench.report import Goal, Samples, goal_line, render
from bench.run import DISPATCH_IMPORTS, IMPORTS_OF, QUICK, ROWS, goals, parse_only

NUMBER = r"-?[\d,.]+"  # an overhead is a difference of two rates: on a tiny quick run it may come out below 0


def quick_bench(*args: str, timeout: int) -> subprocess.CompletedProcess[str]:
    """`bench/run.py --quick` with `args`, as a fresh process with a bare PATH."""
    command = [sys.executable, str(REPO / "bench" / "run.py"), "--quick", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env={"PATH": "/usr/bin:/bin"})


@pytest.mark.process
@pytest.mark.slow  # `make test-slow` (CI): the quick form of `make bench`
@pytest.mark.timeout(300)
def test_the_quick_benchmark_runs_and_reports_every_goal() -> None:
    result = quick_bench(timeout=300)
    assert result.returncode == 0, result.stderr
    for goal in goals(QUICK):
        line = re.search(rf"^\| {re.escape(goal.title)} \| ({NUMBER}|—) .*\| (.+?) \|$", result.stdout, re.MULTILINE)
        assert line, f"no row for {goal.title!r}:\n{result.stdout}"
        if line[1] == "—":  # cannot run here (the fleet row without a PostgreSQL): the row says why
            assert line[2] == "SKIP" and "not measured" not in line[0], line[0]
            continue
        assert float(line[1].replace(",", "")) > 0 or "CPU" in goal.subject or "overhead" in goal.subject, goal.title
        assert line[2] == "not judged (quick)" or (line[2] == "SKIP" and goal.peer), (goal.title, line[2])
    assert "PASS" not in result.stdout and "FAIL" not in result.stdout


@pytest.mark.process
def test_only_runs_the_rows_it_names_and_skips_the_others() -> None:
    result = quick_bench("--only", "sensor ingest,enqueue", timeout=120)
    assert result.returncode == 0, result.stderr
    measured = re.findall(r"^\| (.+?) \| [\d,.]+ .*\| 1 \|$", result.stdout, re.MULTILINE)
    assert {
        "sensor ingest: 200 events, half duplicates",
        "sensor ingest: a 100-line burst recorded",
        "enqueue: agentd",
    } <= set(measured)
    assert all(name.startswith(("enqueue: ", "sensor ingest: ")) for name in measured), measured
    assert "| sensor ingest, half duplicates ≥ 17,000 lines/s |" in result.stdout
    assert "| `task add --batch` ≥" not in result.stdout  # the goals of the rows left out are not in the table


@pytest.mark.process
def test_the_start_up_rows_time_each_command_and_the_dispatchers_start_and_list_their_imports() -> None:
    result = quick_bench("--only", "start-up", timeout=120)
    assert result.returncode == 0, result.stderr
    measured = dict(re.findall(r"^\| (start-up: .+?) \| ([\d,.]+) ms \| 1 \|$", result.stdout, re.MULTILINE))
    for command in ("agentd --version", "agentd status", "agentd task add", "agentd dispatch, exec to READY=1"):
        for row in (f"start-up: {command}", f"start-up: {command}, CPU"):
            assert float(measured.pop(row).replace(",", "")) > 0, row
    imports = result.stdout.split("## What start-up imports cost", 1)[1]
    for command in (*IMPORTS_OF, DISPATCH_IMPORTS):
        listed = imports.split(f"start-up: {command}:", 1)[1].split("start-up: ", 1)[0]
        assert re.search(r"^- agentd\.cli [\d.]+ ms \([\d.]+ ms its own\)$", listed, re.MULTILINE), listed
    assert "| `agentd --version` ≤ 150 ms | " in result.stdout


def test_only_names_the_rows_it_knows_when_given_another() -> None:
    assert parse_only("sensor ingest, task add --batch") == {"sensor ingest", "task add --batch"}
    for text in ("sensor", "enqueue,nope", ","):
        with pytest.raises(argparse.ArgumentTypeError, match="rows: " + re.escape(", ".join(ROWS))):
            parse_only(text)


def test_a_goal_is_judged_by_its_ratio_to_the_baseline_or_the_limit() -> None:
    samples = Samples()
    for value in (90.0, 100.0, 130.0):
        samples.add("agentd", "tasks/s", value)
    samples.add("raw", "tasks/s", 180.0)
    assert goal_line(Goal("half of raw", "agentd", "raw", 0.5, True), samples, judge=True).endswith("| PASS |")
    assert goal_line(Goal("as fast as raw", "agentd", "raw", 1.0, True), samples, judge=True).endswith("| FAIL |")
    assert "| 0.56× |" in goal_line(Goal("as fast as raw", "agentd", "raw", 1.0, True), samples, judge=True)
    assert goal_line(Goal("≤ 120/s", "agentd", None, 120, False), samples, judge=True).endswith("| PASS |")
    assert "100 tasks/s (90.0..130)" in goal_line(Goal("≥ 120/s", "agentd", None, 120, True), samples, judge=True)


def test_a_goal_whose_peer_is_missing_is_skipped_naming_it() -> None:
    samples = Samples()
    samples.add("agentd", "tasks/s", 100.0)
    line = goal_line(Goal("≥ 1× huey", "agentd", "huey", 1.0, True, "huey"), samples, judge=True)
    assert "huey not installed" in line and line.endswith("| SKIP |")


def test_a_goal_that_cannot_be_measured_here_is_skipped_naming_why() -> None:
    samples = Samples()
    samples.skip("fleet", "tasks/s", "PostgreSQL's server is not installed")
    line = goal_line(Goal("≥ 1,000/s", "fleet", None, 1_000, True), samples, judge=True)
    assert line == "| ≥ 1,000/s | — | PostgreSQL's server is not installed | — | ≥ 1,000 tasks/s | SKIP |"
    report = render("t", [], [], samples, judge=True)
    assert "| fleet | not measured: PostgreSQL's server is not installed | 0 |" in report


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_claim_plan_holds_at_a_million_tasks(tmp_path: Path) -> None:
    """The long form of test_store's 100k plan check: ten index seeks, before and after ANALYZE."""
    _, store, clock = fresh(tmp_path)
    bulk_tasks(store.path, 1_000_000, clock.now())
    for analyze in (False, True):
        plan = store.explain_claim(clock.now(), analyze=analyze)
        assert sum("USING INDEX tasks_claim (priority=? AND available_at<?)" in line for line in plan) == 10
    store.close()


def test_an_absolute_goal_shows_the_measurement_beside_it_without_judging_it() -> None:
    samples = Samples()
    samples.add("tmpfs", "µs", 3_000.0)
    samples.add("ext4", "µs", 9_000.0)
    line = goal_line(Goal("≤ 4 ms on tmpfs", "tmpfs", None, 4_000, False, beside="ext4"), samples, judge=True)
    assert "| the limit; beside it, ext4: 9,000 µs |" in line and line.endswith("| PASS |")


def test_a_percentile_is_one_of_the_values_taken_never_an_interpolation() -> None:
    values = [float(n) for n in range(1, 41)]
    assert latency.percentile(values, 0.99) == 40.0
    assert latency.percentile(values, 0.5) == 20.0
    assert latency.percentile([7.0], 0.99) == 7.0
