"""An operator's whole life with agentd on a Debian 12 machine booted with systemd as PID 1, installed from
its wheel as docs/install-and-deploy.md says (docs/testing.md, "The system test"). The tests run in
order, each a step of that life on the one machine; a step that fails says what the operator would have
seen. The units' hardening is judged here: a setting that breaks a path of the product under real
systemd fails a step."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import operator_docs
import pytest
import yaml
from conftest import boot_with
from machine import Machine, Ran

pytestmark = [pytest.mark.system, pytest.mark.timeout(900)]

AGENT = "arc"
SERVICES = ("dispatch", "sensors", "web")
# The example's tool policy out of the installed TOML (its tables, to the next other table): the claude
# stand-in runs no hook, and under a policy an attempt whose calls go undecided ends as a violation (docs/policy.md,
# "Every call accounted for"); the real claude under a policy is the harness tier's (tests/test_policy_harness.py).
WITHOUT_POLICY = r"""
import re, sys
path = sys.argv[1]
kept, inside = [], False
for line in open(path).read().splitlines(keepends=True):
    if re.match(r"\s*\[", line):
        inside = re.match(r"\s*\[\[?policy[\].]", line) is not None
    if not inside:
        kept.append(line)
open(path, "w").write("".join(kept))
"""
STANDIN_TOML = """
# The system test's adapters (tests/system/standin.py): a claude stand-in and a script that waits.
[[adapters]]
adapter_id = "claude"
kind = "claude-code"
command = "/usr/local/lib/agentd-standin/claude"
timeout_ms = 120000

[[adapters]]
adapter_id = "hold"
kind = "script"
command = "/usr/local/lib/agentd-standin/hold"
timeout_ms = 900000

[[task_types]]
task_type = "harness"
payload_schema_id = "agent-runtime/payload.any-object/v1"
default_profile_id = "operator"
default_adapter_id = "claude"

[[task_types]]
task_type = "held"
payload_schema_id = "agent-runtime/payload.any-object/v1"
default_profile_id = "operator"
default_adapter_id = "hold"
"""
# Prometheus reads agentd's rules; this test's own global settings make it scrape and judge every second.
PROMETHEUS_GLOBAL = {"scrape_interval": "1s", "evaluation_interval": "1s"}


@dataclass
class Life:
    """What the steps learn and later steps need."""

    printed_enable: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    token: str = ""
    tasks: dict[str, int] = field(default_factory=dict)
    sensors_stopped_at: float = 0.0
    alert_for_s: float = 0.0
    broken: str = ""


LIFE = Life()
# The steps every later one stands on: once one of these fails, the rest fail at once, naming it.
FOUNDATION = ("test_install_as_the_docs_say", "test_start_as_the_docs_say")


@pytest.fixture(autouse=True)
def _on_its_foundation(request: pytest.FixtureRequest) -> Iterator[None]:
    if LIFE.broken:
        pytest.fail(f"not tried: {LIFE.broken} failed before it")
    failed_before = request.session.testsfailed
    yield
    if request.node.name in FOUNDATION and request.session.testsfailed > failed_before:
        LIFE.broken = request.node.name


@pytest.fixture(scope="module")
def vm(tarball: Path, wheelhouse: Path, request: pytest.FixtureRequest) -> Iterator[Machine]:
    yield from boot_with("agentd-deployed", tarball, wheelhouse, request)


def agentd(vm: Machine, args: str, *, check: bool = True) -> Ran:
    """An operator command as the docs give it: as the services' user, through sudo."""
    return vm.run(f"sudo -u agentd-{AGENT} agentd --agent {AGENT} {args}", check=check)


def add_task(vm: Machine, args: str) -> int:
    added = agentd(vm, f"task add {args} --json").json()
    assert isinstance(added, dict)
    return int(added["task_id"])


def task(vm: Machine, task_id: int) -> dict[str, Any]:
    shown = agentd(vm, f"task show {task_id} --json").json()
    assert isinstance(shown, dict)
    return shown


