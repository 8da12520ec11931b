"""Backup and restore under a real systemd (docs/backup-and-archive.md; docs/testing.md, "The system test"): on a
Debian 12 machine with agentd installed from its wheel as docs/install-and-deploy.md says, the shipped
agentd-backup@NAME.timer fires and `agentd backup --if-due` backs up into [backup] dest under the unit's hardening;
then the state dir is wiped and `agentd restore` puts the agent back, its evidence clean and its services running."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import operator_docs
import pytest
from conftest import boot_with
from machine import Machine
from test_deployed import AGENT, STANDIN_TOML, WITHOUT_POLICY, add_task, agentd, services, wait_task

pytestmark = [pytest.mark.system, pytest.mark.timeout(900)]

DEST = f"/var/lib/agentd-backup/{AGENT}"
STATE = f"/var/lib/agentd/{AGENT}"
SCHEDULE = f'\n[backup]\ndest = "{DEST}"\nevery = "6h"\n'
# The shipped timer first fires 5 minutes after boot; this drop-in makes it fire 5 s after it is started.
SOON = "[Timer]\nOnActiveSec=5s\n"
UNITS = f"agentd-dispatch@{AGENT} agentd-sensors@{AGENT} agentd-web@{AGENT}"


@pytest.fixture(scope="module")
def vm(tarball: Path, wheelhouse: Path, request: pytest.FixtureRequest) -> Iterator[Machine]:
    yield from boot_with("agentd-backup", tarball, wheelhouse, request)


def install_and_start(vm: Machine) -> None:
    for command in operator_docs.commands("install"):
        vm.run(command, timeout=300)
    for command in operator_docs.commands("start"):
        if edit := operator_docs.EDIT.match(command):
            vm.run(f"python3 - {edit['path']}", stdin=WITHOUT_POLICY)
            vm.run(f"cat >> {edit['path']}", stdin=STANDIN_TOML + SCHEDULE)
            continue
        vm.run(operator_docs.as_run(command))


def test_the_backup_timer_fires_and_a_wiped_state_dir_is_restored(vm: Machine) -> None:
    install_and_start(vm)
    task_id = add_task(vm, "--type example --subject before-the-backup")
    wait_task(vm, task_id, "completed")

    vm.run(f"mkdir -p /etc/systemd/system/agentd-backup@{AGENT}.timer.d")
    vm.put(f"/etc/systemd/system/agentd-backup@{AGENT}.timer.d/soon.conf", SOON)
    vm.run("systemctl daemon-reload")
    vm.run(f"systemctl enable --now agentd-backup@{AGENT}.timer")
    vm.wait(f"ls {DEST}/backup-*.json", "the timer's backup published", 180)
    shown = agentd(vm, "status --json").json()
    assert isinstance(shown, dict) and shown["backup"]["dest"] == DEST and not shown["backup"]["overdue"], shown
    again = vm.run(f"systemctl start agentd-backup@{AGENT}.service && journalctl -u agentd-backup@{AGENT} --no-pager")
    assert "not due" in again.stdout, again.stdout  # the schedule is the TOML's: 6 h

    vm.run(f"systemctl stop {UNITS}")
    vm.run(f"find {STATE} -mindepth 1 -delete")  # the disk is lost
    restored = agentd(vm, f"restore {DEST} --json").json()
    assert isinstance(restored, dict) and restored["verify"]["ok"], restored
    vm.run(f"systemctl start {UNITS}")
    vm.wait(
        f"sudo -u agentd-{AGENT} agentd --agent {AGENT} status --json",
        "the restored agent's services live",
        120,
        accept=lambda ran: (
            ran.returncode == 0
            and all(row["liveness"] == "live" for row in json.loads(ran.stdout)["services"] if row["service"] != "web")
        ),
    )
    assert wait_task(vm, task_id, "completed")["task"]["subject"] == "before-the-backup"
    after = add_task(vm, "--type example --subject after-the-restore")
    wait_task(vm, after, "completed")
    agentd(vm, "evidence verify")
    assert set(services(vm)) >= {"dispatch", "sensors"}
