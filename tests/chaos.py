"""The chaos harness: real `agentd dispatch` and `agentd sensors` processes on one state dir, a
seeded workload with poisoned inputs from every surface, SIGKILLs at random moments, and then a
proof from the database, the evidence and the logs that nothing was lost, duplicated, re-run,
leaked or left running.

    make chaos                        # python tests/chaos.py --kills 60
    python tests/chaos.py --kills 12 --seed 7 --keep DIR

The short form runs in `make test` (tests/test_chaos.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import privsep
from fakemodel import FakeModelServer, Reply
from hostile_console import HostileConsoleClient
from hostile_http import Answer, HostileReceiver, answer
from s3server import KEYS, start_s3
from support import REPO, agent_config, ok, outcome_disagreements

from agentd.clock import SystemClock
from agentd.config.budget import day_start
from agentd.records import TERMINAL_STATUSES
from agentd.store import Store, init_state_dir, migrate, open_store
from agentd.work.validation import load_config

SECRET = 'chaos-Sk3y"with\\quote-0123456789'  # JSON escapes the quote and the backslash
SENSOR_SECRET = "chaos-sensor-token-9876543210"
HOOK_SECRET = 'chaos-hook-"tok\\en-5550123'  # the webhook's token: hostile answers echo it back
MiB = 1 << 20
DISPATCH_RSS_MIB = 300  # a dispatcher's peak resident memory, whatever the receiver answers
CLAIMABLE = ("pending", "retryable_failure")


@dataclass
class Service:
    """One of the two services, started and restarted as real processes."""

    name: str
    argv: list[str]
    env: dict[str, str]
    logs: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    kills: int = 0
    exits: list[tuple[int, str]] = field(default_factory=list)  # (return code, who ended it)

    def start(self) -> None:
        log = open(self.logs / f"{self.name}-{self.starts}.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.starts += 1

    def poll(self) -> None:
        """A service that exited by itself is recorded (an invariant failure) and restarted."""
        if self.process is not None and self.process.poll() is not None:
            self.exits.append((self.process.returncode, "itself"))
            self.start()

    def kill(self) -> None:
        self.poll()
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.exits.append((self.process.wait(timeout=30), "harness SIGKILL"))
        self.kills += 1

    def stop(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            self.exits.append((self.process.returncode, "itself"))
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.exits.append((self.process.wait(timeout=60), "harness SIGTERM"))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.exits.append((self.process.wait(), "did not stop on SIGTERM"))

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.logs.glob(f"{self.name}-*.log")))


@dataclass
class Report:
    seconds: float = 0.0
    kills: dict[str, int] = field(default_factory=dict)
    tasks: Counter[str] = field(default_factory=Counter)
    events: int = 0
    poisoned: Counter[str] = field(default_factory=Counter)
    checks: dict[str, list[str]] = field(default_factory=dict)  # invariant -> problems (empty: passed)

    @property
    def failed(self) -> list[str]:
        return [name for name, problems in self.checks.items() if problems]

    def table(self) -> str:
        lines = [
            f"chaos: {self.seconds:.0f}s, seed-driven; kills " + ", ".join(f"{k} {v}" for k, v in self.kills.items())
        ]
        lines.append(
            "tasks     " + "  ".join(f"{k} {v}" for k, v in sorted(self.tasks.items())) + f"  (events {self.events})"
        )
        lines.append("poisoned  " + "  ".join(f"{k} {v}" for k, v in sorted(self.poisoned.items())))
        lines.append("")
        lines.append(f"{'invariant':<48} result")
        for name, problems in self.checks.items():
            lines.append(f"{name:<48} {'passed' if not problems else 'FAILED: ' + '; '.join(problems[:3])}")
        passed = len(self.checks) - len(self.failed)
        lines.append(f"\n{passed} of {len(self.checks)} invariant checks passed, {len(self.failed)} failed")
        return "\n".join(lines)


# --- the workload ------------------------------------------------------------------------------------

FEED_SENSOR = """#!{python}
import os, sys
# Every run re-observes the whole feed (a sensor sees the world as it is); dedupe makes it once.
with open(os.environ["FEED"], "rb") as feed:
    sys.stdout.buffer.write(feed.read())
print("debug token " + os.environ["TOKEN"], file=sys.stderr)
"""


TASK_KINDS = ("follow_up", "poison_result", "secret", "symlink", "bytes", "daemon", "poison_usage")


TASK_S = (0.05, 0.8)  # how long a scripted task works (kills land mid-attempt); the short form shortens it


def task_payload(
    rng: random.Random, workspace: Path, tag: str, kind: str | None = None, task_s: tuple[float, float] = TASK_S
) -> tuple[dict[str, Any], str]:
    """A scripted task's payload and the surface it poisons ('' for none)."""
    side_log = str(workspace / "side-effects.log")
    base = {"append": side_log, "sleep_s": round(rng.uniform(*task_s), 2)}
    kind = kind or rng.choice(["plain"] * 5 + list(TASK_KINDS))
    if kind == "follow_up":
        follow = [{"task_type": "example", "source": "x", "subject": f"follow-up of {tag}", "payload": {}}]
        return {**base, "outcome": ok(follow_up_tasks=follow)}, ""
    if kind == "poison_result":
        raw = rng.choice(
            [
                '{"status": "completed", "machine_status": "ok", "operator_summary": "x", "external_messages": [NaN]}',
                '{"status": "completed", "machine_status": "ok", "operator_summary": "\\ud800"}',
                '{"status": "completed", "machine_status": "ok", "operator_summary": "x", "follow_up_tasks": ['
                + "[" * 3000
                + "]" * 3000
                + "]}",
                '{"status": "completed", "machine_status": "ok", "operator_summary": 1e99999}',
            ]
        )
        return {**base, "raw_result": raw}, "result file"
    if kind == "secret":
        block = json.dumps(ok(operator_summary="key ${json:API_KEY}"))
        return {**base, "stdout": f"${{API_KEY}}\n```json\n{block}\n```", "stderr": "${API_KEY}"}, "adapter output"
    if kind == "symlink":
        return {**base, "result_symlink": "/dev/zero"}, "disk"
    if kind == "bytes":
        return {
            **base,
            "stdout_hex": "ff fe 1b 5b 32 4a ed a0 80 00".replace(" ", ""),
            "outcome": ok(),
        }, "adapter output"
    if kind == "daemon":
        return {**base, "daemon": str(workspace / f"daemon-{tag}.pid"), "outcome": ok()}, "escapee"
    if kind == "poison_usage":
        return poisoned_usage_payload(rng, base)
    return {**base, "outcome": ok()}, ""


