"""agentd's benchmarks: `make bench` runs them and rewrites bench/BENCHMARKS.md; `make bench-quick`
runs them at tiny sizes, once, to prove they run (no verdicts).

Every row of issue #13 side by side in one run: agentd against raw sqlite3 (same file, same
pragmas), huey and persist-queue at their defaults, a bare spawn, or a fixed limit; and issue #25's
fleet row, claimers against one PostgreSQL (SKIP, naming why, where none can be started). Each repetition
measures every side once, one after another; the report gives medians with min..max, each goal's
ratio and PASS/FAIL. Absolute numbers are this machine's; the ratios are the point. Targets live
here, never in timed unit tests.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agentd.services.fleet import MAX_CLAIM  # noqa: E402
from agentd.store import Store  # noqa: E402
from bench import (  # noqa: E402
    archive,
    backup,
    console,
    deployed,
    endtoend,
    fleet,
    gateway,
    latency,
    peers,
    processes,
    raw,
    scale_row,
    store_rows,
)
from bench.agent import bulk_tasks, fresh, write_noop_script  # noqa: E402, F401  (the slow test uses the first two)
from bench.report import Goal, Samples, machine_facts, render  # noqa: E402


@dataclass(frozen=True)
class Sizes:
    reps: int
    e2e_tasks: int
    enqueues: int
    claim_completes: int
    latency_claims: int
    small_queue: int
    large_queue: int
    sensor_events: int
    startup_runs: int
    idle_settle_s: float
    fleet_tasks: int
    fleet_claimers: int
    batch_lines: int
    console_tasks: int
    console_streams: int
    console_backlog: int
    sensor_burst: int
    latency_probes: int
    latency_gap_s: float
    gateway_calls: int
    gateway_streams: int
    backup_attempts: int
    scale: scale_row.ScaleSizes = scale_row.FULL


FULL = Sizes(
    5, 300, 2_000, 1_000, 200, 1_000, 1_000_000, 20_000, 3, 3.0, 5_000, 8, 10_000, 200, 1_000, 22_000, 10_000, 40, 0.25,
    1_000, 200, 10_000,
)  # fmt: skip
QUICK = Sizes(
    1, 3, 20, 20, 10, 1_000, 10_000, 200, 1, 1.0, 200, 8, 200, 5, 20, 500, 100, 3, 0.05, 30, 20, 20, scale_row.QUICK
)  # fmt: skip

# Sample names (the measurement table's rows) that the goals refer to.
E2E_AGENTD = "end to end: agentd dispatch --until-idle"
E2E_HUEY = "end to end: huey_consumer -w 1"
E2E_BARE = "end to end: bare spawn from Python"
E2E_BARE_US = "end to end: bare spawn, per task"
E2E_OVERHEAD_US = "end to end: agentd per-attempt overhead (agentd − bare)"
E2E_TMPFS = "end to end on tmpfs: {}"
TMPFS_OVERHEAD_US = E2E_TMPFS.format("agentd per-attempt overhead (agentd − bare)")
WAIT_CLAIMED = "enqueue → claim committed (idle dispatcher), p50"
WAIT_STARTED = "enqueue → adapter running (idle dispatcher), {}"
ENQUEUE = "enqueue: {}"
CLAIM = "claim + complete: {}"
VERIFY = "agentd evidence verify --all, the whole command"
VERIFY_ITSELF = "evidence verify, the verification itself (in-process)"
IDLE_CPU = "idle agentd {}: CPU"
BACKUP_FIRST = "backup of {:,} attempts' evidence: agentd backup, first into an empty folder"
BACKUP_SECOND = "backup of {:,} attempts' evidence: agentd backup, again into the same folder (incremental)"
BACKUP_RESTORE = "backup of {:,} attempts' evidence: agentd restore onto a fresh state dir"
IDLE_RSS = "idle agentd {}: VmRSS"
IDLE_WINDOW = "idle services: the window measured"
CONSOLE_HELD = "console: live streams held open"
CONSOLE_REFUSED = "console: live streams refused (429)"
CONSOLE_REPLAYED = "console: events the held streams replayed, per second"
CONSOLE_STATUS = "console: /api/status p50, {}"
CONSOLE_STATUS_MAX = "console: /api/status slowest, streams replaying"
CONSOLE_DRAIN = "console: no-op tasks under agentd run, {}"
CONSOLE_PEAK = "console: agentd run peak RSS (VmHWM)"
CONSOLE_RSS = "console: agentd run RSS after the streams"
TMPFS = Path("/dev/shm")
IDLE = ("dispatch", "sensors", "web")  # the services bench/processes.py starts idle
DISPATCH_READY = "start-up: agentd dispatch, exec to READY=1"
IMPORTS_OF = ("agentd --version", "agentd status", "agentd task add")  # the report lists what their imports cost
DISPATCH_IMPORTS = "agentd dispatch --until-idle"  # and a dispatcher's, from a drain of its empty queue
DEPLOYED = "end to end as deployed on tmpfs (run_as, a cgroup per attempt): agentd dispatch --until-idle"
DEPLOYED_EXTRA_US = "end to end as deployed (run_as, a cgroup per attempt): overhead beyond the tmpfs row's"
NETWORK_EXTRA_US = (
    "as deployed, a harness attempt in a network of its own (the gateway): overhead beyond the tmpfs row's"
)
FLEET_LIMITS = (1, MAX_CLAIM)  # what the goal is on (one task a claim), and the most the intake takes at once
GATEWAY_CALL = "gateway overhead: a non-streaming call, {}"
GATEWAY_FIRST_BYTE = "gateway overhead: a stream's first byte, p50"
GATEWAY_RSS = "gateway overhead: RSS of {:,} held streams"


ARCHIVE_DRAIN = "archive: the drain beside agentd sensors, {}"
ARCHIVE_RATE = "archive: attempts in the bucket per second, from the drain's start"


def archive_goals() -> list[Goal]:
    """Issue 54's: archiving keeps up with the drain of no-op scripts, and does not slow it."""
    with_archive, without = ARCHIVE_DRAIN.format("with [archive]"), ARCHIVE_DRAIN.format("without")
    return [
        Goal("archiving keeps up with ≥ 50 attempts/s", ARCHIVE_RATE, None, 50, True),
        Goal("the drain with archiving ≥ 0.95× without (≤ 5% slower)", with_archive, without, 0.95, True),
    ]


