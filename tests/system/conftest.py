"""Fixtures of the system test (`make test-system`; docs/testing.md, "The system test"): the cached root
file system and agentd's wheelhouse, made the way docs/install-and-deploy.md says."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import machine
import operator_docs
import pytest
from support import REPO, missing

STANDIN = Path(__file__).with_name("standin.py")


@pytest.fixture(scope="session")
def bootable() -> None:
    """Skips (by name) where no machine can boot, unless AGENTD_REQUIRE_SYSTEM=1 (CI) makes it a failure."""
    if reason := machine.missing():
        missing("SYSTEM", reason)


@pytest.fixture(scope="session")
def tarball(bootable: None) -> Path:
    return machine.root_tarball()


def wheelhouse_of(checkout: Path, into: Path) -> Path:
    """Run the docs' `build` block in a folder where ./agentd is `checkout`; python3 is this test's own
    interpreter (the host's may have no pip). Returns the wheelhouse it made."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    (into / "agentd").symlink_to(checkout)
    for command in operator_docs.commands("build"):
        argv = command.split()
        if argv[0] == "python3":
            argv[0] = sys.executable
        subprocess.run(argv, cwd=into, check=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return into / "wheelhouse"


@pytest.fixture(scope="session")
def wheelhouse(bootable: None) -> Iterator[Path]:
    """This checkout's wheel and its dependencies' (removed after the session)."""
    folder = machine.CACHE / f"build-new-{os.getpid()}"
    yield wheelhouse_of(REPO, folder)
    shutil.rmtree(folder, ignore_errors=True)


def boot_with(name: str, tarball: Path, wheelhouse: Path, request: pytest.FixtureRequest) -> Iterator[machine.Machine]:
    """A machine unpacked fresh, with the wheelhouse in /root (copied there as an operator copies it),
    the stand-in adapters and agentd's alert rules, booted. Its files are kept after a failure when
    AGENTD_SYSTEM_KEEP=1 (under .cache/system/, for a look)."""
    vm = machine.Machine.unpacked(name, tarball)
    shutil.copytree(wheelhouse, vm.root / "root" / "wheelhouse")
    standins = vm.root / "usr/local/lib/agentd-standin"
    standins.mkdir(parents=True)
    for adapter in ("claude", "hold"):
        shutil.copy(STANDIN, standins / adapter)
        (standins / adapter).chmod(0o755)
    rules = vm.root / "etc/prometheus/rules"
    rules.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "monitoring" / "agentd.rules.yml", rules / "agentd.rules.yml")
    failed_before = request.session.testsfailed
    keep = os.environ.get("AGENTD_SYSTEM_KEEP", "") not in ("", "0")
    try:
        vm.boot()
        yield vm
    finally:
        vm.close(keep=keep and request.session.testsfailed > failed_before)