def poison_lines(key: str) -> list[str]:
    return [
        f'{{"event_id": "{key}", "observed_at": "0001-01-01T00:00:00+05:00", "source_ref": "x", '
        f'"dedupe_key": "{key}", "payload": {{}}}}',
        f'{{"event_id": "{key}", "observed_at": "2026-01-01T00:00:00Z", "source_ref": "x", '
        f'"dedupe_key": "{key}", "payload": {{"n": NaN}}}}',
        f'{{"event_id": "{key}", "observed_at": "2026-01-01T00:00:00Z", "source_ref": "x", '
        f'"dedupe_key": "\\udcff{key}", "payload": {{}}}}',
        f'{{"event_id": "{key}", "observed_at": "2026-01-01T00:00:00Z", "source_ref": "x", '
        f'"dedupe_key": "{key}", "payload": {{"n": 1{"0" * 30}}}}}',
        "[" * 50000 + "]" * 50000,
        "\x1b]0;pwned\x07 not json",
    ]


# --- poisoned usage (issue 23): a script's outcome and a harness's result record report it -----------------

USAGE_POISON = ['"1e999"', "Infinity", "-Infinity", "NaN", "1e999", "-1000", "1" + "0" * 30, '"lots"', "[1, 2]", "1.5"]
USAGE_KEYS = ("cost_usd", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
HARNESS_TASK = "harness"  # the task type of the poisoned claude-code stand-in (tests/adapters/poisoned_claude.py)


def poisoned_usage_payload(rng: random.Random, base: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A scripted task whose outcome's `usage` holds poison: it must complete with its usage unknown."""
    numbers = ", ".join(f'"{key}": {rng.choice(USAGE_POISON)}' for key in rng.sample(USAGE_KEYS, 2))
    raw = json.dumps(ok(operator_summary="spent a poisoned amount"))[:-1] + f', "usage": {{{numbers}}}}}'
    return {**base, "raw_result": raw}, "usage report"


def add_usage_surfaces(raw: dict[str, Any]) -> None:
    """A claude-code adapter whose CLI reports poisoned usage, its task type, and a budget, so every
    claim reads the day's spend."""
    command = str(Path(__file__).resolve().parent / "adapters" / "poisoned_claude.py")
    raw["adapters"].append({"adapter_id": "claude", "kind": "claude-code", "command": command, "timeout_ms": 30_000})
    raw["task_types"].append(
        {
            "task_type": HARNESS_TASK,
            "payload_schema_id": "agent-runtime/payload.any-object/v1",
            "default_profile_id": "operator",
            "default_adapter_id": "claude",
        }
    )
    raw["budget"] = {"daily_usd": 100_000}


def usage_poisoned(task: Any) -> bool:
    """A task whose adapter reports poisoned usage (a harness task, or a script's poisoned outcome)."""
    raw = task.payload.get("raw_result") if isinstance(task.payload, dict) else None
    return task.task_type == HARNESS_TASK or (isinstance(raw, str) and '"usage"' in raw)


def usage_problems(store: Store, tasks: list[Any]) -> list[str]:
    """No stored cost or count is non-finite, negative or beyond int64, the day's spend is finite, and
    every attempt that reported poisoned usage and ran to its end completed (its usage unknown, never an
    internal error)."""
    problems = []
    columns = ("cost_usd", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    for attempt_id, *values in store._conn.execute(f"SELECT attempt_id, {', '.join(columns)} FROM task_attempts"):
        for column, value in zip(columns, values, strict=True):
            integer = column != "cost_usd" and isinstance(value, int)
            number = isinstance(value, int | float) and math.isfinite(value) and 0 <= value <= 2**63 - 1
            if value is not None and not (number and (integer or column == "cost_usd")):
                problems.append(f"attempt {attempt_id}: {column} = {value!r}")
    spend = store.spend_since(day_start(SystemClock().now()))
    if not (math.isfinite(spend.total_usd) and spend.total_usd >= 0):
        problems.append(f"the day's spend is {spend.total_usd!r}")
    for task in filter(usage_poisoned, tasks):
        for attempt in store.attempts_of(task.task_id):  # killed mid-run is chaos; judged, it completed
            if attempt.termination_reason == "internal_error" or (
                attempt.termination_reason == "exited" and attempt.retry_class != "none"
            ):
                problems.append(
                    f"task {task.task_id} ({task.task_type}): its attempt {attempt.attempt_id} "
                    f"ended {attempt.termination_reason}, {attempt.retry_class}"
                )
    return problems


def sensor_line(rng: random.Random, workspace: Path, key: str, task_s: tuple[float, float]) -> tuple[str, str]:
    """One line of the feed: a valid event (proposing a task or a goal-loop) or a poisoned one."""
    if rng.random() < 0.15:
        return rng.choice(poison_lines(key)), "sensor line"
    event: dict[str, Any] = {
        "event_id": key,
        "observed_at": "2026-01-01T00:00:00Z",
        "source_ref": "chaos",
        "dedupe_key": key,
        "payload": {},
    }
    if rng.random() < 0.15:
        answers = {"verify": rng.choice([["complete"], ["continue", "complete"]])}
        event["proposed_workflow"] = {"template": "goal-loop", "instance_key": key, "context": {"answers": answers}}
    else:
        payload, surface = task_payload(rng, workspace, key, task_s=task_s)
        event["proposed_task"] = {
            "task_type": "scripted",
            "source": "x",
            "subject": f"sensed {key}",
            "payload": payload,
        }
        return json.dumps(event), surface
    return json.dumps(event), ""


POLICY_ATTACKS = [  # what an attempt can do to its own policy socket (docs/policy.md): each bounded
    {"flood": {"threads": 4, "calls": 400, "command": "git push -f"}},
    {"hangups": 200},
    {"impostor": {"times": 3}},
    {"hold": {"loops": 2, "stagger_s": 0.5, "for_s": 4}},
]
POLICY_MAX_RECORDED = 100


def add_policy_attack(raw: dict[str, Any]) -> None:
    """A tool policy whose socket a hostile attempt attacks in turn (tests/adapters/hostile_policy.py) while other
    tasks wait: held for ever, flooded, hung up on; each attack is bounded and the queue moves on after it."""
    raw["policy"] = {"ask_timeout_s": 2, "max_recorded_decisions": POLICY_MAX_RECORDED}
    rules = [
        {"decision": "ask", "tool": "Bash", "command": "curl *", "reason": "the network needs a person"},
        {"decision": "deny", "tool": "Bash", "command": "git push*", "reason": "pushing is the operator's"},
    ]  # its profile's own: no other attempt of the run is judged
    raw["profiles"].append({**raw["profiles"][0], "profile_id": "attacker", "tool_policy": rules})
    command = str(REPO / "tests" / "adapters" / "hostile_policy.py")
    raw["adapters"].append({"adapter_id": "policy-attack", "kind": "script", "command": command, "timeout_ms": 30_000})
    raw["task_types"].append(
        {
            "task_type": "policy-attack",
            "payload_schema_id": "agent-runtime/payload.any-object/v1",
            "default_profile_id": "attacker",
            "default_adapter_id": "policy-attack",
        }
    )


def policy_attack_problems(store: Store, tasks: list[Any]) -> list[str]:
    """The attack's attempts were each bounded (events, held time) and it, and everything after it, ended."""
    problems = []
    for task in (t for t in tasks if t.task_type == "policy-attack"):
        for attempt in store.attempts_of(task.task_id):
            events = [e for e in store.read_events(task_id=task.task_id) if e.attempt_id == attempt.attempt_id]
            decided = sum(
                1 for e in events if e.type in ("tool_call_allowed", "tool_call_denied", "permission_requested")
            )
            if decided > POLICY_MAX_RECORDED + 10:  # held calls' own decisions beside the cap
                problems.append(f"attempt {attempt.attempt_id}: {decided} decision events")
        kinds = {e.type for e in store.read_events(task_id=task.task_id)}
        crashed = (task.last_error or "").startswith("crashed_runtime")  # killed under it crash_limit times in a row
        if (task.status != "completed" and not crashed) or "tool_call_denied" not in kinds:
            problems.append(f"the policy attack's task {task.task_id} is {task.status} (events: {sorted(kinds)})")
    return problems or ([] if any(t.task_type == "policy-attack" for t in tasks) else ["no policy attack ran"])


GATEWAY_KEY = "sk-ant-chaos-" + "9" * 24  # the provider key the gateway holds (tests/adapters/gateway_caller.py)
GATEWAY_TASKS = 4


def add_gateway_calls(raw: dict[str, Any], upstream: str, env_file: Path, *, network: bool) -> None:
    """A claude-code stand-in whose model calls go through the gateway (docs/gateway.md), each slow enough that a
    dispatcher killed under it kills the gateway mid-stream; in its own network where the agent runs as deployed."""
    raw["gateway"] = {"enabled": True, "network": network}
    command = str(REPO / "tests" / "adapters" / "gateway_caller.py")
    raw["adapters"].append(
        {"adapter_id": "gateway-calls", "kind": "claude-code", "command": command, "timeout_ms": 30_000,
         "env_file": str(env_file), "env": {"ANTHROPIC_BASE_URL": upstream}}
    )  # fmt: skip
    raw["task_types"].append(
        {"task_type": "gateway-calls", "payload_schema_id": "agent-runtime/payload.any-object/v1",
         "default_profile_id": "operator", "default_adapter_id": "gateway-calls"}
    )  # fmt: skip


def hostile_webhook(raw: dict[str, Any], url: str, env_file: Path) -> None:
    """Every external message goes to a webhook on the harness's hostile receiver."""
    raw["message_handlers"] = [
        {
            "handler_id": "hook",
            "kind": "webhook",
            "url": url,
            "timeout_s": 2,
            "max_attempts": 4,
            "backoff_base_s": 0.5,
            "backoff_max_s": 3,
            "headers": {"Authorization": "Bearer ${HOOK_TOKEN}"},
            "env_file": str(env_file),
        }
    ]
    raw["dispatch"]["default_message_handler"] = "hook"
    for profile in raw["profiles"]:
        profile["result_policy"]["allow_external_messages"] = True


_TOKEN = HOOK_SECRET.encode()
HOSTILE_ANSWERS = [  # in turn, one per request (tests/hostile_http.py)
    answer(200),
    answer(500, b"Internal " + _TOKEN),  # the secret in the reason phrase
    answer(503, b"Busy", [(b"Retry-After", "²".encode())]),
    answer(429, b"Slow down", [(b"Retry-After", b"Fri, 31 Dec 9999 23:59:59 GMT"), (b"Retry-After", b"-1")]),
    answer(500, b"Huge", filler=256 * MiB, length=1 << 30),  # read whole, four at once were 5 GB
    answer(200, b"OK", filler=256 * MiB),
    answer(500, b"Trickle", chunked=True, filler=1 << 40, pause_s=0.05),  # until timeout_s
    answer(502, _TOKEN, body=_TOKEN, filler=MiB, length=1 << 30, reset=True),
    Answer(head=_TOKEN + b"\r\n\r\n"),  # HTTP/0.9 garbage
    Answer(silent=True),
    answer(400, b"Bad " + _TOKEN, body=b'{"token": ' + json.dumps(HOOK_SECRET).encode() + b"}"),  # failed for good
    answer(204, b"No Content"),
]


def hostile_answer(number: int) -> Answer:
    return HOSTILE_ANSWERS[number % len(HOSTILE_ANSWERS)]


def messages_unsettled(conn: Any) -> list[str]:
    """Every external message ended delivered or failed (with why), or waits, pending, for its next
    attempt (or for the sweep of one a stop interrupted)."""
    rows = conn.execute(
        """SELECT o.id, o.status, d.status, d.next_attempt_at, d.in_flight, d.last_error
           FROM outbox o LEFT JOIN deliveries d ON d.outbox_id = o.id WHERE o.kind = 'external_message'"""
    ).fetchall()
    problems = []
    for outbox_id, outbox_status, status, next_at, in_flight, error in rows:
        settled = status == "delivered" or (status == "failed" and error) or outbox_status == "refused"
        waiting = status == "pending" and (next_at is not None or in_flight)
        if not (settled or waiting):
            problems.append(f"message {outbox_id}: outbox {outbox_status}, delivery {status}")
    return problems


class PeakMemory:
    """The highest resident memory (VmHWM) any process of a service reached, sampled every 0.2 s."""

    def __init__(self, service: Service) -> None:
        self.service, self.peak_kib = service, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.done.wait(0.2):
            process = self.service.process
            try:
                status = Path(f"/proc/{process.pid}/status").read_text() if process else ""
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_kib = max(self.peak_kib, int(line.split()[1]))

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)

    def problems(self) -> list[str]:
        peak = self.peak_kib / 1024
        return [f"{self.service.name} reached {peak:.0f} MiB"] if peak > DISPATCH_RSS_MIB else []


CLI_POISON = [
    ["--payload", '{"x": NaN}'],
    ["--payload", "[" * 1500 + "]" * 1500],
    ["--subject", "x" * 600],
    ["--at", "9999-12-31T23:59:59-01:00"],
    ["--priority", "99999999999999999999"],
    ["--payload", '{"n": 99999999999999999999999}'],
]


# --- the run -------------------------------------------------------------------------------------------


class Chaos:
    """With an `agent` (tests/privsep.py: root, real users), the services run as the agent's service user
    and every attempt and sensor as its run user, as the units run them, and hostile attempts try to act
    as the operator; without one, everything runs as the harness's own user."""

    def __init__(
        self, directory: Path, seed: int, task_s: tuple[float, float] = TASK_S, agent: privsep.PrivAgent | None = None
    ) -> None:
        self.dir, self.rng, self.task_s, self.agent = directory, random.Random(seed), task_s, agent
        self.home = agent.base if agent else directory  # what the run user must reach: the feed, the sensors
        self.workspace = agent.workspace if agent else directory / "chaos" / "workspace"  # agent_config(home / "chaos")
        self.feed = self.home / "feed.jsonl"
        self.feed.write_text("")
        self.feed.chmod(0o644)
        self.targets = self.home / "targets.json"  # the running attempts, for the hostile sensor to aim at
        self.hostile_reports: list[str] = []
        self.web: Service | None = None
        self.console: HostileConsoleClient | None = None
        self.held_task: int | None = None
        self.valid_keys: list[str] = []
        self.cli_poison_sources: list[str] = []
        self.problems: list[str] = []  # what the harness itself saw go wrong (CLI exits)
        self.poisoned: Counter[str] = Counter()
        self.webhook = HostileReceiver(hostile_answer)
        self.model = FakeModelServer(turns=[], default=Reply("ok", input_tokens=5, output_tokens=3))
        self.model.__enter__()  # what the gateway's attempts call (tests/adapters/gateway_caller.py)
        self.s3 = start_s3()  # [archive]'s bucket: the sensor service uploads as it is killed (issue 54)
        self.config_path = self._configure()
        self.config = load_config(self.config_path)
        logs = directory / "logs"
        logs.mkdir()
        self.env = {
            k: v for k, v in os.environ.items() if k != "AGENTD_CONFIG" and not (k.startswith("AGENTD_") and "__" in k)
        }
        if agent is None:
            init_state_dir(self.config.paths.state_dir, self.config.paths.workspace)
            migrate(self.config.db_path, SystemClock())
            base = [sys.executable, "-m", "agentd", "--config", str(self.config_path)]
            self.dispatch = Service("dispatch", [*base, "dispatch"], self.env, logs)
            self.sensors = Service("sensors", [*base, "sensors"], self.env, logs)
        else:
            agent.config_path = self.config_path
            initialised = agent.as_service("init")
            assert initialised.returncode == 0, initialised.stderr
            self.env = {**self.env, **agent.env()}
            self.dispatch = Service("dispatch", agent.service_argv("dispatch"), self.env, logs)
            self.sensors = Service("sensors", agent.service_argv("sensors", delegated=False), self.env, logs)
            web_argv = agent.service_argv("web", "--listen", "127.0.0.1:0", delegated=False)
            self.web = Service("web", web_argv, self.env, logs)  # never killed: its port is the OS's pick

    def _configure(self) -> Path:
        sensors = self.home / "sensors" / "feed"
        sensors.mkdir(parents=True)
        if self.agent:  # a sensor that reaches for every running attempt (issue #38: it forged outcomes)
            hostile = self.home / "sensors" / "reach"
            hostile.mkdir()
            (hostile / "sensor.toml").write_text(
                'description = "reaches for the attempts"\ninterval_seconds = 1\ntimeout_seconds = 20\n'
                f'command = ["{REPO}/tests/adapters/hostile_sensor.py"]\n'
                f'env = {{ HOSTILE_TARGETS = "{self.targets}" }}\n'
            )
        script = sensors / "feed.py"
        python = privsep.agentd_bin() / "python" if self.agent else Path(sys.executable)
        script.write_text(FEED_SENSOR.format(python=python))
        script.chmod(0o755)
        sensor_env = sensors / "secrets.env"
        sensor_env.write_text(f"TOKEN={SENSOR_SECRET}\n")
        if self.agent:
            self.agent.readable(self.home / "sensors")
            self.agent.own(sensor_env)
        else:
            sensor_env.chmod(0o600)
        (sensors / "sensor.toml").write_text(
            'description = "the chaos feed"\ninterval_seconds = 1\ntimeout_seconds = 20\n'
            f'command = ["./feed.py"]\nenv_file = "secrets.env"\nenv = {{ FEED = "{self.feed}" }}\n'
        )
        hook_env = self._hook_env()
        gateway_env = self._secret_file("gateway.env", f"ANTHROPIC_API_KEY={GATEWAY_KEY}\n")
        s3_env = self._secret_file("s3.env", "".join(f"{k}={v}\n" for k, v in KEYS.items()))
        adapter_env = self._secret_file("scripted.env", f"API_KEY='{SECRET}'\n")
        side_log = str(self.workspace / "side-effects.log")

        def mutate(raw: dict[str, Any]) -> None:
            if self.agent:
                privsep.boundary(raw, self.agent)
            raw["paths"]["sensors_dir"] = str(self.home / "sensors")
            for adapter in raw["adapters"]:
                if adapter["adapter_id"] == "scripted":
                    adapter["env_file"] = str(adapter_env)
            raw["dispatch"].update(backoff_base_s=0, grace_s=2, kill_grace_s=1, lock_heartbeat_s=1)
            hostile_webhook(raw, self.webhook.url, hook_env)
            raw["metrics"] = {"dispatch_listen": "127.0.0.1:0", "sensors_listen": "127.0.0.1:0"}
            add_usage_surfaces(raw)
            add_policy_attack(raw)
            add_gateway_calls(raw, self.model.url, gateway_env, network=self.agent is not None)
            raw["archive"] = {
                "bucket": self.s3.bucket("chaos"),
                "endpoint_url": self.s3.url,
                "credentials_file": str(s3_env),
                "retention_days": 30,
                "head_interval_s": 1,
                "poll_s": 0.3,
                "timeout_s": 5,
            }
            raw["schedules"] = [
                {
                    "schedule_id": "chaos-tick",
                    "interval_seconds": 3,
                    "task": {"task_type": "scripted", "payload": {"append": side_log, "sleep_s": 0.3, "outcome": ok()}},
                }
            ]

        path = agent_config(self.home / "chaos", mutate)
        if self.agent:
            self.agent.readable(self.home / "chaos")
        return path

    def feed_more(self, count: int) -> None:
        lines = []
        for _ in range(count):
            key = f"k{len(self.valid_keys)}-{self.rng.randrange(10**6)}"
            line, surface = sensor_line(self.rng, self.workspace, key, self.task_s)
            if surface:
                self.poisoned[surface] += 1
            if surface != "sensor line":
                self.valid_keys.append(key)
            lines.append(line)
        with self.feed.open("a", encoding="utf-8", errors="surrogateescape") as feed:
            feed.write("".join(line + "\n" for line in lines))

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "agentd", "--config", str(self.config_path), *args]
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)

    def add_by_cli(self, *, poison: bool | None = None) -> None:
        if poison if poison is not None else self.rng.random() < 0.5:
            source = f"chaos:cli-poison:{len(self.cli_poison_sources)}"
            self.cli_poison_sources.append(source)
            self.poisoned["cli argument"] += 1
            result = self.cli("task", "add", "--type", "scripted", "--source", source, *self.rng.choice(CLI_POISON))
            if result.returncode != 2 or "Traceback" in result.stderr:
                self.problems.append(f"poisoned task add exited {result.returncode}: {result.stderr[-200:]}")
            return
        payload, surface = task_payload(self.rng, self.workspace, f"cli{self.rng.randrange(10**6)}", task_s=self.task_s)
        if surface:
            self.poisoned[surface] += 1
        result = self.cli("task", "add", "--type", "scripted", "--payload", json.dumps(payload))
        if result.returncode != 0:
            self.problems.append(f"task add exited {result.returncode}: {result.stderr[-200:]}")

    def add_hostile(self) -> None:
        """An attempt that tries, from inside, everything an operator can do (tests/adapters/hostile.py)."""
        if self.agent is None:
            return  # the harness's own user runs it all: nothing separates agent from operator to test
        report = f"hostile-{len(self.hostile_reports)}.json"
        payload = {
            "report": report,
            "env_file": str(self.agent.env_file),
            "approve": self.held_task,
            "sensor_home": str(self.agent.sensor_home),
        }
        result = self.cli("task", "add", "--type", "hostile", "--payload", json.dumps(payload))
        if result.returncode != 0:
            self.problems.append(f"hostile task add exited {result.returncode}: {result.stderr[-200:]}")
        self.hostile_reports.append(report)
        self.poisoned["the agent as its operator"] += 1

    def seed_workload(self) -> None:
        """Every poisoned surface at least once, then a random mix."""
        attack = self.cli(
            "task",
            "add",
            "--type",
            "policy-attack",
            "--payload",
            json.dumps({"attacks": POLICY_ATTACKS, "outcome": ok()}),
        )
        if attack.returncode != 0:
            self.problems.append(f"policy attack task add exited {attack.returncode}: {attack.stderr[-200:]}")
        self.poisoned["the attempt against its policy socket"] += 1
        for _ in range(GATEWAY_TASKS):  # claude stand-ins whose model calls go through the gateway
            added = self.cli("task", "add", "--type", "gateway-calls", "--payload", "{}")
            if added.returncode != 0:
                self.problems.append(f"gateway task add exited {added.returncode}: {added.stderr[-200:]}")
        self.poisoned["the gateway killed mid-stream"] += GATEWAY_TASKS
        if self.agent is not None:
            held = self.cli("task", "add", "--type", "example", "--subject", "held", "--require-approval", "--json")
            self.held_task = json.loads(held.stdout)["task_id"]
            self.add_hostile()
        with self.feed.open("a", encoding="utf-8") as feed:
            for line in poison_lines("seed-poison"):
                feed.write(line + "\n")
                self.poisoned["sensor line"] += 1
        for kind in TASK_KINDS:
            payload, surface = task_payload(self.rng, self.workspace, f"seed-{kind}", kind, self.task_s)
            if surface:
                self.poisoned[surface] += 1
            event = {
                "event_id": f"seed-{kind}",
                "observed_at": "2026-01-01T00:00:00Z",
                "source_ref": "chaos",
                "dedupe_key": f"seed-{kind}",
                "payload": {},
                "proposed_task": {"task_type": "scripted", "source": "x", "payload": payload},
            }
            with self.feed.open("a", encoding="utf-8") as feed:
                feed.write(json.dumps(event) + "\n")
            self.valid_keys.append(f"seed-{kind}")
        self.feed_more(20)
        self.add_harness_poison(3)
        self.feed_messages(len(HOSTILE_ANSWERS))

    def add_harness_poison(self, count: int) -> None:
        """Tasks on the poisoned claude-code stand-in (tests/adapters/poisoned_claude.py)."""
        for _ in range(count):
            result = self.cli("task", "add", "--type", HARNESS_TASK, "--subject", "poisoned usage")
            if result.returncode != 0:
                self.problems.append(f"harness task add exited {result.returncode}: {result.stderr[-200:]}")
            self.poisoned["harness usage"] += 1

    def run(self, kills: int, deadline_s: float, pace_s: tuple[float, float] = (0.3, 1.8)) -> Report:
        started = time.monotonic()
        self.seed_workload()
        self.dispatch.start()
        self.sensors.start()
        self.memory = PeakMemory(self.dispatch)
        self.add_by_cli(poison=True)
        self._start_console()
        pause = threading.Event()
        done = 0
        while done < kills and time.monotonic() - started < deadline_s:
            pause.wait(self.rng.uniform(*pace_s))
            for service in (self.dispatch, self.sensors):
                service.poll()
            action = self.rng.random()
            if action < 0.25:
                self.feed_more(self.rng.randint(1, 6))
            elif action < 0.35:
                self.add_by_cli()
            elif action < 0.40:
                self.add_hostile()
            elif action < 0.48:
                self.feed_messages(self.rng.randint(1, 3))
            elif action < 0.56:
                self.flood_console()
            self.aim_hostile_sensor()
            victim = self.rng.choice([self.dispatch, self.dispatch, self.sensors])
            victim.kill()
            done += 1
            pause.wait(self.rng.uniform(0.0, 0.4))
            victim.start()
        self._drain(started, deadline_s)
        self._settle_messages()
        self.dispatch.stop()
        self.sensors.stop()
        if self.web is not None:
            self.web.stop()
        self.memory.stop()
        self.webhook.close()
        self.model.__exit__(None, None, None)
        try:
            report = self.check()
        finally:
            self.s3.stop()
        report.seconds = time.monotonic() - started
        return report

    def aim_hostile_sensor(self) -> None:
        """Tell the hostile sensor where every running attempt is (the worst case: it knows where to aim)."""
        if self.agent is None:
            return
        runs = self.agent.run_area / "runs"
        pids = self.agent.processes_of(self.agent.run)
        attempts = [{"run": str(run), "pid": pids[0] if pids else 1} for run in runs.iterdir() if run.is_dir()]
        partial = self.targets.with_suffix(".partial")
        partial.write_text(json.dumps({"runs": str(runs), "workspace": str(self.workspace), "attempts": attempts}))
        partial.chmod(0o644)
        partial.replace(self.targets)

    def _drain(self, started: float, deadline_s: float) -> None:
        """No more kills: wait until every sensed key made its work and nothing is due or running."""
        store = open_store(self.config.db_path, SystemClock(), readonly=True)
        pause = threading.Event()
        quiet = 0
        try:
            limit = time.monotonic() + max(60.0, deadline_s - (time.monotonic() - started))
            while time.monotonic() < limit and quiet < 3:
                pause.wait(0.5)
                for service in (self.dispatch, self.sensors):
                    service.poll()
                now = SystemClock().now()
                tasks = store.list_tasks(limit=1_000_000)
                busy = any(
                    t.status == "running"
                    or (
                        t.status in CLAIMABLE
                        and t.available_at <= now
                        and t.schedule_id is None
                        and not t.awaiting_approval
                    )
                    for t in tasks
                )
                sensed = {r for (r,) in store._conn.execute("SELECT dedupe_key FROM sensor_events").fetchall()}
                busy = busy or store.archive_queue().length > 0  # every sealed folder in the bucket
                quiet = quiet + 1 if not busy and set(self.valid_keys) <= sensed else 0
        finally:
            store.close()

    # --- a hostile console client (tests/hostile_console.py) ----------------------------------------

    def _start_console(self) -> None:
        """`agentd web` as the services' user, an operator token for root and a stolen one for the run
        user, then a first flood from the run user."""
        if self.web is None or self.agent is None:
            return
        self.web.start()
        found = None
        deadline = time.monotonic() + 60
        while found is None and time.monotonic() < deadline and self.web.process and self.web.process.poll() is None:
            threading.Event().wait(0.05)
            found = re.search(r"console and API at http://127\.0\.0\.1:([0-9]+)/", self.web.log_text())
        if found is None:
            self.problems.append(f"agentd web did not serve: {self.web.log_text()[-300:]}")
            return
        tokens = [self.cli("web", "token", "add", name, "--json") for name in ("chaos-operator", "leaked")]
        operator, stolen = (json.loads(done.stdout)["token"] for done in tokens)
        self.console = HostileConsoleClient(self.agent.run, int(found.group(1)), operator, stolen)
        self.flood_console()

    def flood_console(self) -> None:
        if self.console is not None:
            self.poisoned["the run user at the console"] += self.console.flood(self.rng)

    # --- hostile webhook answers ---------------------------------------------------------------------

    def _secret_file(self, name: str, text: str) -> Path:
        """A file of keys only the services read: the agent's user's (as deployed) or 0600 (as root)."""
        path = self.home / name
        path.write_text(text)
        if self.agent:
            self.agent.own(path)
        else:
            path.chmod(0o600)
        return path

    def _hook_env(self) -> Path:
        """The webhook's env_file: its token is a secret the receiver echoes back in its answers."""
        path = self.home / "hook.env"
        path.write_text(f"HOOK_TOKEN='{HOOK_SECRET}'\n")
        if self.agent:
            self.agent.own(path)
        else:
            path.chmod(0o600)
        return path

    def feed_messages(self, count: int) -> None:
        """Sensed tasks whose outcome asks for an external message (to the hostile webhook)."""
        lines = []
        for _ in range(count):
            key = f"m{len(self.valid_keys)}-{self.rng.randrange(10**6)}"
            payload = {
                "sleep_s": round(self.rng.uniform(*self.task_s), 2),
                "outcome": ok(external_messages=[{"text": f"chaos message {key}"}]),
            }
            task = {"task_type": "scripted", "source": "x", "subject": f"message {key}", "payload": payload}
            event = {"event_id": key, "observed_at": "2026-01-01T00:00:00Z", "source_ref": "chaos"}
            lines.append(json.dumps({**event, "dedupe_key": key, "payload": {}, "proposed_task": task}))
            self.valid_keys.append(key)
            self.poisoned["webhook answer"] += 1
        with self.feed.open("a", encoding="utf-8") as feed:
            feed.write("".join(line + "\n" for line in lines))

    def _settle_messages(self, limit_s: float = 60.0) -> None:
        """No more kills: wait (a while) until no message waits for its next attempt, so every one was
        tried and most have ended (each within max_attempts * (timeout_s + backoff_max_s))."""
        store = open_store(self.config.db_path, SystemClock(), readonly=True)
        pause = threading.Event()
        try:
            limit = time.monotonic() + limit_s
            while time.monotonic() < limit and any(
                item.kind == "external_message" for item in store.list_outbox(state="pending", limit=100_000)
            ):
                self.dispatch.poll()
                pause.wait(0.5)
        finally:
            store.close()

    def _messages(self, conn: Any) -> list[str]:
        asked = len(self.webhook.heads)
        every = (
            [] if asked >= len(HOSTILE_ANSWERS) else [f"the webhook was asked {asked} times, not every answer given"]
        )
        return every + messages_unsettled(conn)

    # --- the proof -----------------------------------------------------------------------------------

    def _archived(self, store: Store) -> list[str]:
        """The bucket after every SIGKILL of the sensor service mid-upload: each sealed folder there with the
        manifest hash its event recorded, or still queued (a drain the deadline cut short: nothing lost), and the
        auditor's check from the bucket alone clean."""
        from agentd.archive.audit import audit_archive
        from agentd.archive.bucket import Bucket
        from agentd.archive.location import Location, attempt_key

        bucket = Bucket(Location.of(self.config.archive), self.config.agent.agent_id, KEYS)
        queued = {row[0] for row in store._conn.execute("SELECT attempt_id FROM archive_queue")}
        tasks = {a.attempt_id: a.task_id for a in store.all_attempts()}
        problems = []
        for attempt_id, (_, sha256) in store.sealed_manifests().items():
            stored = None if attempt_id in queued else bucket.get(attempt_key(tasks[attempt_id], attempt_id))
            if attempt_id not in queued and (stored is None or stored.metadata.get("manifest-sha256") != sha256):
                problems.append(f"attempt {attempt_id}: {'lost' if stored is None else 'another hash'}")
        return problems + [str(finding) for finding in audit_archive(bucket).findings]

    def check(self) -> Report:
        store = open_store(self.config.db_path, SystemClock(), readonly=True)
        try:
            return self._check(store)
        finally:
            store.close()

    def _check(self, store: Store) -> Report:
        report = Report(poisoned=self.poisoned)
        report.kills = {"dispatch": self.dispatch.kills, "sensors": self.sensors.kills}
        conn = store._conn
        tasks = store.list_tasks(limit=1_000_000)
        report.tasks = Counter(t.status for t in tasks)
        report.events = store.last_event_sequence()
        checks: dict[str, Callable[[], list[str]]] = {
            "every sensed event made exactly one task or workflow": lambda: self._sensed_once(conn),
            "every task terminal or claimable": lambda: [
                f"task {t.task_id} is {t.status}" for t in tasks if t.status not in (*TERMINAL_STATUSES, *CLAIMABLE)
            ],
            "no attempt left open": lambda: [
                f"attempt {r[0]} of task {r[1]}"
                for r in conn.execute("SELECT attempt_id, task_id FROM task_attempts WHERE ended_at IS NULL")
            ],
            "no completed task ran again": lambda: self._not_rerun(store, tasks),
            "every follow-up exists exactly once": lambda: self._follow_ups_once(conn),
            "no secret under the state dir or in the logs": self._no_secrets,
            "the event chain verifies": lambda: [f"{b.sequence}: {b.reason}" for b in store.verify_event_chain()],
            "every task's status rebuilds from the events": lambda: self._read_model(store, tasks),
            "every ended or retrying task's outcome says its status": lambda: outcome_disagreements(tasks),
            "agentd evidence verify finds nothing": lambda: self._evidence(store),
            "every sealed folder in the archive with its hash; its audit clean": lambda: self._archived(store),
            "no service exited except by the harness": self._clean_exits,
            "poisoned CLI input refused, nothing written": lambda: (
                self.problems + [f"task from {s}" for s in self.cli_poison_sources if any(t.source == s for t in tasks)]
            ),
            "no process outlived its attempt": self._no_escapees,
            "workflows ended or waiting on a step task": lambda: self._workflows(conn),
            "no attempt acted as its operator, no sensor reached an attempt": lambda: self._operator_held(store, tasks),
            "usage stored finite, >= 0; poisoned usage still completes": lambda: usage_problems(store, tasks),
            "every message delivered, failed, or pending a retry": lambda: self._messages(conn),
            f"no dispatcher above {DISPATCH_RSS_MIB} MiB resident": self.memory.problems,
            "the policy socket's attacks bounded, the queue moved on": lambda: policy_attack_problems(store, tasks),
            "model calls carried the real key only, each gateway task ended": lambda: self._gateway_held(tasks),
            "no console request of the run user succeeded": lambda: (
                self.console.problems(self.config.db_path) if self.console else []
            ),
        }
        report.checks = {name: check() for name, check in checks.items()}
        return report

    def _gateway_held(self, tasks: list[Any]) -> list[str]:
        """The upstream saw the real key on every call, never a token (the gateway swapped it, or nothing went),
        and every task whose attempts went through it ended, killed under it or not."""
        problems = [f"a model call carried {r.headers.get('x-api-key')!r}" for r in self.model.requests
                    if r.protocol == "anthropic" and r.headers.get("x-api-key") != GATEWAY_KEY]  # fmt: skip
        gateway_tasks = [t for t in tasks if t.task_type == "gateway-calls"]
        for task in gateway_tasks:
            crashed = (task.last_error or "").startswith("crashed_runtime")
            if task.status != "completed" and not crashed:
                problems.append(f"gateway task {task.task_id} is {task.status}: {task.last_error}")
        calls = sum(1 for r in self.model.requests if r.protocol == "anthropic")
        if len(gateway_tasks) != GATEWAY_TASKS or calls < 3 * GATEWAY_TASKS:
            problems.append(f"{len(gateway_tasks)} gateway tasks, {calls} model calls: the gateway was not tried")
        return problems

    def _sensed_once(self, conn: Any) -> list[str]:
        problems = []
        rows = {r[0]: r for r in conn.execute("SELECT dedupe_key, result, task_id, workflow_id FROM sensor_events")}
        for key in self.valid_keys:
            row = rows.get(key)
            if row is None or row[1] != "created":
                problems.append(f"{key}: {row[1] if row else 'never recorded'}")
        sources = Counter(r[0] for r in conn.execute("SELECT source FROM tasks WHERE source LIKE 'sensor:feed:%'"))
        problems += [f"{source} made {n} tasks" for source, n in sources.items() if n != 1]
        return problems

    def _not_rerun(self, store: Store, tasks: list[Any]) -> list[str]:
        problems = []
        for task in tasks:
            if task.status != "completed":
                continue
            attempts = store.attempts_of(task.task_id)
            done = [a for a in attempts if a.retry_class == "none"]
            if len(done) != 1 or attempts[-1].attempt_id != done[0].attempt_id:
                problems.append(f"task {task.task_id}: attempts after the one that completed it")
        return problems

    def _follow_ups_once(self, conn: Any) -> list[str]:
        problems = [
            f"outbox {r[0]} still {r[1]}"
            for r in conn.execute("SELECT idempotency_key, status FROM outbox WHERE kind = 'follow_up_task'")
            if r[1] not in ("applied", "refused")
        ]
        keys = Counter(
            json.loads(r[0]).get("outbox_key")
            for r in conn.execute("SELECT payload FROM events WHERE type = 'task_enqueued'")
            if "outbox_key" in r[0]
        )
        return problems + [f"{key} made {n} tasks" for key, n in keys.items() if n != 1]

    def _no_secrets(self) -> list[str]:
        secrets = (SECRET, SENSOR_SECRET, HOOK_SECRET, GATEWAY_KEY)
        needles = [s.encode() for secret in secrets for s in (secret, json.dumps(secret)[1:-1], repr(secret)[1:-1])]
        places = [
            str(path)
            for root in (self.config.paths.state_dir, self.config.paths.runs)
            for path in root.rglob("*")
            if path.is_file() and any(n in path.read_bytes() for n in needles)
        ]
        logs = self.dispatch.log_text() + self.sensors.log_text() + (self.web.log_text() if self.web else "")
        return places + ["service logs"] * any(n.decode() in logs for n in needles)

    def _evidence(self, store: Any) -> list[str]:
        from agentd.evidence.verify import verify

        return [str(f) for f in verify(store, self.config.paths.state_dir).findings]

    def _read_model(self, store: Any, tasks: list[Any]) -> list[str]:
        from agentd.outlook.readmodel import task_statuses

        rebuilt = task_statuses(store.read_events(limit=10_000_000))
        return [
            f"task {t.task_id}: {t.status} in the database, {rebuilt.get(t.task_id)} from its events"
            for t in tasks
            if rebuilt.get(t.task_id) != t.status
        ]

    def _clean_exits(self) -> list[str]:
        problems = []
        for service in (self.dispatch, self.sensors, *([self.web] if self.web else [])):
            for code, by in service.exits:
                expected = {"harness SIGKILL": -signal.SIGKILL, "harness SIGTERM": 0}.get(by)
                if code != expected:
                    problems.append(f"{service.name} exited {code} ({by}); see {service.logs}")
        return problems

    def _no_escapees(self) -> list[str]:
        alive = []
        for pid_file in self.workspace.glob("daemon-*.pid"):
            pid = int(pid_file.read_text() or 0)
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                alive.append(f"daemon {pid} ({pid_file.name})")
        return alive

    def _operator_held(self, store: Store, tasks: list[Any]) -> list[str]:
        """Every try of every hostile attempt failed, and nothing it tried to do is in the database."""
        if self.agent is None:
            return []
        problems = []
        for name in self.hostile_reports:
            report = self.workspace / name
            if not report.exists():
                if self._ran_to_its_end(store, tasks, name):  # else every attempt of it was killed mid-way
                    problems.append(f"{name}: its attempt ran to its end but never reported")
                continue
            tries = json.loads(report.read_text())
            problems += [f"{name}: {t['name']} succeeded ({t['detail'][:80]})" for t in tries if t["succeeded"]]
        problems += self._sensor_held()
        held = store.get_task_or_raise(self.held_task) if self.held_task else None
        if held is not None and not held.awaiting_approval:
            problems.append(f"task {held.task_id} was let go without an operator")
        problems += [f"task {t.task_id} claims to be from operator:x" for t in tasks if t.source == "operator:x"]
        kinds = {e.type for e in store.read_events(limit=10_000_000)}
        problems += [f"a {kind} event" for kind in ("dispatch_paused", "dispatch_resumed") if kind in kinds]
        return problems

    def _sensor_held(self) -> list[str]:
        """Every try of the hostile sensor failed, and it tried at least one running attempt."""
        assert self.agent is not None
        log = self.agent.sensor_home / "reach" / "hostile-sensor-tries.jsonl"
        tries = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        problems = [f"the hostile sensor: {t['name']} succeeded ({t['detail'][:80]})" for t in tries if t["succeeded"]]
        self.poisoned["a sensor reaching for attempts"] = sum(t["name"] == "forge its result" for t in tries)
        if not self.poisoned["a sensor reaching for attempts"]:
            problems.append("the hostile sensor never had a running attempt to try")
        return problems

    @staticmethod
    def _ran_to_its_end(store: Store, tasks: list[Any], report: str) -> bool:
        """Whether the hostile task writing `report` had an attempt whose process exited by itself."""
        mine = [t for t in tasks if t.task_type == "hostile" and t.payload.get("report") == report]
        return any(a.termination_reason == "exited" for t in mine for a in store.attempts_of(t.task_id))

    def _workflows(self, conn: Any) -> list[str]:
        problems = []
        for workflow_id, state, iteration in conn.execute(
            "SELECT id, current_state, iteration FROM workflows WHERE status = 'active'"
        ):
            step = conn.execute(
                "SELECT status FROM tasks WHERE workflow_id = ? AND workflow_state = ? AND workflow_iteration = ?",
                (workflow_id, state, iteration),
            ).fetchone()
            if step is None or step[0] in TERMINAL_STATUSES:
                problems.append(f"workflow {workflow_id} is active at {state}#{iteration} with no open step task")
        return problems