def fleet_rate(claimers: int, limit: int) -> str:
    return f"fleet claim + complete: {claimers} claimer processes, claim limit {limit}"


def fleet_cpu(limit: int, side: str) -> str:
    return f"fleet, claim limit {limit}: CPU per completion, {side}"


def claim_latency(rows: int) -> str:
    return f"claim p50, {rows:,}-task queue"


def sensor_ingest(events: int) -> str:
    return f"sensor ingest: {events:,} events, half duplicates"


def sensor_burst(lines: int) -> str:
    return f"sensor ingest: a {lines:,}-line burst recorded"


def batch_add(lines: int, side: str) -> str:
    return f"task add --batch: {lines:,} lines, {side}"


def goals(sizes: Sizes) -> list[Goal]:
    """Issue #43's table first (what an operator waits for), then the older goals it left standing, then
    the model gateway's (issue 51), then the fleet at scale's (issue 55), the archive's and the backup's (issue 54)."""
    return (
        issue_43(sizes)
        + older_goals(sizes)
        + gateway_goals(sizes)
        + scale_row.goals(sizes.scale)
        + archive_goals()
        + backup_goals(sizes)
    )


def backup_goals(sizes: Sizes) -> list[Goal]:
    second, first = BACKUP_SECOND.format(sizes.backup_attempts), BACKUP_FIRST.format(sizes.backup_attempts)
    return [
        Goal(
            f"backup of {sizes.backup_attempts:,} attempts: the second run ≤ 10% of the first",
            second,
            first,
            0.1,
            False,
        )
    ]


def gateway_goals(sizes: Sizes) -> list[Goal]:
    streams = GATEWAY_RSS.format(sizes.gateway_streams)
    return [
        Goal("gateway overhead p50 ≤ 1 ms", GATEWAY_CALL.format("p50"), None, 1, False),
        Goal("gateway overhead p99 ≤ 5 ms", GATEWAY_CALL.format("p99"), None, 5, False),
        Goal("gateway first byte ≤ 2 ms", GATEWAY_FIRST_BYTE, None, 2, False),
        Goal(f"gateway {sizes.gateway_streams:,} streams RSS ≤ 50 MB", streams, None, 50, False),
    ]


def issue_43(sizes: Sizes) -> list[Goal]:
    fleet = f"fleet claim + complete ≥ 1,000/s ({sizes.fleet_claimers} claimers, limit 1, PostgreSQL fsync=on)"
    return [
        Goal("enqueue → adapter running, p50 ≤ 10 ms", WAIT_STARTED.format("p50"), None, 10, False),
        Goal("enqueue → adapter running, p99 ≤ 50 ms", WAIT_STARTED.format("p99"), None, 50, False),
        Goal("enqueue → claim committed, p50 ≤ 5 ms", WAIT_CLAIMED, None, 5, False),
        Goal("per-attempt overhead on tmpfs ≤ 4 ms", TMPFS_OVERHEAD_US, None, 4_000, False, beside=E2E_OVERHEAD_US),
        Goal("per-attempt overhead as deployed ≤ the tmpfs row + 1 ms", DEPLOYED_EXTRA_US, None, 1_000, False),
        Goal("as deployed, its own network included, ≤ the tmpfs row + 1 ms", NETWORK_EXTRA_US, None, 1_000, False),
        Goal("end to end ≥ 0.4× huey_consumer (same durability)", E2E_AGENTD, E2E_HUEY, 0.4, True, "huey"),
        Goal("end to end ≥ 0.5× huey_consumer (the stretch)", E2E_AGENTD, E2E_HUEY, 0.5, True, "huey"),
        Goal("sensor ingest, half duplicates ≥ 17,000 lines/s", sensor_ingest(sizes.sensor_events), None, 17_000, True),
        Goal(
            f"sensor ingest: a {sizes.sensor_burst:,}-line burst ≤ 1 s",
            sensor_burst(sizes.sensor_burst),
            None,
            1,
            False,
        ),
        Goal(
            "`task add --batch` ≥ 0.33× raw sqlite3 (FULL)",
            batch_add(sizes.batch_lines, "agentd"),
            batch_add(sizes.batch_lines, "raw sqlite3"),
            0.33,
            True,
        ),
        Goal(fleet, fleet_rate(sizes.fleet_claimers, 1), None, 1_000, True),
        Goal("`agentd --version` ≤ 150 ms", "start-up: agentd --version", None, 150, False),
        Goal("`agentd task add` ≤ 150 ms", "start-up: agentd task add", None, 150, False),
        Goal("`agentd status` ≤ 150 ms", "start-up: agentd status", None, 150, False),
        Goal("`agentd task show` ≤ 150 ms", "start-up: agentd task show", None, 150, False),
        Goal("`agentd task list` ≤ 150 ms", "start-up: agentd task list", None, 150, False),
        Goal("`agentd events` ≤ 150 ms", "start-up: agentd events", None, 150, False),
        Goal("`agentd approvals` ≤ 150 ms", "start-up: agentd approvals", None, 150, False),
        *(Goal(f"idle `agentd {name}` ≤ 0.1% of a core", IDLE_CPU.format(name), None, 0.1, False) for name in IDLE),
        *(Goal(f"idle `agentd {name}` ≤ 60 MB RSS", IDLE_RSS.format(name), None, 60, False) for name in IDLE),
        Goal("evidence verify ≥ 2,000 attempts/s", VERIFY_ITSELF, None, 2_000, True),
    ]