def wait_task(vm: Machine, task_id: int, status: str, timeout: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = task(vm, task_id)
        if shown["task"]["status"] == status:
            return shown
        time.sleep(0.5)
    raise AssertionError(
        f"task {task_id} is {shown['task']['status']}, not {status}, after {timeout:.0f}s: "
        f"{json.dumps(shown['attempts'][-1:])[:1500]}\n{vm.journal(f'agentd-dispatch@{AGENT}')}"
    )


def services(vm: Machine, args: str = "") -> dict[str, dict[str, Any]]:
    status = agentd(vm, f"status --json {args}").json()
    assert isinstance(status, dict)
    return {row["service"]: row for row in status["services"]}


def main_pid(vm: Machine, service: str) -> int:
    pid = int(vm.run(f"systemctl show -p MainPID --value agentd-{service}@{AGENT}").stdout)
    assert pid > 0, f"agentd-{service}@{AGENT} is not running"
    return pid


def run_user_owns(vm: Machine, path: str) -> str:
    return vm.run(f"stat -c %U {path}").stdout.strip()


def metric(vm: Machine, port: int, name: str) -> dict[str, float]:
    """Each sample of `name` on a metrics port, by its labels as written."""
    scraped = vm.run(f"curl -sf http://127.0.0.1:{port}/metrics").stdout
    return {
        match["labels"] or "": float(match["value"])
        for match in re.finditer(rf"^{name}(?P<labels>\{{[^}}]*\}})? (?P<value>\S+)$", scraped, re.M)
    }


def prometheus(vm: Machine, path: str) -> Any:
    return json.loads(vm.run(f"curl -sf http://127.0.0.1:9090/api/v1/{path}").stdout)["data"]


# --- install and start, as the docs say ------------------------------------------------------------------


def test_install_as_the_docs_say(vm: Machine) -> None:
    for command in operator_docs.commands("install"):
        ran = vm.run(command, timeout=300)
    printed = re.search(r"^next: (.+)$", ran.stdout, re.M)
    assert printed, ran.stdout
    LIFE.printed_enable = printed[1]
    toml = vm.run(f"cat /etc/agentd/{AGENT}.toml").stdout
    for service, key in (("dispatch", "dispatch_listen"), ("sensors", "sensors_listen"), ("web", "listen")):
        found = re.search(rf'^{key} = "127\.0\.0\.1:(\d+)"', toml, re.M)
        assert found, f"{key} not in the TOML install wrote"
        LIFE.ports[service] = int(found[1])


def test_start_as_the_docs_say(vm: Machine) -> None:
    """The docs' start block, line by line; the enable line is the one install printed."""
    documented = operator_docs.commands("start")
    enable = [line for line in documented if line.startswith("systemctl enable")]
    assert enable == [LIFE.printed_enable], "the docs' enable line is not the one `agentd install` printed"
    for command in documented:
        if edit := operator_docs.EDIT.match(command):
            vm.run(f"python3 - {edit['path']}", stdin=WITHOUT_POLICY)
            vm.run(f"cat >> {edit['path']}", stdin=STANDIN_TOML)
            continue
        vm.run(operator_docs.as_run(command))


def test_ready_and_status_text(vm: Machine) -> None:
    """Type=notify: `systemctl enable --now` returned once each service said READY; STATUS= says what it does.
    The example heartbeat sensor enqueues a task at start, so the dispatcher may be idle or running it: both
    lines are the ones docs/install-and-deploy.md shows."""
    dispatching = r"^(idle, \d+ claimable|running task \d+ \([^)]+\) \d+[smh])"
    for service, expected in (("dispatch", dispatching), ("sensors", r"^watching \d+ sensors")):
        shown = vm.run(f"systemctl show -p ActiveState,SubState,StatusText agentd-{service}@{AGENT}").stdout
        assert "ActiveState=active" in shown and "SubState=running" in shown, shown
        text = re.search(r"^StatusText=(.*)$", shown, re.M)
        assert text and re.search(expected, text[1]), shown
    assert vm.run(f"systemctl is-active agentd-web@{AGENT}").stdout.strip() == "active"


def test_every_service_reads_live(vm: Machine) -> None:
    """Every view agrees that all three services are live: status as the services' user and as root, both
    metrics ports, and the console's own API (which reads its own boot id under its unit's /proc)."""
    for prefix in ("", "root"):
        rows = services(vm) if not prefix else _root_services(vm)
        assert {name: rows[name]["liveness"] for name in SERVICES} == dict.fromkeys(SERVICES, "live"), rows
    for service in ("dispatch", "sensors"):
        live = metric(vm, LIFE.ports[service], "agentd_service_live")
        assert live == {f'{{service="{name}"}}': 1.0 for name in SERVICES}, (service, live)
    LIFE.token = agentd(vm, "web token add ops --json").json()["token"]  # type: ignore[index]
    api = _api(vm, "status")
    states = {row["service"]: row["liveness"] for row in api["services"]}
    assert states == dict.fromkeys(SERVICES, "live"), api["services"]


def _root_services(vm: Machine) -> dict[str, dict[str, Any]]:
    status = vm.run(f"agentd --agent {AGENT} status --json").json()
    assert isinstance(status, dict)
    return {row["service"]: row for row in status["services"]}


def _api(vm: Machine, path: str, method: str = "GET") -> Any:
    url = f"http://127.0.0.1:{LIFE.ports['web']}/api/{path}"
    return vm.run(f"curl -sf -X {method} -H 'Authorization: Bearer {LIFE.token}' {url}").json()


# --- Prometheus: a real scrape with agentd's rules ----------------------------------------------------------


def test_prometheus_scrapes_every_target_and_nothing_alerts(vm: Machine) -> None:
    """Debian's Prometheus with the docs' scrape job and rule file: both targets up, no alert pending
    or firing while the agent is healthy."""
    monitoring = operator_docs.blocks(operator_docs.MONITORING)
    config = {
        "global": PROMETHEUS_GLOBAL,
        **yaml.safe_load(monitoring["scrape"]),
        **yaml.safe_load(monitoring["rules"]),
    }
    targets = config["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == [f"127.0.0.1:{LIFE.ports['dispatch']}", f"127.0.0.1:{LIFE.ports['sensors']}"], (
        "docs/monitoring.md's scrape targets are not the ports `agentd install` gave the first agent"
    )
    vm.put("/etc/prometheus/prometheus.yml", yaml.safe_dump(config))
    vm.run("promtool check config /etc/prometheus/prometheus.yml")
    vm.run("systemctl restart prometheus")
    vm.wait(
        "curl -sf http://127.0.0.1:9090/api/v1/targets",
        "both agentd targets up",
        60,
        lambda ran: (
            ran.returncode == 0
            and [t["health"] for t in json.loads(ran.stdout)["data"]["activeTargets"]] == ["up", "up"]
        ),
    )
    groups = prometheus(vm, "rules")["groups"]
    LIFE.alert_for_s = next(
        rule["duration"] for group in groups for rule in group["rules"] if rule["name"] == "AgentdServiceDown"
    )
    time.sleep(5)  # five evaluations of every rule
    assert prometheus(vm, "alerts")["alerts"] == []


def test_stopped_unit_alert_pending(vm: Machine) -> None:
    """`systemctl stop` of the sensor service: its target goes down and AgentdServiceDown is pending at
    once; a later step checks that it fires within its `for:`."""
    vm.run(f"systemctl stop agentd-sensors@{AGENT}")
    LIFE.sensors_stopped_at = time.monotonic()
    vm.wait(
        "curl -sf http://127.0.0.1:9090/api/v1/alerts",
        "AgentdServiceDown pending",
        30,
        lambda ran: ran.returncode == 0 and _alerts(ran, "AgentdServiceDown") != [],
    )


def _alerts(ran: Ran, name: str, state: str | None = None) -> list[dict[str, Any]]:
    alerts = json.loads(ran.stdout)["data"]["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] == name and (state is None or a["state"] == state)]


# --- work, as the run user --------------------------------------------------------------------------------


def test_script_task_completes_as_the_run_user(vm: Machine) -> None:
    """The script adapter's attempt starts under the units (its run dir made, HOME and TMPDIR in it),
    runs as the run user and leaves sealed evidence."""
    task_id = add_task(vm, '--type example --subject deployed --payload \'{"write": "deployed.txt"}\'')
    LIFE.tasks["script"] = task_id
    shown = wait_task(vm, task_id, "completed")
    attempt = shown["attempts"][-1]
    assert attempt["termination_reason"] == "exited", attempt
    assert run_user_owns(vm, f"/var/lib/agentd-run/{AGENT}/workspace/deployed.txt") == f"agentd-{AGENT}-run"
    agentd(vm, f"evidence verify --task {task_id}")


def test_harness_task_completes_as_the_run_user(vm: Machine) -> None:
    """A claude-code attempt (the stand-in CLI): its version probe and its harness folders work under the
    units, it runs as the run user, and its tool call is in the sealed trace."""
    task_id = add_task(vm, "--type harness --subject harness --payload '{}'")
    LIFE.tasks["harness"] = task_id
    shown = wait_task(vm, task_id, "completed")
    assert "uid" in vm.run(f"cat /var/lib/agentd-run/{AGENT}/workspace/standin-{task_id}.txt").stdout
    assert run_user_owns(vm, f"/var/lib/agentd-run/{AGENT}/workspace/standin-{task_id}.txt") == f"agentd-{AGENT}-run"
    assert shown["attempts"][-1]["adapter_kind"] == "claude-code"
    network = vm.run(f"cat /var/lib/agentd-run/{AGENT}/workspace/network-{task_id}.txt").stdout
    assert "host-metrics 9478 refused" in network, network  # a network of its own, under the shipped units
    assert "gateway 4100 connected" in network and "proxy 4101 connected" in network, network
    assert shown["attempts"][-1]["diagnostics"]["network"].startswith("its own"), shown["attempts"][-1]["diagnostics"]
    agentd(vm, f"evidence verify --task {task_id}")


def test_held_task_approved_by_a_person_through_sudo(vm: Machine) -> None:
    vm.run("useradd -m -s /bin/bash alice")
    vm.put("/etc/sudoers.d/alice", f"alice ALL=(agentd-{AGENT}) NOPASSWD: /usr/local/bin/agentd\n", 0o440)
    task_id = add_task(vm, "--type example --subject approve-me --payload '{}' --require-approval")
    LIFE.tasks["approved"] = task_id
    assert task(vm, task_id)["task"]["awaiting_approval"] is True
    vm.run(f"su - alice -c 'sudo -u agentd-{AGENT} /usr/local/bin/agentd --agent {AGENT} approve {task_id}'")
    shown = wait_task(vm, task_id, "completed")
    resolved = [e for e in shown["events"] if e["type"] == "approval_resolved"]
    assert resolved and "alice" in json.dumps(resolved[0]), resolved


# --- crashes, stops and the watchdog ---------------------------------------------------------------------


def _start_held(vm: Machine, name: str) -> int:
    task_id = add_task(vm, f'--type held --subject {name} --payload \'{{"hold": "release-{name}"}}\'')
    LIFE.tasks[name] = task_id
    vm.wait(f"pgrep -u agentd-{AGENT}-run -f agentd-standin/hold", f"task {task_id}'s attempt running", 60)
    return task_id


def _release(vm: Machine, name: str) -> None:
    vm.run(f"install -m 0644 /dev/null /var/lib/agentd-run/{AGENT}/workspace/release-{name}")


def test_kill_9_mid_attempt_then_restart_and_boot_sweep(vm: Machine) -> None:
    task_id = _start_held(vm, "killed")
    before = main_pid(vm, "dispatch")
    vm.run(f"kill -9 {before}")
    # Restart=on-failure after RestartSec=15s; the boot sweep reclaims the attempt, and the task runs again.
    vm.wait(
        f"systemctl show -p MainPID --value agentd-dispatch@{AGENT}",
        "the dispatcher restarted",
        60,
        lambda ran: ran.stdout.strip() not in ("", "0", str(before)),
    )
    _release(vm, "killed")
    shown = wait_task(vm, task_id, "completed")
    first = shown["attempts"][0]
    assert first["termination_reason"] == "boot_sweep", first
    assert shown["task"]["free_attempt_count"] >= 1, shown["task"]
    assert any(e["type"] == "boot_sweep_reclaimed" for e in shown["events"]), [e["type"] for e in shown["events"]]


def test_stop_with_an_attempt_in_flight_is_graceful(vm: Machine) -> None:
    """`systemctl stop` gives the running attempt [dispatch] grace_s: it still runs after the stop began
    (systemd signals only the dispatcher, KillMode=mixed), and finishes completed when it is released."""
    task_id = _start_held(vm, "stopped")
    vm.run(f"systemctl stop --no-block agentd-dispatch@{AGENT}")
    vm.wait(
        f"systemctl is-active agentd-dispatch@{AGENT}", "the stop to begin", 10, lambda r: "deactivating" in r.stdout
    )
    time.sleep(3)
    still = vm.run(f"pgrep -u agentd-{AGENT}-run -f agentd-standin/hold", check=False)
    assert still.returncode == 0, "the stop killed the attempt at once: it had no grace (KillMode= must be mixed)"
    _release(vm, "stopped")
    vm.wait(
        f"systemctl is-active agentd-dispatch@{AGENT}",
        "the dispatcher to stop",
        60,
        lambda r: r.stdout.strip() == "inactive",
    )
    shown = task(vm, task_id)
    assert shown["task"]["status"] == "completed", shown["attempts"]
    assert shown["attempts"][-1]["termination_reason"] == "exited", shown["attempts"]
    vm.run(f"systemctl start agentd-dispatch@{AGENT}")


def test_a_wedged_dispatcher_is_restarted_by_the_watchdog(vm: Machine) -> None:
    before = main_pid(vm, "dispatch")
    vm.run(f"kill -STOP {before}")
    vm.wait(
        f"systemctl show -p MainPID --value agentd-dispatch@{AGENT}",
        "the watchdog to restart the stopped dispatcher (WatchdogSec=60s, then RestartSec=15s)",
        120,
        lambda ran: ran.stdout.strip() not in ("", "0", str(before)),
    )
    assert "Watchdog timeout" in vm.journal(f"agentd-dispatch@{AGENT}", lines=400)
    vm.wait(
        f"systemctl is-active agentd-dispatch@{AGENT}",
        "the new dispatcher READY",
        60,
        lambda r: r.stdout.strip() == "active",
    )


def test_stopped_unit_alert_fires_within_its_for(vm: Machine) -> None:
    deadline = LIFE.sensors_stopped_at + LIFE.alert_for_s + 30
    vm.wait(
        "curl -sf http://127.0.0.1:9090/api/v1/alerts",
        f"AgentdServiceDown firing within {LIFE.alert_for_s:.0f}s (+30s) of the stop",
        max(deadline - time.monotonic(), 1),
        lambda ran: ran.returncode == 0 and _alerts(ran, "AgentdServiceDown", "firing") != [],
    )
    vm.run(f"systemctl start agentd-sensors@{AGENT}.socket agentd-sensors@{AGENT}")


def documented_exposure() -> dict[str, float]:
    """What docs/install-and-deploy.md ("The units") says `systemd-analyze security` rates each unit."""
    text = " ".join(operator_docs.DEPLOY.read_text(encoding="utf-8").split())
    said = re.search(r"rates the dispatcher unit (\d\.\d), the sensor unit (\d\.\d) and the console's (\d\.\d)", text)
    assert said, "docs/install-and-deploy.md no longer states the units' exposure"
    return dict(zip(SERVICES, map(float, said.groups()), strict=True))


def test_security_exposure_no_worse_than_the_docs_say(vm: Machine) -> None:
    """On the running units, as systemd itself judges them."""
    levels = {}
    for service in SERVICES:
        said = vm.run(f"systemd-analyze security --no-pager agentd-{service}@{AGENT}.service", check=False).stdout
        level = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", said)
        assert level, said[-500:]
        levels[service] = float(level[1])
    documented = documented_exposure()
    assert all(levels[s] <= documented[s] for s in SERVICES), f"measured {levels}, the docs say {documented}"


# --- reboot, then leave -----------------------------------------------------------------------------------


def test_reboot_comes_back_with_nothing_lost(vm: Machine) -> None:
    before = agentd(vm, "task list --json --limit 1000").json()
    vm.reboot()
    vm.wait(
        f"sudo -u agentd-{AGENT} agentd --agent {AGENT} status --json",
        "every service live after the reboot",
        120,
        lambda ran: (
            ran.returncode == 0
            and {row["service"]: row["liveness"] for row in json.loads(ran.stdout)["services"]}
            == dict.fromkeys(SERVICES, "live")
        ),
    )
    after = agentd(vm, "task list --json --limit 1000").json()
    assert [(t["task_id"], t["status"]) for t in after] == [(t["task_id"], t["status"]) for t in before]  # type: ignore[index,union-attr]
    agentd(vm, "evidence verify")
    task_id = add_task(vm, "--type example --subject after-reboot --payload '{}'")
    wait_task(vm, task_id, "completed")


def test_uninstall_and_purge_as_the_docs_say(vm: Machine) -> None:
    for command in operator_docs.commands("uninstall"):
        vm.run(command)
    assert vm.run(f"systemctl list-units --all --no-legend 'agentd-*@{AGENT}*'").stdout.strip() == ""
    for path in (f"/etc/agentd/{AGENT}.toml", f"/var/lib/agentd/{AGENT}", f"/var/lib/agentd-run/{AGENT}"):
        assert vm.run(f"test -e {path}", check=False).returncode != 0, f"{path} is still there"
    assert vm.run(f"id agentd-{AGENT}", check=False).returncode != 0
