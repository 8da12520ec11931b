"""The fleet chaos harness: one real PostgreSQL (tests/pg.py), three agents (three state dirs, each a real
`agentd dispatch` process whose intake draws from the fleet), fleet tasks submitted once, SIGKILLs of the
agents at random moments and a stop/start of PostgreSQL mid-run; then a proof from PostgreSQL and every
agent's SQLite that each fleet task ended exactly once, no finished task ran again, no stale token's write
was accepted, and every agent's evidence verifies.

    make fleet-chaos                      # python tests/fleet_chaos.py --tasks 300 --kills 24
    python tests/fleet_chaos.py --tasks 60 --kills 6 --seed 7 --keep DIR

The short form runs in `make test` (tests/test_fleet_chaos.py) where PostgreSQL can run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pg
from chaos import Service, ok
from support import agent_config

from agentd.clock import SystemClock, parse_ts
from agentd.store import Store, init_state_dir, migrate, open_store
from agentd.store.fleet import FleetQueue
from agentd.work.validation import load_config

AGENTS = 3
TERMINAL = ("completed", "failed")
LEASE_S = 5.0  # the shortest [fleet] lease_s allows: a killed agent's tasks go to another within seconds
ORIGIN = {
    "submitted_by": "chaos",
    "dispatch_context": {
        "originSurface": "cli", "originProductId": "fleet-chaos", "dispatchMode": "queued",
        "initiatedAt": "2026-11-25T00:00:00Z",
    },
}  # fmt: skip


# Rows anyone with the DSN could write (docs/fleet.md, "Poison in a row"), each column as SQL text: every
# one must be refused with its reason by whichever agent claims it, and never run.
POISON = [
    {"payload": "[" * 3000 + "]" * 3000},
    {"origin": '{"submitted_by": ' + "[" * 3000 + "]" * 3000 + "}"},
    {"payload": '{"n": 1' + "0" * 5000 + "}"},
    {"payload": json.dumps({"note": "x" * 3_000_000})},
    {"payload": "[1, 2]"},
    {"origin": '{"submitted_by": "x"}'},
    {"created_at": "infinity"},  # not poison to the judge: admitted and run, but read without a raise
]
POISON_EVERY = 10  # one row in ten of the chaos run's


@dataclass
class Agent:
    name: str
    config_path: Path
    db_path: Path
    service: Service


@dataclass
class FleetReport:
    seconds: float = 0.0
    kills: int = 0
    postgres_restarts: int = 0
    partitions: int = 0  # agents frozen past their leases (SIGSTOP), then let go on
    fleet: Counter[str] = field(default_factory=Counter)
    reran: int = 0  # fleet tasks that ran on more than one agent (each after a lease was lost)
    lost: int = 0
    refused_writes: int = 0
    expired: int = 0
    checks: dict[str, list[str]] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        return [name for name, problems in self.checks.items() if problems]

    def table(self) -> str:
        lines = [
            f"fleet chaos: {self.seconds:.0f}s; {self.kills} SIGKILLs of agents, {self.partitions} partitions "
            f"(SIGSTOP past the lease), PostgreSQL restarted {self.postgres_restarts}x",
            "fleet     " + "  ".join(f"{k} {v}" for k, v in sorted(self.fleet.items())),
            f"leases expired {self.expired}, lost {self.lost}; refused stale writes {self.refused_writes}; "
            f"ran on two agents (at-least-once, each after a lost lease) {self.reran}",
            "",
            f"{'invariant':<56} result",
        ]
        for name, problems in self.checks.items():
            lines.append(f"{name:<56} {'passed' if not problems else 'FAILED: ' + '; '.join(problems[:3])}")
        lines.append(f"\n{len(self.checks) - len(self.failed)} of {len(self.checks)} invariant checks passed")
        return "\n".join(lines)


class FleetChaos:
    def __init__(self, directory: Path, cluster: pg.Cluster, seed: int, task_s: tuple[float, float]) -> None:
        self.dir, self.cluster, self.rng, self.task_s = directory, cluster, random.Random(seed), task_s
        self.dsn = cluster.new_database()
        self.dsn_file = directory / "fleet.dsn"
        self.dsn_file.write_text(self.dsn + "\n")
        self.dsn_file.chmod(0o600)
        self.logs = directory / "logs"
        self.logs.mkdir()
        self.agents = [self._agent(n) for n in range(AGENTS)]
        self.postgres_restarts = 0
        self.partitions = 0
        self.poisoned: dict[int, bool] = {}  # fleet id → whether it must be refused (else run as any task)

    def _agent(self, n: int) -> Agent:
        name = f"fleet{n}"

        def mutate(raw: dict[str, Any]) -> None:
            raw["agent"].update(agent_id=name, internal_name=name)
            raw["fleet"] = {"dsn_file": str(self.dsn_file), "lease_s": LEASE_S, "poll_s": 0.5, "max_local": 3}
            raw["dispatch"].update(backoff_base_s=0, grace_s=2, kill_grace_s=1, lock_heartbeat_s=1)
            raw["metrics"] = {"dispatch_listen": "127.0.0.1:0", "sensors_listen": "127.0.0.1:0"}
            for spec in raw["task_types"]:
                if spec["task_type"] == "scripted":
                    spec["max_attempts"] = 50  # kills mid-attempt use attempts up; the work must still end

        path = agent_config(self.dir / name, mutate)
        config = load_config(path)
        init_state_dir(config.paths.state_dir, config.paths.workspace)
        migrate(config.db_path, SystemClock())
        argv = [sys.executable, "-m", "agentd", "--config", str(path), "dispatch"]
        return Agent(name, path, config.db_path, Service(name, argv, _env(), self.logs))

    def submit(self, count: int) -> list[int]:
        """Most straight into PostgreSQL (fast); a few through `agentd fleet submit`, the real path."""
        queue = FleetQueue.open(self.dsn)
        try:
            queue.migrate()
            ids = []
            for i in range(count):
                # every seventh works longer than a partition lasts: its rescuer still holds it when the
                # frozen agent wakes up and writes with its stale token
                seconds = self.rng.uniform(*self.task_s) if i % 7 else self.rng.uniform(LEASE_S, LEASE_S + 3)
                payload = {"sleep_s": round(seconds, 2), "outcome": ok()}
                if i % POISON_EVERY == POISON_EVERY - 1:
                    ids.append(self._poison(queue, payload, POISON[i // POISON_EVERY % len(POISON)]))
                    self.poisoned[ids[-1]] = "created_at" not in POISON[i // POISON_EVERY % len(POISON)]
                elif i % 50 == 0:
                    ids.append(self._submit_by_cli(payload, i))
                else:
                    ids.append(
                        queue.submit("scripted", f"t{i}", payload, priority=self.rng.randint(1, 9), origin=ORIGIN)[
                            0
                        ].fleet_id
                    )
            return ids
        finally:
            queue.close()

    def _poison(self, queue: FleetQueue, payload: dict[str, Any], columns: dict[str, str]) -> int:
        """A row written straight into PostgreSQL, past every judgment `fleet submit` makes."""
        row = {"task_type": "scripted", "payload": json.dumps(payload), "origin": json.dumps(ORIGIN), **columns}
        with queue.conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO fleet_tasks ({', '.join(row)}) VALUES ({', '.join(['%s'] * len(row))}) RETURNING id",
                list(row.values()),
            )
            return int(cur.fetchone()["id"])

    def _submit_by_cli(self, payload: dict[str, Any], i: int) -> int:
        argv = [sys.executable, "-m", "agentd", "--config", str(self.agents[0].config_path), "fleet", "submit",
                "--type", "scripted", "--subject", f"t{i}", "--payload", json.dumps(payload), "--key", f"chaos-{i}",
                "--dsn-file", str(self.dsn_file), "--json"]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=_env(), check=True)
        return int(json.loads(done.stdout)["fleet_id"])

    def run(self, tasks: int, kills: int, deadline_s: float) -> FleetReport:
        started = time.monotonic()
        ids = self.submit(tasks)
        for agent in self.agents:
            agent.service.start()
        pause = threading.Event()
        done, restart_at = 0, self.rng.randint(kills // 3, max(kills // 3, 2 * kills // 3))
        partitions = {kills // 4, kills // 2, 3 * kills // 4}
        while done < kills and time.monotonic() - started < deadline_s:
            pause.wait(self.rng.uniform(0.3, 1.2))
            victim = self.rng.choice(self.agents).service
            victim.poll()
            if done in partitions:  # frozen past its leases, as a partition would: it wakes up stale
                victim = self._running_agent(pause).service
                self._partition(victim, pause)
            victim.kill()
            done += 1
            if done == restart_at:
                self._restart_postgres(pause)
            # most come back at once; some only after their leases ran out, so another agent rescues
            pause.wait(self.rng.choice([0.0, 0.2, 0.5, LEASE_S + 1.0]))
            victim.start()
        self._drain(ids, started, deadline_s)
        for agent in self.agents:
            agent.service.stop()
        report = self.check(ids)
        report.seconds = time.monotonic() - started
        report.kills = sum(agent.service.kills for agent in self.agents)
        report.postgres_restarts = self.postgres_restarts
        report.partitions = self.partitions
        return report

    def _running_agent(self, pause: threading.Event) -> Agent:
        """An agent running a long fleet task now (so the partition has something at stake), waiting a
        few seconds for one; else any."""
        for _ in range(20):
            for agent in self.rng.sample(self.agents, len(self.agents)):
                with _store(agent.db_path) as store:
                    running = [h.task_id for h in store.fleet_leases_held() if h.status == "running"]
                    if any(store.get_task_or_raise(t).payload.get("sleep_s", 0) >= LEASE_S for t in running):
                        return agent
            pause.wait(0.25)
        return self.rng.choice(self.agents)

    def _partition(self, victim: Service, pause: threading.Event) -> None:
        """SIGSTOP an agent for longer than a lease, then let it go on: whatever it held went to another
        agent meanwhile, and every write it now makes with its old tokens must be refused."""
        assert victim.process is not None
        victim.process.send_signal(signal.SIGSTOP)
        pause.wait(LEASE_S + self.rng.uniform(1.0, 3.0))
        victim.process.send_signal(signal.SIGCONT)
        pause.wait(self.rng.uniform(1.0, 3.0))  # it renews, confirms, reports: stale
        self.partitions += 1

    def _restart_postgres(self, pause: threading.Event) -> None:
        """A fast shutdown mid-run (every connection cut), a few seconds down, then back."""
        self.cluster.stop()
        pause.wait(self.rng.uniform(2.0, 6.0))
        self.cluster.start()
        self.postgres_restarts += 1

    def _drain(self, ids: list[int], started: float, deadline_s: float) -> None:
        """No more kills: wait until PostgreSQL holds every fleet task terminal and every agent reported."""
        queue = FleetQueue.open(self.dsn)
        pause = threading.Event()
        try:
            limit = time.monotonic() + max(120.0, deadline_s - (time.monotonic() - started))
            while time.monotonic() < limit:
                for agent in self.agents:
                    agent.service.poll()
                counts = queue.counts()["tasks"]
                ended = counts["completed"] + counts["failed"] + counts["canceled"] == len(ids)
                if ended and not self._held() and all(map(_started, self.agents)):
                    return
                pause.wait(0.5)
        finally:
            queue.close()

    def _held(self) -> int:
        held = 0
        for agent in self.agents:
            with _store(agent.db_path) as store:
                held += len(store.fleet_leases_held())
        return held

    # --- the proof -----------------------------------------------------------------------------------

    def check(self, ids: list[int]) -> FleetReport:
        report = FleetReport()
        queue = FleetQueue.open(self.dsn)
        try:
            rows = {fleet_id: queue.get(fleet_id) for fleet_id in ids}
            events = {fleet_id: queue.events(fleet_id) for fleet_id in ids}
        finally:
            queue.close()
        local = self._local_runs()
        report.fleet = Counter(row.status for row in rows.values())
        report.refused_writes = sum(e["type"] == "refused" for history in events.values() for e in history)
        report.expired = sum(e["type"] == "lease_expired" for history in events.values() for e in history)
        report.lost = sum(run["lease"] == "lost" for runs in local.values() for run in runs)
        report.reran = sum(len({run["agent"] for run in runs if run["attempts"]}) > 1 for runs in local.values())
        report.checks = {
            "every fleet task terminal in PostgreSQL": [
                f"fleet task {i} is {row.status}"
                for i, row in rows.items()
                if row.status not in ("completed", "failed")
            ],
            "each ended exactly once, by its last claim's token": _ended_once(events),
            "no finished fleet task claimed or started again": _not_rerun(rows, events, local),
            "0 stale-token writes accepted": _no_stale_writes(rows, local),
            "every poisoned row refused with its reason, never run": _poison_refused(rows, local, self.poisoned),
            "every agent's leases reported or lost, none held": self._none_held(),
            "every agent's `evidence verify --all` is clean": self._verified(),
            "agents exited only when the harness ended them": self._clean_exits(),
        }
        return report

    def _local_runs(self) -> dict[int, list[dict[str, Any]]]:
        """fleet id → every local task that held it, on every agent: its lease state, token, attempts."""
        runs: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for agent in self.agents:
            with _store(agent.db_path) as store:
                rows = store._conn.execute(
                    """SELECT f.fleet_id, f.token, f.state, f.task_id, t.status,
                              (SELECT json_group_array(started_at) FROM task_attempts a WHERE a.task_id = f.task_id)
                       FROM fleet_leases f JOIN tasks t ON t.id = f.task_id"""
                ).fetchall()
            for fleet_id, token, state, task_id, status, started in rows:
                runs[fleet_id].append(
                    {"agent": agent.name, "token": token, "lease": state, "task_id": task_id, "status": status,
                     "attempts": [parse_ts(s) for s in json.loads(started)]}
                )  # fmt: skip
        return runs

    def _none_held(self) -> list[str]:
        problems = []
        for agent in self.agents:
            with _store(agent.db_path) as store:
                problems += [f"{agent.name} still holds fleet task {h.fleet_id}" for h in store.fleet_leases_held()]
        return problems

    def _verified(self) -> list[str]:
        problems = []
        for agent in self.agents:
            argv = [sys.executable, "-m", "agentd", "--config", str(agent.config_path), "evidence", "verify", "--all"]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=_env(), check=False)
            if done.returncode != 0:
                problems.append(f"{agent.name}: exit {done.returncode}: {(done.stdout + done.stderr)[-300:]}")
        return problems

    def _clean_exits(self) -> list[str]:
        return [
            f"{agent.name} exited {code} ({who})"
            for agent in self.agents
            for code, who in agent.service.exits
            if who == "itself" or (who == "harness SIGTERM" and code != 0) or who == "did not stop on SIGTERM"
        ]


def _ended_once(events: dict[int, list[dict[str, Any]]]) -> list[str]:
    problems = []
    for fleet_id, history in events.items():
        ends = [e for e in history if e["type"] in ("completed", "failed", "canceled")]
        claims = [e for e in history if e["type"] == "claimed"]
        if len(ends) != 1:
            problems.append(f"fleet task {fleet_id} ended {len(ends)} times")
        elif not claims:
            problems.append(f"fleet task {fleet_id} ended without a claim")
        elif ends[0]["token"] != claims[-1]["token"]:
            problems.append(
                f"fleet task {fleet_id} ended by token {ends[0]['token']}, last claimed {claims[-1]['token']}"
            )
    return problems


def _not_rerun(rows: dict[int, Any], events: dict[int, list[dict[str, Any]]], local: dict[int, Any]) -> list[str]:
    problems = []
    for fleet_id, history in events.items():
        types = [e["type"] for e in history if e["type"] not in ("refused",)]
        ended = next((i for i, kind in enumerate(types) if kind in ("completed", "failed")), None)
        if ended is not None and "claimed" in types[ended:]:
            problems.append(f"fleet task {fleet_id} was claimed after it ended")
        finished = rows[fleet_id].finished_at
        late = [run for run in local.get(fleet_id, []) for at in run["attempts"] if finished and at > finished]
        if late:
            problems.append(f"fleet task {fleet_id} started on {late[0]['agent']} after it ended")
    return problems


def _no_stale_writes(rows: dict[int, Any], local: dict[int, Any]) -> list[str]:
    """At most one agent's report counted per task, and it is the token PostgreSQL ended the task with."""
    problems = []
    for fleet_id, runs in local.items():
        reported = [run for run in runs if run["lease"] == "reported"]
        row = rows.get(fleet_id)
        if len(reported) > 1:
            problems.append(f"fleet task {fleet_id} reported by {[r['agent'] for r in reported]}")
        if reported and row is not None and reported[0]["token"] != row.lease_token:
            problems.append(f"fleet task {fleet_id}: reported token {reported[0]['token']}, ended by {row.lease_token}")
        if reported and row is not None and row.result and row.result.get("task_id") != reported[0]["task_id"]:
            problems.append(f"fleet task {fleet_id}: the result is not the reporting agent's task")
    return problems