def older_goals(sizes: Sizes) -> list[Goal]:
    """#13's store rows and the console's, which #43 did not restate."""
    small, large = claim_latency(sizes.small_queue), claim_latency(sizes.large_queue)
    return [
        Goal("enqueue ≥ 0.5× raw sqlite3 (FULL)", ENQUEUE.format("agentd"), ENQUEUE.format("raw sqlite3"), 0.5, True),
        Goal("enqueue ≥ 1× huey", ENQUEUE.format("agentd"), ENQUEUE.format("huey"), 1.0, True, "huey"),
        Goal(
            "enqueue ≥ 1× persist-queue",
            ENQUEUE.format("agentd"),
            ENQUEUE.format("persist-queue"),
            1.0,
            True,
            "persist-queue",
        ),
        Goal(
            "claim + complete ≥ 0.5× raw sqlite3 (FULL)", CLAIM.format("agentd"), CLAIM.format("raw sqlite3"), 0.5, True
        ),
        Goal(f"claim p50 at {sizes.large_queue:,} ≤ 2× at {sizes.small_queue:,}", large, small, 2.0, False),
        Goal(
            "dispatch beside live streams ≥ 0.8× without",
            CONSOLE_DRAIN.format("streams replaying"),
            CONSOLE_DRAIN.format("no stream"),
            0.8,
            True,
        ),
        Goal(
            "`/api/status` beside live streams ≤ 250 ms", CONSOLE_STATUS.format("streams replaying"), None, 250, False
        ),
        Goal("live streams held ≤ `[web] max_streams` (16)", CONSOLE_HELD, None, 16, False),
        Goal("`agentd run` peak RSS beside live streams ≤ 100 MB", CONSOLE_PEAK, None, 100, False),
    ]


# --- one repetition of each row -------------------------------------------------------------------


def measure_end_to_end(samples: Samples, folder: Path, sizes: Sizes) -> None:
    count = sizes.e2e_tasks
    drained = endtoend.agentd_dispatch(folder / "agentd", count)
    samples.add(E2E_AGENTD, "tasks/s", drained.tasks_per_s)
    bare = endtoend.bare_spawn_per_s(folder / "bare", count)
    samples.add(E2E_BARE, "tasks/s", bare)
    if peers.installed("huey"):
        script = write_noop_script(folder / "huey-bin")
        samples.add(E2E_HUEY, "tasks/s", peers.huey_consumer_per_s(folder / "huey", script, count))
    samples.add(E2E_BARE_US, "µs", 1e6 / bare)
    samples.add(E2E_OVERHEAD_US, "µs", 1e6 / drained.tasks_per_s - 1e6 / bare)
    whole, itself = endtoend.evidence_verify_per_s(drained)
    samples.add(VERIFY, "attempts/s", whole)
    samples.add(VERIFY_ITSELF, "attempts/s", itself)
    measure_end_to_end_on_tmpfs(samples, sizes)


def measure_end_to_end_on_tmpfs(samples: Samples, sizes: Sizes) -> None:
    """The same drain and bare spawn with the state dir on tmpfs: what agentd adds, the disk taken out."""
    if not TMPFS.is_dir():
        samples.skip(TMPFS_OVERHEAD_US, "µs", f"no tmpfs at {TMPFS}")
        return
    with tempfile.TemporaryDirectory(prefix="agentd-bench-", dir=TMPFS) as tmp:
        drained = endtoend.agentd_dispatch(Path(tmp) / "agentd", sizes.e2e_tasks)
        bare = endtoend.bare_spawn_per_s(Path(tmp) / "bare", sizes.e2e_tasks)
    samples.add(E2E_TMPFS.format("agentd dispatch --until-idle"), "tasks/s", drained.tasks_per_s)
    samples.add(E2E_TMPFS.format("bare spawn, per task"), "µs", 1e6 / bare)
    samples.add(TMPFS_OVERHEAD_US, "µs", 1e6 / drained.tasks_per_s - 1e6 / bare)
    measure_as_deployed(samples, sizes, drained.tasks_per_s)