def run_chaos(
    directory: Path,
    *,
    kills: int,
    seed: int,
    deadline_s: float,
    pace_s: tuple[float, float] = (0.3, 1.8),
    task_s: tuple[float, float] = TASK_S,
) -> Report:
    """`pace_s`: seconds between kills; `task_s`: how long each scripted task works. Where real users can
    be made (root), the agent runs behind its boundary and hostile attempts try to cross it."""
    if privsep.missing() is not None:
        if os.environ.get("AGENTD_REQUIRE_PRIVSEP"):
            raise RuntimeError(f"AGENTD_REQUIRE_PRIVSEP is set but {privsep.missing()}")
        return Chaos(directory, seed, task_s).run(kills, deadline_s, pace_s)
    with privsep.priv_agent() as agent:
        return Chaos(directory, seed, task_s, agent).run(kills, deadline_s, pace_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=60)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--deadline", type=float, default=540.0, help="seconds for the killing phase")
    parser.add_argument("--keep", metavar="DIR", help="run in DIR and keep it (default: a temp dir, removed)")
    args = parser.parse_args()
    if args.keep:
        directory = Path(args.keep)
        directory.mkdir(parents=True, exist_ok=False)
        report = run_chaos(directory, kills=args.kills, seed=args.seed, deadline_s=args.deadline)
    else:
        with tempfile.TemporaryDirectory(prefix="agentd-chaos-") as tmp:
            report = run_chaos(Path(tmp), kills=args.kills, seed=args.seed, deadline_s=args.deadline)
    print(f"seed {args.seed}")
    print(report.table())
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
