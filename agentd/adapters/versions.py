"""Which version of a harness CLI an attempt ran: asked once per command, kept for the process.

`--version` runs with a scratch HOME (the CLIs write dotfiles even for that). Hermes's own
`--version` checks for updates over the network, so its version is read from the package
metadata of the Python its `hermes` script runs with.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from agentd.process.files import make_run_dir
from agentd.process.privilege import RunUser
from agentd.process.runner import ProcessSpec, run_process

_CACHE: dict[str, str | None] = {}
VERSION_TIMEOUT_S = 20.0


def cached_version(command: str) -> str | None:
    return _CACHE.get(command)


async def cli_version(
    kind: str, command: str, scratch_home: Path, path_env: str, user: RunUser | None = None
) -> str | None:
    """The CLI's version line, asked once per command (None if it cannot say), as the user attempts
    run as: it is their CLI."""
    if command in _CACHE:
        return _CACHE[command]
    argv = _hermes_version_argv(command) if kind == "hermes-agent" else [command, "--version"]
    version: str | None = None
    if argv is not None:
        home = scratch_home / "version-probe"
        make_run_dir(home, user)
        env = {
            "PATH": path_env,
            "HOME": str(home),
            "CODEX_HOME": str(home / "codex"),
            "HERMES_HOME": str(home / "hermes"),
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
        }
        make_run_dir(home / "codex", user)
        output, errors = home.with_name("version-probe.stdout"), home.with_name("version-probe.stderr")
        result = await run_process(  # its output is written by agentd, from the probe's pipes
            ProcessSpec(argv, home, env, output, errors, VERSION_TIMEOUT_S, kill_grace_s=1.0, user=user)
        )
        if result.ok:
            lines = output.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            version = lines[0][:200] if lines else None
    _CACHE[command] = version
    return version


def _hermes_version_argv(command: str) -> list[str] | None:
    """`python -c` on the interpreter in the hermes script's shebang, reading its package version."""
    path = Path(command) if os.sep in command else _which(command)
    if path is None or not path.is_file():
        return None
    first = path.read_bytes()[:256].split(b"\n", 1)[0].decode("utf-8", errors="replace")
    match = re.match(r"#!\s*(\S+python[\d.]*)", first)
    if match is None:
        return None
    code = "import importlib.metadata as m; print('hermes-agent', m.version('hermes-agent'))"
    return [match[1], "-c", code]


def _which(command: str) -> Path | None:
    import shutil

    found = shutil.which(command)
    return Path(found) if found else None