def measure_as_deployed(samples: Samples, sizes: Sizes, tmpfs_per_s: float) -> None:
    """The same drain as the service runs it (bench/deployed.py), also on tmpfs: its µs per task beyond
    the plain tmpfs drain's is what run_as and a cgroup per attempt add."""
    reason = deployed.why_not()
    if reason is not None:
        for row in (DEPLOYED_EXTRA_US, NETWORK_EXTRA_US):
            samples.skip(row, "µs", f"real users cannot be made here: {reason}")
        return
    per_s = deployed.dispatch_per_s(TMPFS, sizes.e2e_tasks)
    samples.add(DEPLOYED, "tasks/s", per_s)
    samples.add(DEPLOYED_EXTRA_US, "µs", 1e6 / per_s - 1e6 / tmpfs_per_s)
    networked = deployed.dispatch_per_s(TMPFS, sizes.e2e_tasks, harness=True)
    samples.add(NETWORK_EXTRA_US, "µs", 1e6 / networked - 1e6 / tmpfs_per_s)


def measure_waits(samples: Samples, folder: Path, sizes: Sizes) -> None:
    """What an operator waits for after `task add`, through a real idle dispatcher (bench/latency.py)."""
    waits = latency.enqueue_to_start(folder, sizes.latency_probes, sizes.latency_gap_s)
    samples.add(WAIT_CLAIMED, "ms", statistics.median(waits.claimed_ms))
    samples.add(WAIT_STARTED.format("p50"), "ms", statistics.median(waits.started_ms))
    samples.add(WAIT_STARTED.format("p99"), "ms", latency.percentile(waits.started_ms, 0.99))


Rate = Callable[[Path, int], float]


def measure_sides(
    samples: Samples, row: str, folder: Path, count: int, sides: dict[str, tuple[str | None, Rate]]
) -> None:
    """One row's sides back to back, each in a folder of its own; a side whose peer (the `[bench]`
    extra) is not installed is left out."""
    for side, (peer, rate) in sides.items():
        if peer is None or peers.installed(peer):
            samples.add(row.format(side), "tasks/s", rate(folder / side, count))


def measure_enqueue(samples: Samples, folder: Path, count: int) -> None:
    sides: dict[str, tuple[str | None, Rate]] = {
        "agentd": (None, store_rows.enqueue_per_s),
        "raw sqlite3": (None, raw.enqueue_per_s),
        "huey": ("huey", peers.huey_enqueue_per_s),
        "persist-queue": ("persist-queue", peers.persist_queue_enqueue_per_s),
    }
    measure_sides(samples, ENQUEUE, folder, count, sides)


def measure_claim_complete(samples: Samples, folder: Path, count: int) -> None:
    sides: dict[str, tuple[str | None, Rate]] = {
        "agentd": (None, store_rows.claim_complete_per_s),
        "raw sqlite3": (None, raw.claim_complete_per_s),
        "huey": ("huey", peers.huey_claim_complete_per_s),
        "persist-queue": ("persist-queue", peers.persist_queue_claim_complete_per_s),
    }
    measure_sides(samples, CLAIM, folder, count, sides)


def measure_sensor_ingest(samples: Samples, folder: Path, sizes: Sizes, text: str, burst: str) -> None:
    """The rate over the whole text, then one burst's seconds from its lines to their commit."""
    samples.add(sensor_ingest(sizes.sensor_events), "lines/s", store_rows.sensor_ingest_per_s(folder / "rate", text))
    lines_per_s = store_rows.sensor_ingest_per_s(folder / "burst", burst)
    samples.add(sensor_burst(sizes.sensor_burst), "s", sizes.sensor_burst / lines_per_s)


def measure_batch_add(samples: Samples, folder: Path, lines: int, text: bytes) -> None:
    """The two sides of the batch row back to back, each on a fresh migrated file."""
    samples.add(batch_add(lines, "agentd"), "lines/s", store_rows.batch_add_per_s(folder / "agentd", text))
    samples.add(batch_add(lines, "raw sqlite3"), "lines/s", raw.batch_insert_per_s(folder / "raw", text))


def measure_claim_latency(samples: Samples, folder: Path, sizes: Sizes, large: Store | None) -> None:
    """The small queue is made anew each repetition (its claimable tasks run out); the large one is
    made once (a repetition's claims are a rounding error of it)."""
    small = store_rows.claim_queue(folder / "small", sizes.small_queue)
    samples.add(claim_latency(sizes.small_queue), "µs", store_rows.claim_p50_us(small, sizes.latency_claims))
    small.close()
    assert large is not None, "measure_all builds the large queue when this row is wanted"
    samples.add(claim_latency(sizes.large_queue), "µs", store_rows.claim_p50_us(large, sizes.latency_claims))


def measure_fleet(samples: Samples, rig: fleet.Rig | None, sizes: Sizes, reason: str | None) -> None:
    """Each claim limit once on a fresh database; without a PostgreSQL, the rows say why not."""
    for limit in FLEET_LIMITS:
        rate = fleet_rate(sizes.fleet_claimers, limit)
        if rig is None:
            samples.skip(rate, "tasks/s", reason or "no PostgreSQL")
            continue
        drained = rig.claim_complete(sizes.fleet_tasks, limit)
        samples.add(rate, "tasks/s", drained.per_s)
        samples.add(fleet_cpu(limit, "the claimers"), "µs", drained.claimer_us)
        samples.add(fleet_cpu(limit, "their PostgreSQL backends"), "µs", drained.server_us)


