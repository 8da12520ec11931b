"""What an install tells its operator is true (issue 40, finding 5): the written TOML names the units to
restart as install lays them out, every unit's Documentation= is a page this install has, and the way
docs/install-and-deploy.md gives to verify a staging tree's units passes."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest
from test_docs import code_blocks
from test_install import analyzer

from agentd.cli import main
from agentd.install import UNITS


@pytest.fixture
def staged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    root = tmp_path / "stage"
    assert main(["install", "--root", str(root), "--agent", "arc"]) == 0
    capsys.readouterr()
    return root


def test_the_written_toml_says_to_restart_every_service_install_lays_out(staged: Path) -> None:
    header = [line for line in (staged / "etc/agentd/arc.toml").read_text().splitlines() if line.startswith("#")]
    services = [unit.replace("@.service", "@arc") for unit in UNITS]
    said = next((line for line in header if "systemctl restart" in line), "")
    assert said.split("systemctl restart", 1)[1].strip(" `.").split() == services, header
    assert not re.search(r"\b(two|three|both) units\b", "\n".join(header))


def test_every_units_documentation_is_a_page_this_install_has(staged: Path) -> None:
    """Not a web address found nowhere else: the page of the docs shipped with this agentd."""
    units = sorted((staged / "etc/systemd/system").glob("agentd-*"))
    assert len(units) >= len(UNITS) + 1
    for unit in units:
        links = re.findall(r"^Documentation=(.+)$", unit.read_text(), re.MULTILINE)
        assert links, unit.name
        for link in " ".join(links).split():
            parsed = urlparse(link)
            assert parsed.scheme == "file" and Path(parsed.path).is_file(), (unit.name, link)
            assert Path(parsed.path).suffix == ".md" and Path(parsed.path).parent.name == "docs"


@pytest.mark.process
def test_the_docs_way_to_verify_a_staging_trees_units_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """systemd-analyze verify --root fails on any staging tree (it has none of systemd's own units): the
    page says to verify the files by path, with an agentd that exists on the machine that checks them."""
    [(lang, block)] = code_blocks("Check a staging tree")
    lines = [line.split("  #")[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert lang == "sh" and len(lines) == 2 and "--root" not in lines[1]
    stage = tmp_path / "stage"
    agentd_bin = "/usr/bin/env"  # an executable every machine has, outside what the units hide
    install = shlex.split(lines[0].replace("/srv/stage", str(stage)).replace("/opt/agentd/bin/agentd", agentd_bin))
    assert install[:2] == ["agentd", "install"]
    assert main(install[1:]) == 0
    capsys.readouterr()
    verify = lines[1].replace("/srv/stage", str(stage)).replace("systemd-analyze", analyzer(), 1)
    done = subprocess.run(["bash", "-c", verify], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr
