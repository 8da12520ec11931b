"""The one place agentd starts processes: argv lists only, never a shell."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


def run_foreground(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None) -> int:
    """Run an operator's command attached to this terminal; return its exit status."""
    try:
        completed = subprocess.run(list(argv), cwd=cwd, env=None if env is None else dict(env), check=False)
    except FileNotFoundError:
        return 127
    except PermissionError:
        return 126
    return completed.returncode if completed.returncode >= 0 else 128 - completed.returncode