def measure_console(samples: Samples, folder: Path, sizes: Sizes) -> None:
    """Live streams against a real `agentd run` (bench/console.py): held, refused, what they cost."""
    load = console.console_load(folder, sizes.console_tasks, sizes.console_streams, sizes.console_backlog)
    samples.add(CONSOLE_HELD, "streams", load.held)
    samples.add(CONSOLE_REFUSED, "streams", load.refused)
    samples.add(CONSOLE_REPLAYED, "events/s", load.replayed / load.loaded_s)
    samples.add(CONSOLE_STATUS.format("no stream"), "ms", console.p50(load.quiet_status_ms))
    samples.add(CONSOLE_STATUS.format("streams replaying"), "ms", console.p50(load.status_ms))
    samples.add(CONSOLE_STATUS_MAX, "ms", max(load.status_ms, default=0.0))
    samples.add(CONSOLE_DRAIN.format("no stream"), "tasks/s", sizes.console_tasks / load.quiet_s)
    samples.add(CONSOLE_DRAIN.format("streams replaying"), "tasks/s", sizes.console_tasks / load.loaded_s)
    samples.add(CONSOLE_PEAK, "MB", load.peak_mb)
    samples.add(CONSOLE_RSS, "MB", load.rss_mb)


def measure_gateway(samples: Samples, sizes: Sizes) -> None:
    """The model gateway against the same fake model straight (bench/gateway.py)."""
    numbers = gateway.measure(sizes.gateway_calls, sizes.gateway_streams)
    for name, share in (("p50", 0.5), ("p99", 0.99)):
        through, direct = (gateway.percentile(side, share) for side in (numbers.gateway_ms, numbers.direct_ms))
        samples.add(GATEWAY_CALL.format(name), "ms", through - direct)
    first = [gateway.percentile(side, 0.5) for side in (numbers.gateway_first_byte_ms, numbers.direct_first_byte_ms)]
    samples.add(GATEWAY_FIRST_BYTE, "ms", first[0] - first[1])
    samples.add(GATEWAY_RSS.format(numbers.streams), "MB", numbers.rss_held_mb - numbers.rss_before_mb)


def measure_archive(samples: Samples, folder: Path, sizes: Sizes) -> None:
    """The end-to-end drain beside `agentd sensors`, without [archive] then with it (bench/archive.py)."""
    with archive.s3_server() as endpoint:
        plain = archive.drain(folder / "without", sizes.e2e_tasks, None)
        archived = archive.drain(folder / "with", sizes.e2e_tasks, endpoint)
    samples.add(ARCHIVE_DRAIN.format("without"), "tasks/s", plain.tasks_per_s)
    samples.add(ARCHIVE_DRAIN.format("with [archive]"), "tasks/s", archived.tasks_per_s)
    samples.add(ARCHIVE_RATE, "attempts/s", archived.archived_per_s or 0.0)


def measure_startup(samples: Samples, config_path: Path, folder: Path, runs: int) -> None:
    """Each command's wall and CPU time, `runs` times, one after another; a dispatcher's start to READY;
    and the imports that cost each command most (the last repetition's, in the report's last section)."""
    commands = processes.startup_commands(config_path)
    for _ in range(runs):
        for name, command in commands.items():
            took = processes.timed(command)
            samples.add(f"start-up: {name}", "ms", took.wall_ms)
            samples.add(f"start-up: {name}, CPU", "ms", took.cpu_ms)
        ready = processes.dispatcher_start(folder)
        samples.add(DISPATCH_READY, "ms", ready.wall_ms)
        samples.add(f"{DISPATCH_READY}, CPU", "ms", ready.cpu_ms)
    # The dispatcher's imports from a drain of its empty queue: the service's own, less sdnotify's.
    drain = {DISPATCH_IMPORTS: processes.drain_command(folder)}
    for name, command in ({name: commands[name] for name in IMPORTS_OF} | drain).items():
        samples.notes[f"start-up: {name}"] = [
            f"{module} {cumulative / 1e3:.1f} ms ({own / 1e3:.1f} ms its own)"
            for module, cumulative, own in processes.import_times(command)
        ]


def measure_backup(samples: Samples, config_path: Path, folder: Path, attempts: int) -> None:
    first, second, restore = backup.backup_and_restore_s(config_path, folder)
    samples.add(BACKUP_FIRST.format(attempts), "s", first)
    samples.add(BACKUP_SECOND.format(attempts), "s", second)
    samples.add(BACKUP_RESTORE.format(attempts), "s", restore)


def record_idle(samples: Samples, idle: processes.IdleWatch) -> None:
    samples.add(IDLE_WINDOW, "s", idle.window_s)
    for name, cpu_percent in idle.cpu_percent.items():
        samples.add(IDLE_CPU.format(name), "% of a core", cpu_percent)
        samples.add(IDLE_RSS.format(name), "MB", idle.rss_mb[name])


# The rows `--only` may name; each is run by `measure_all` in this order.
ROWS = (
    "waits",
    "end to end",
    "enqueue",
    "claim + complete",
    "claim latency",
    "sensor ingest",
    "task add --batch",
    "fleet",
    scale_row.ROW,
    "console",
    "gateway",
    "archive",
    "start-up",
    "backup",
    "idle",
)


