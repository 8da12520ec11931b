"""agentd's benchmarks: `make bench` runs them and rewrites bench/BENCHMARKS.md.

Measured through the store's own verbs on a real migrated SQLite file (synchronous=FULL):
- the claim (one UPDATE … RETURNING plus the attempt row) with a large queue, before and after
  ANALYZE, with a backlog of delayed urgent tasks in front of the claimable ones;
- enqueue through the full intake validation (payload JSON Schema included);
- sensor intake: events deduplicated and turned into tasks, 500 per transaction.
Targets live here, never in timed unit tests.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agentd.clock import FakeClock, format_ts  # noqa: E402
from agentd.intake import admit_task  # noqa: E402
from agentd.records import (  # noqa: E402
    AcceptedEvent,
    AttemptPlan,
    SensorEvent,
    TaskIntent,
)
from agentd.store import Store, init_state_dir, migrate, open_store  # noqa: E402
from agentd.validation import load_config  # noqa: E402


def fresh(directory: Path) -> tuple[object, Store, FakeClock]:
    os.environ["AGENTD_PATHS__STATE_DIR"] = str(directory / "state")
    os.environ["AGENTD_PATHS__WORKSPACE"] = str(directory / "workspace")
    config = load_config(REPO / "config" / "identity.example.toml")
    init_state_dir(config.paths.state_dir, config.paths.workspace)
    clock = FakeClock()
    migrate(config.db_path, clock)
    return config, open_store(config.db_path, clock), clock


def bulk_tasks(db_path: Path, count: int, now: datetime) -> None:
    """Benchmark data: `count` tasks; a tenth are priority-1 tasks delayed a day (a backlog in
    front of everything), the rest spread over priorities 2..10, a third of them done."""
    due, later = format_ts(now - timedelta(minutes=1)), format_ts(now + timedelta(days=1))
    with sqlite3.connect(db_path) as raw:
        raw.execute(
            f"""WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count})
                INSERT INTO tasks (task_type, source, priority, requested_profile_id, max_attempts,
                                   available_at, created_at, updated_at, status)
                SELECT 'example', 'bench', CASE WHEN i % 10 = 0 THEN 1 ELSE 2 + i % 9 END, 'operator', 3,
                       CASE WHEN i % 10 = 0 THEN '{later}' ELSE '{due}' END, '{due}', '{due}',
                       CASE WHEN i % 3 = 0 AND i % 10 != 0 THEN 'completed' ELSE 'pending' END
                FROM n"""
        )


def bench_claim(directory: Path, rows: int, claims: int) -> dict[str, float]:
    _, store, clock = fresh(directory)
    bulk_tasks(store.path, rows, clock.now())
    plan = AttemptPlan("script", "script", None)
    results = {}
    for analyzed in (False, True):
        if analyzed:
            store.explain_claim(clock.now(), analyze=True)
        timings = []
        for _ in range(claims):
            started = time.perf_counter()
            claim = store.claim_next_task(clock.now(), "bench", lambda _task: plan, Path("/tmp/agentd-bench"))
            timings.append(time.perf_counter() - started)
            assert claim is not None
        key = "after ANALYZE" if analyzed else "before ANALYZE"
        results[f"claim p50 µs ({key})"] = statistics.median(timings) * 1e6
        results[f"claim p95 µs ({key})"] = sorted(timings)[int(len(timings) * 0.95)] * 1e6
    store.close()
    return results


def bench_enqueue(directory: Path, count: int) -> dict[str, float]:
    config, store, clock = fresh(directory)
    intent = TaskIntent(task_type="example", source="bench", payload={"note": "hello"})
    started = time.perf_counter()
    for _ in range(count):
        store.enqueue_task(admit_task(intent, config, clock.now(), trusted=True), clock.now())  # type: ignore[arg-type]
    elapsed = time.perf_counter() - started
    store.close()
    return {"enqueue per task µs (validation + transaction)": elapsed / count * 1e6}


def bench_sensor_intake(directory: Path, count: int) -> dict[str, float]:
    config, store, clock = fresh(directory)
    now = clock.now()
    accepted = []
    for n in range(count):
        event = SensorEvent(
            sensor_id="bench",
            event_id=f"e{n}",
            observed_at=now,
            source_ref="bench",
            dedupe_key=f"k{n}",
            payload={},
            proposed_task=TaskIntent(task_type="example", source="x", payload={}),
        )
        task = admit_task(event.proposed_task, config, now, trusted=False)  # type: ignore[arg-type]
        accepted.append(AcceptedEvent(n, event, task))
    results = {}
    for label in ("new", "deduped"):
        started = time.perf_counter()
        for offset in range(0, count, 500):
            store.record_sensor_events("bench", accepted[offset : offset + 500], [], now)
        results[f"sensor event µs ({label})"] = (time.perf_counter() - started) / count * 1e6
    store.close()
    return results


def bench_cli_startup(directory: Path, runs: int) -> dict[str, float]:
    """Wall time of `agentd status` and `agentd task add` as an operator runs them: a new
    interpreter each time (the median of `runs`), and `python -c pass` for the floor."""
    env = {
        **os.environ,
        "AGENTD_PATHS__STATE_DIR": str(directory / "state"),
        "AGENTD_PATHS__WORKSPACE": str(directory / "workspace"),
    }
    agentd = [sys.executable, "-m", "agentd", "--config", str(REPO / "config" / "identity.example.toml")]
    subprocess.run([*agentd, "init"], env=env, check=True, capture_output=True)
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "agentd status": [*agentd, "status"],
        "agentd task add": [*agentd, "task", "add", "--type", "example", "--subject", "bench"],
    }
    results = {}
    for name, command in commands.items():
        timings = []
        for _ in range(runs):
            started = time.perf_counter()
            subprocess.run(command, env=env, check=True, capture_output=True)
            timings.append(time.perf_counter() - started)
        results[f"start-up ms ({name}, median of {runs})"] = statistics.median(timings) * 1e3
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (the short form inside make test)")
    parser.add_argument("--write", action="store_true", help="rewrite bench/BENCHMARKS.md")
    args = parser.parse_args()
    rows, claims, enqueues, events = (20_000, 50, 200, 1_000) if args.quick else (1_000_000, 500, 5_000, 10_000)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp:
        results.update(bench_claim(Path(tmp) / "claim", rows, claims))
        results.update(bench_enqueue(Path(tmp) / "enqueue", enqueues))
        results.update(bench_sensor_intake(Path(tmp) / "sensors", events))
        results.update(bench_cli_startup(Path(tmp) / "cli", 3 if args.quick else 15))
    lines = [f"| {name} | {value:,.1f} |" for name, value in results.items()]
    report = "\n".join(
        [
            "# agentd benchmarks",
            "",
            f"`make bench` on {datetime.now(UTC):%Y-%m-%d}: {platform.machine()}, {os.cpu_count()} CPUs, "
            f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, synchronous=FULL.",
            f"Queue for the claim: {rows:,} tasks ({rows // 10:,} urgent ones delayed a day in front), "
            f"{claims} claims; {enqueues:,} enqueues; {events:,} sensor events.",
            "",
            "| measurement | value |",
            "|---|---|",
            *lines,
            "",
        ]
    )
    print(report)
    if args.write:
        (REPO / "bench" / "BENCHMARKS.md").write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
