"""The operator's commands as docs/install-and-deploy.md gives them: each block the system test runs is
marked `<!-- make test-system runs this: NAME -->` before its fence, and this reads it (docs/testing.md,
"The system test"). The test runs these lines, so the page and the test cannot drift apart;
tests/test_docs.py checks that every marked block is here and every line of one is understood."""

from __future__ import annotations

import re
from pathlib import Path

from support import REPO

DEPLOY = REPO / "docs" / "install-and-deploy.md"
MONITORING = REPO / "docs" / "monitoring.md"
MARK = re.compile(r"<!-- make test-system runs this: (?P<name>[a-z-]+) -->\n```(?:sh|yaml)\n(?P<body>.*?)```", re.S)
# The blocks the system test runs, where, and the lines it cannot run as they are written (with what it
# runs instead). Every other line is run word for word.
BLOCKS = {
    "build": "the host, in a folder where ./agentd is the checkout (python3: the test's own)",
    "install": "the machine, as root, in /root beside the wheelhouse",
    "start": "the machine, as root",
    "upgrade": "the machine, as root, in /root beside the new wheelhouse",
    "uninstall": "the machine, as root",
    "scrape": "Prometheus in the machine (docs/monitoring.md)",
    "rules": "Prometheus in the machine (docs/monitoring.md)",
}
EDIT = re.compile(r"^\$EDITOR (?P<path>\S+)$")  # the test makes its edit instead
FOLLOW = re.compile(r"^(?P<command>journalctl .*) -f$")  # run once, without following


def blocks(page: Path) -> dict[str, str]:
    """Each marked block of a page, by name, as written."""
    found: dict[str, str] = {}
    for match in MARK.finditer(page.read_text(encoding="utf-8")):
        if match["name"] in found:
            raise AssertionError(f"{page}: two blocks are marked {match['name']!r}")
        found[match["name"]] = match["body"]
    return found


def commands(name: str) -> list[str]:
    """The shell lines of block `name` of docs/install-and-deploy.md: continuations joined, a comment that
    follows a command (two spaces, then #) and comment lines dropped."""
    body = blocks(DEPLOY).get(name)
    if body is None:
        raise AssertionError(f"{DEPLOY}: no block is marked {name!r} (`<!-- make test-system runs this: {name} -->`)")
    lines: list[str] = []
    for line in body.replace("\\\n", " ").splitlines():
        command = re.split(r"\s{2,}#", line, maxsplit=1)[0].strip()
        if command and not command.startswith("#"):
            lines.append(re.sub(r"\s+", " ", command))
    return lines


def as_run(command: str) -> str:
    """What the test runs for a documented line: the line itself, `journalctl … -f` once without
    following; an `$EDITOR` line is the test's own edit and runs nothing here (None is never returned:
    the caller asks `EDIT` first)."""
    if follow := FOLLOW.match(command):
        return follow["command"] + " --no-pager"
    return command