def parse_only(text: str) -> frozenset[str]:
    """`--only NAME[,NAME]`: the rows named, each one of ROWS; anything else is an error naming them."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ROWS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown row {', '.join(unknown) or '(none)'!r}; rows: {', '.join(ROWS)}")
    return frozenset(names)


@dataclass
class Measured:
    samples: Samples
    server: str  # the PostgreSQL the fleet row ran against, or why it did not run
    scale_server: str  # the fleet at scale's
    scale_runs: list[scale_row.Run]


def measure(sizes: Sizes, tmp: Path, only: frozenset[str] = frozenset(ROWS)) -> Measured:
    """Every row named in `only`; the fleet at scale's once, after the repetitions, on a PostgreSQL of its own."""
    with contextlib.ExitStack() as stack:
        reason = fleet.why_not() if "fleet" in only else "not selected (--only)"
        if reason is None:
            say(f"starting PostgreSQL and {sizes.fleet_claimers} fleet claimers")
        rig = None if reason else stack.enter_context(fleet.rig(sizes.fleet_claimers))
        server = f"none ({reason})" if rig is None else rig.describe()
        samples = measure_all(sizes, tmp, rig, reason, only)
    if scale_row.ROW not in only:
        return Measured(samples, server, "not selected (--only)", [])
    runs, scale_server = scale_row.measure(samples, sizes.scale)
    return Measured(samples, server, scale_server, runs)


def measure_all(
    sizes: Sizes, tmp: Path, rig: fleet.Rig | None, fleet_reason: str | None, only: frozenset[str] = frozenset(ROWS)
) -> Samples:
    samples = Samples()
    large = None
    if "claim latency" in only:
        say(f"building the {sizes.large_queue:,}-task claim queue")
        large = store_rows.claim_queue(tmp / "claim-large", sizes.large_queue)
    sensor_text = store_rows.sensor_lines(sizes.sensor_events)
    burst_text = store_rows.sensor_lines(sizes.sensor_burst)
    batch_text = store_rows.batch_lines(sizes.batch_lines)
    startup_config = processes.operator_agent(tmp / "operator") if "start-up" in only else tmp
    backed_up = tmp
    if "backup" in only:  # built once: ~2 minutes of dispatch at the full size, not timed
        say(f"draining {sizes.backup_attempts:,} no-op tasks for the backup row")
        backed_up = backup.drained_agent(tmp / "backup-agent", sizes.backup_attempts)
    rows: dict[str, Callable[[Path], None]] = {
        "waits": lambda folder: measure_waits(samples, folder / "waits", sizes),
        "end to end": lambda folder: measure_end_to_end(samples, folder / "e2e", sizes),
        "enqueue": lambda folder: measure_enqueue(samples, folder / "enqueue", sizes.enqueues),
        "claim + complete": lambda folder: measure_claim_complete(samples, folder / "claim", sizes.claim_completes),
        "claim latency": lambda folder: measure_claim_latency(samples, folder / "latency", sizes, large),
        "sensor ingest": lambda f: measure_sensor_ingest(samples, f / "sensor", sizes, sensor_text, burst_text),
        "task add --batch": lambda folder: measure_batch_add(samples, folder / "batch", sizes.batch_lines, batch_text),
        "fleet": lambda _folder: measure_fleet(samples, rig, sizes, fleet_reason),
        "console": lambda folder: measure_console(samples, folder / "console", sizes),
        "gateway": lambda _folder: measure_gateway(samples, sizes),
        "archive": lambda folder: measure_archive(samples, folder / "archive", sizes),
        "start-up": lambda _folder: measure_startup(samples, startup_config, tmp / "dispatcher", sizes.startup_runs),
        "backup": lambda folder: measure_backup(samples, backed_up, folder / "backup", sizes.backup_attempts),
    }
    for rep in range(sizes.reps):
        folder = tmp / f"rep-{rep}"
        say(f"repetition {rep + 1}/{sizes.reps}: {', '.join(row for row in ROWS if row in only)}")
        with idle_window(folder / "idle", sizes, "idle" in only) as idle:
            for name, row in rows.items():
                if name in only:
                    row(folder)
        if idle is not None:
            record_idle(samples, idle)
    if large is not None:
        large.close()
    return samples


@contextlib.contextmanager
def idle_window(directory: Path, sizes: Sizes, wanted: bool) -> Iterator[processes.IdleWatch | None]:
    """The idle services around a repetition's other rows, or nothing when the idle row is not wanted."""
    if not wanted:
        yield None
        return
    with processes.idle_services(directory, sizes.idle_settle_s) as idle:
        yield idle


def say(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


# --- the report -----------------------------------------------------------------------------------


def intro(sizes: Sizes, quick: bool, elapsed_s: float, server: str, scale_server: str) -> list[str]:
    how = "`make bench-quick` (tiny sizes, one repetition: proves the suite runs; nothing judged)"
    if not quick:
        how = f"`make bench`: {sizes.reps} interleaved repetitions"
    return [
        f"{how}, {elapsed_s:.0f} s of measuring. Absolute numbers are this machine's; judge the ratios.",
        "",
        *machine_facts(),
        f"- peers: {peers.describe('huey')}; {peers.describe('persist-queue')}",
        f"- the fleet's PostgreSQL: {server}",
        f"- the fleet at scale's PostgreSQL: {scale_server}",
        "- agentd: WAL, synchronous=FULL; raw sqlite3: the same migrated file and pragmas, no validation or events",
        "",
        "What each row runs:",
        f"- waits (issue #43): a real `agentd dispatch` service, idle; {sizes.latency_probes} times, "
        f"{sizes.latency_gap_s * 1e3:.0f} ms after the last task ended, one no-op task enqueued through agentd's "
        "intake and the doorbell rung as `task add` rings it; from the enqueue's commit to the `task_claimed` event's "
        "timestamp (taken in the claim's transaction) and to `task_started`'s (the adapter's process is running): "
        "p50 of each repetition's probes, and their p99 (nearest rank: one of the values taken, no interpolation)",
        f"- end to end: {sizes.e2e_tasks} no-op script tasks (a /bin/sh script writing a minimal ok outcome to "
        "$AGENTD_RESULT_PATH), queued first; agentd: the real `agentd dispatch --until-idle` from start to exit, with "
        "full evidence; huey: a real `huey_consumer -w 1` (SqliteHuey defaults) running the script through "
        "subprocess, from its start to the last stored result; bare: `subprocess.run` of the script in a loop. "
        "Overhead = agentd µs/task − bare µs/task. The same again with every folder on tmpfs (/dev/shm): the "
        "overhead with the disk taken out; and on tmpfs as deployed (bench/deployed.py: the tests' real users, "
        "the dispatcher as its service user with the units' capabilities in a delegated cgroup, `run_as` the run "
        "user, a cgroup per attempt; tasks queued by `task add --batch`): its µs/task beyond the plain tmpfs drain's",
        f"- enqueue: {sizes.enqueues:,} single-task transactions; agentd through `admit_task` (payload schema) and "
        "`enqueue_task` (row + task_enqueued event); huey `task()`; persist-queue `SQLiteAckQueue.put`",
        f"- claim + complete: {sizes.claim_completes:,} due tasks; agentd `claim_next_task` (attempt row, "
        "task_claimed) then `end_attempt` (the outcome commit); raw: UPDATE … RETURNING then UPDATE; huey "
        "`dequeue` + `execute` (result stored); persist-queue `get` + `ack`",
        f"- claim latency: p50 of {sizes.latency_claims} claims per repetition, queues shaped as `bulk_tasks` "
        "(a tenth urgent and delayed a day, a third done), ANALYZEd",
        f"- sensor ingest: {sizes.sensor_events:,} SensorEvent lines, half repeats of the other half, through "
        "`parse_output` (each line judged, its task admitted) and `record_sensor_events` 500 per transaction; "
        f"then a burst of {sizes.sensor_burst:,} such lines the same way: the seconds from its text to its last commit",
        f"- task add --batch: {sizes.batch_lines:,} JSON lines (the example type, a subject and a payload each); "
        "agentd: what the command runs after its start-up (`agentd.work.batch`: each line judged as `task add` "
        "judges one, then `enqueue_tasks` 500 per transaction, each task with its task_enqueued event); raw: each "
        "line `json.loads`ed and its row inserted, 500 per transaction, no validation or events",
        f"- console: a real `agentd run` (dispatcher and console in one process, the console's default limits) over "
        f"a log of {sizes.console_backlog:,} events; {sizes.console_streams:,} live streams asked for from the first "
        "event (`/api/events/stream?after=0`, 25 tokens' worth, one after another), those answered 200 held and read "
        f"to the end; {sizes.console_tasks} no-op script tasks queued (and the dispatcher woken, as `task add` does) "
        "and drained with no stream open, then again while the held streams replay; `/api/status` asked every "
        "100 ms meanwhile; VmHWM and VmRSS of the process at the end",
        f"- gateway (issue 51, bench/gateway.py): three processes (the loopback fake model, a `Gateway` in front of "
        f"it with hooks that let every call through, and the harness: `http.client`); {sizes.gateway_calls:,} "
        "non-streaming `POST /v1/messages` on a kept-alive connection and as many streaming calls' first body byte "
        "(a new connection each), straight to the fake and through the gateway one after the other: the overhead "
        f"is the difference of the two sides' percentiles (nearest rank); then {sizes.gateway_streams:,} streams "
        "held open through the gateway (the fake stalls after the first event): its VmRSS with them open minus before",
        f"- start-up: the console script `agentd`, a new process each run, {sizes.startup_runs} runs per repetition, "
        "agentd's bytecode compiled first (as an installed wheel's is), on an agent `agentd init` left (the "
        "config's cached view written): each command's wall time and its CPU time (user + system, getrusage of "
        "the waited child); `agentd dispatch` on an idle agent of its own, from its exec to the READY=1 it sends "
        "the NOTIFY_SOCKET the bench listens on (as systemd's Type=notify waits for it), its CPU time by then "
        "from /proc/PID/stat (10 ms ticks), then stopped; the last section lists the imports that cost "
        f"{', '.join(f'`{name}`' for name in (*IMPORTS_OF, DISPATCH_IMPORTS))} most (PYTHONPROFILEIMPORTTIME, one "
        "run each; the dispatcher's from a drain of its empty queue, which imports what the service does but sdnotify)",
        f"- archive (issue 54, bench/archive.py): {sizes.e2e_tasks} no-op script tasks drained by `agentd dispatch "
        "--until-idle` beside a serving `agentd sensors` (no sensors, metrics off), first without [archive], then "
        "with it (moto's S3 server on loopback at nice 19, standing for a remote bucket; object lock on). Each side "
        "first drains as many untimed: with [archive] their sealed folders are a backlog uploaded during the timed "
        "drain, so the archive runs flat out beside it. Each timed drain's rate, and the attempts in the bucket "
        "per second (backlog and drain) from the timed drain's start until the archive's queue is empty",
        f"- backup (issue 54): one agent whose `agentd dispatch --until-idle` ran {sizes.backup_attempts:,} no-op "
        "tasks (built once, not timed); each repetition: `agentd backup` into an empty folder, again into the same "
        "folder (every sealed folder already there: only the database, config and manifest are written), then "
        "`agentd restore` of that backup onto a fresh state dir (every hash checked, evidence verify after it); each "
        "the whole command, start-up included",
        "- idle: `agentd dispatch`, `agentd sensors` and `agentd web` as services on an agent of their own (no "
        "sensors, metrics on a free loopback port), started at each repetition's beginning; "
        f"{sizes.idle_settle_s:g} s later the window "
        "opens and it closes at the repetition's end (the other rows run meanwhile: a process's CPU time is its own): "
        "the CPU time of all their threads over the window (/proc/PID/task/*/schedstat, ns; utime + stime of "
        "/proc/PID/stat, 10 ms ticks, if a thread ended in it), then VmRSS",
        "- evidence verify: the whole CLI over the attempts one end-to-end repetition left, and the verification "
        "itself: `agentd.evidence.verify.verify` (what the command runs after its start-up) timed in-process over "
        "the same attempts (the goal's row: a subtraction of two process start-ups of ~400 ms ± 100 ms was noise)",
        f"- fleet: {sizes.fleet_tasks:,} queued tasks (priorities 1..10, no labels) in a fresh database of one "
        f"PostgreSQL started as the tests start it (tests/pg.py: a unix socket, no TCP) but with a deployment's "
        "commit settings, checked before each drain (fsync=on, synchronous_commit=on; above), "
        f"{sizes.fleet_claimers} claimer processes started once per run, each looping agentd's own "
        f"`FleetQueue.claim` (limit 1: the goal; limit {MAX_CLAIM}: the most the intake takes at once) then "
        "`finish(completed)` for each task until a claim finds nothing. Processes, not threads: each agent is an "
        "interpreter of its own, and threads would share one GIL (psycopg lets go of it only while it waits). "
        "Rate = completions ÷ the wall time from their common start to the last one's stop. Each drain is "
        "checked before it counts: every task completed exactly once, with a token of its own, one `submitted`, "
        "`claimed` and `completed` event each and no other (no write refused, no lease expired). CPU per "
        "completion: the claimers' own (getrusage) and their backends' (/proc/PID/stat), whatever else the "
        "machine runs",
        f"- fleet at scale (issue 55, bench/fleet_scale.py): once per run, not per repetition, on a PostgreSQL of its "
        f"own (as the fleet row's, max_connections={sizes.scale.max_connections:,}): "
        f"{', '.join(f'{n:,}' for n in sizes.scale.agents)} simulated agents over {sizes.scale.tasks:,} queued tasks, "
        "each agent a thread looping agentd's own `FleetQueue.claim` (limit 1), `renew_all` halfway through a "
        f"simulated attempt of {sizes.scale.work_s:g} s on average, then `finish`; with a connection each (where "
        f"the server has room) and pooled ({sizes.scale.pool} connections per process, psycopg_pool). Each run is "
        "checked in PostgreSQL's history (each task claimed by one live lease at a time, completed at most once, by "
        "its last claim's token); its table is the last section",
    ]


def warm_bytecode() -> None:
    """agentd's modules compiled before anything is timed, as an installed wheel's are: under
    PYTHONDONTWRITEBYTECODE a checkout's process would otherwise compile ~100 modules at every start
    (0.68 s against 0.53 s of a service start; the peers' installed packages have their bytecode)."""
    compileall.compile_dir(REPO / "agentd", quiet=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition, no verdicts")
    parser.add_argument("--reps", type=int, help="repetitions (default 3; 1 with --quick)")
    parser.add_argument("--write", action="store_true", help="rewrite bench/BENCHMARKS.md")
    rows = ", ".join(ROWS)
    parser.add_argument("--only", type=parse_only, default=frozenset(ROWS), help=f"only these rows (a,b): {rows}")
    args = parser.parse_args()
    if args.write and args.only != frozenset(ROWS):
        parser.error("--write rewrites bench/BENCHMARKS.md from every row: it cannot be used with --only")
    sizes = QUICK if args.quick else FULL
    if args.reps:
        sizes = replace(sizes, reps=args.reps)
    warm_bytecode()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp:
        measured = measure(sizes, Path(tmp), args.only)
    samples = measured.samples
    lines = intro(sizes, args.quick, time.perf_counter() - started, measured.server, measured.scale_server)
    # --only: the goals of the rows left out are left out of the table too.
    shown = [goal for goal in goals(sizes) if samples.has(goal.subject) or goal.subject in samples.skipped]
    report = render("agentd benchmarks", lines, shown, samples, judge=not args.quick)
    report += "\n".join(["", *scale_row.table(measured.scale_runs, sizes.scale)])
    print(report)
    if args.write:
        (REPO / "bench" / "BENCHMARKS.md").write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