def _poison_refused(rows: dict[int, Any], local: dict[int, Any], poisoned: dict[int, bool]) -> list[str]:
    if not poisoned:
        return ["the run wrote no poisoned row (too few tasks)"]
    problems = []
    for fleet_id, refusable in poisoned.items():
        row = rows[fleet_id]
        if not refusable:
            continue
        if row.status != "failed" or not row.result or row.result.get("status") != "refused":
            problems.append(f"poisoned fleet task {fleet_id} is {row.status}, result {row.result}")
        if local.get(fleet_id):
            problems.append(f"poisoned fleet task {fleet_id} became a local task on {local[fleet_id][0]['agent']}")
    return problems


def _started(agent: Agent) -> bool:
    """The agent's current process is past its start (a SIGTERM then is a stop, not a half-started exit)."""
    return "dispatch_started" in (agent.service.logs / f"{agent.name}-{agent.service.starts - 1}.log").read_text(
        errors="replace"
    )


@contextmanager
def _store(path: Path) -> Iterator[Store]:
    """A read-only look at an agent's SQLite while its dispatcher may run."""
    store = open_store(path, SystemClock(), readonly=True)
    try:
        yield store
    finally:
        store.close()


def _env() -> dict[str, str]:
    """The harness's environment without agentd's own overrides (a developer's AGENTD_CONFIG, say)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}


def run_fleet_chaos(
    directory: Path, *, tasks: int, kills: int, seed: int, deadline_s: float, task_s: tuple[float, float] = (0.02, 0.4)
) -> FleetReport:
    pg.require()
    with pg.cluster() as cluster:
        return FleetChaos(directory, cluster, seed, task_s).run(tasks, kills, deadline_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--kills", type=int, default=24)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds for the killing phase")
    parser.add_argument("--keep", metavar="DIR", help="run in DIR and keep it (default: a temp dir, removed)")
    args = parser.parse_args()
    with ExitStack() as stack:
        if args.keep:
            directory = Path(args.keep)
            directory.mkdir(parents=True, exist_ok=False)
        else:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="agentd-fleet-chaos-")))
        report = run_fleet_chaos(
            directory, tasks=args.tasks, kills=args.kills, seed=args.seed, deadline_s=args.deadline
        )
    print(f"seed {args.seed}")
    print(report.table())
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
