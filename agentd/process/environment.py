"""What a child process is given (an attempt's adapter, a sensor, a handler, an operator's command): the only
environment it gets, and the file its command names on its PATH. Apart from agentd/process/runner.py, which
starts it: an attempt's preparation and its manifest need these, not the process starter.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from agentd.config.environment import passthrough_environment, read_env_file
from agentd.redaction import Redactor

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def agentd_path() -> str:
    """PATH as an attempt's process gets it: agentd's own bin first (`agentd skills run` works)."""
    return f"{Path(sys.executable).parent}:{passthrough_environment().get('PATH', DEFAULT_PATH)}"


def resolve_command(command: str, cwd: Path, path: str) -> Path | None:
    """The file `command` names as a process started in `cwd` with PATH `path` finds it."""
    located = str(cwd / command) if "/" in command else shutil.which(command, path=path)
    return Path(located) if located and Path(located).is_file() else None


def child_environment(
    *,
    home: Path,
    agentd: Mapping[str, str],
    tmp: Path | None = None,
    env_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    path_first: str | None = None,
) -> tuple[dict[str, str], Redactor]:
    """The only environment a child gets (an attempt's adapter or a sensor): PATH and locale from
    the service, its own HOME (and TMPDIR), its env_file and env, and agentd's AGENTD_* variables;
    never the rest of the service's environment. Every env_file value is a secret: the Redactor
    returned knows them."""
    found = passthrough_environment()
    if path_first:
        found["PATH"] = f"{path_first}:{found.get('PATH', DEFAULT_PATH)}"
    found["HOME"] = str(home)
    if tmp is not None:
        found["TMPDIR"] = str(tmp)
    secrets = read_env_file(env_file) if env_file is not None else {}
    found.update(secrets)
    found.update(env or {})
    found.update(agentd)
    return found, Redactor(secrets.values())
