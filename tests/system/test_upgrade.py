"""An upgrade as docs/install-and-deploy.md says ("Upgrade"), on a machine of its own: install the wheel
of an earlier version, give it work, install this checkout's wheel, and find everything as it was, the
database migrated and the waiting work done (docs/testing.md, "The system test").

The earlier version is AGENTD_UPGRADE_FROM (a commit of this repository), by default the last one
before this release's changes: bump UPGRADE_FROM when a release is cut."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import machine
import operator_docs
import pytest
from conftest import boot_with, wheelhouse_of
from machine import Machine
from support import REPO, missing
from test_deployed import AGENT, STANDIN_TOML, add_task, agentd, task, wait_task

pytestmark = [pytest.mark.system, pytest.mark.timeout(900)]

UPGRADE_FROM = "636db27eef1d0afc81b7ff6362eef80e52be5c13"  # main when wave four began


@pytest.fixture(scope="module")
def old_wheelhouse(bootable: None) -> Iterator[Path]:
    """The earlier version's wheelhouse, made by the docs' build block from `git archive` of its commit."""
    commit = os.environ.get("AGENTD_UPGRADE_FROM", UPGRADE_FROM)
    known = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
    if known.returncode != 0:
        missing("SYSTEM", f"commit {commit} (the version upgraded from) is not in this clone's history")
    source = machine.CACHE / f"source-{commit[:12]}"
    if not (source / "pyproject.toml").exists():
        shutil.rmtree(source, ignore_errors=True)
        source.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    folder = machine.CACHE / f"build-old-{os.getpid()}"
    yield wheelhouse_of(source, folder)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def vm(tarball: Path, old_wheelhouse: Path, wheelhouse: Path, request: pytest.FixtureRequest) -> Iterator[Machine]:
    for booted in boot_with("agentd-upgrade", tarball, old_wheelhouse, request):
        shutil.copytree(wheelhouse, booted.root / "root/new/wheelhouse")
        yield booted


def schema_version(vm: Machine) -> int:
    status = agentd(vm, "status --json").json()
    assert isinstance(status, dict)
    return int(status["schema_version"])


def test_upgrade_keeps_everything_and_migrates(vm: Machine) -> None:
    for command in operator_docs.commands("install"):
        installed = vm.run(command, timeout=300)
    vm.run(f"cat >> /etc/agentd/{AGENT}.toml", stdin=STANDIN_TOML)
    enable = next(line for line in installed.stdout.splitlines() if line.startswith("next: "))
    vm.run(enable.removeprefix("next: "))
    # Work the earlier version holds: a task held for approval, one due later, one claimable now (which it
    # may run, or fail to), and an operator's console token.
    held = add_task(vm, "--type example --subject held --payload '{}' --require-approval")
    later = add_task(vm, "--type example --subject later --payload '{}' --delay 45s")
    now = add_task(vm, "--type example --subject now --payload '{}'")
    token = agentd(vm, "web token add ops --json").json()["token"]  # type: ignore[index]
    before = agentd(vm, "task list --json --limit 1000").json()
    old_schema = schema_version(vm)

    upgraded = [vm.run(command, timeout=300, cwd="/root/new") for command in operator_docs.commands("upgrade")]
    said = "".join(ran.stdout + ran.stderr for ran in upgraded)  # install's warnings go to stderr
    if vm.run(f"id -gn agentd-{AGENT}-run").stdout.strip() != f"agentd-{AGENT}-run":  # made by an older install
        assert f"usermod -g agentd-{AGENT}-run agentd-{AGENT}-run" in said, said  # install says what to run

    newest = max(int(path.name.split("_", 1)[0]) for path in (REPO / "migrations").glob("[0-9]*.sql"))
    assert schema_version(vm) == newest >= old_schema
    after = agentd(vm, "task list --json --limit 1000").json()
    assert [t["task_id"] for t in after] == [t["task_id"] for t in before]  # type: ignore[union-attr,index]
    assert task(vm, held)["task"]["awaiting_approval"] is True
    agentd(vm, f"approve {held}")
    for task_id in (held, later, now):
        wait_task(vm, task_id, "completed", timeout=120)
    toml = vm.run(f"cat /etc/agentd/{AGENT}.toml").stdout
    port = next(line.split(":")[-1].strip('"') for line in toml.splitlines() if line.startswith("listen = "))
    status = vm.run(f"curl -sf -H 'Authorization: Bearer {token}' http://127.0.0.1:{port}/api/status").stdout
    assert json.loads(status)["agent_id"] == AGENT, "the console token issued before the upgrade works after it"
    agentd(vm, "evidence verify")
