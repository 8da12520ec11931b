"""The advisory mode (docs/install-and-deploy.md, "The advisory mode"): without `[dispatch] run_as` an
attempt runs as the services' own user, so it can act as the operator (approve its own held task with
`env -u AGENTD_ATTEMPT_ID agentd approve N`). Kept for development, but a dispatcher whose agent runs a model
refuses it unless the operator says so: `--no-boundary`, or `[dispatch] boundary = "advisory"` (issue 41)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from agentd.process.privilege import BoundaryError, RunUser

if TYPE_CHECKING:
    from agentd.config import Config

# The adapters whose attempts a model drives: what it writes is not the operator's (a script is).
MODEL_BACKED = frozenset({"claude-code", "codex", "hermes-agent", "ollama-generate"})
FLAG = "--no-boundary"
SETTING = '[dispatch] boundary = "advisory"'


def model_backed(config: Config) -> list[str]:
    """The ids of the agent's adapters a model drives, sorted."""
    return sorted(a.adapter_id for a in config.adapters.values() if a.kind in MODEL_BACKED)


def boundary_waiver(config: Config, user: RunUser | None, flag: bool) -> str | None:
    """Who waived the boundary ("--no-boundary" or the setting), or None when there is nothing to waive:
    a run user keeps it, or no adapter runs a model.

    :raises BoundaryError: a model-backed adapter, no run user and no word from the operator.
    """
    adapters = model_backed(config)
    if user is not None or not adapters:
        return None
    if flag:
        return FLAG
    if config.dispatch.boundary == "advisory":
        return SETTING
    raise BoundaryError(advisory_refusal(config, adapters, root=os.geteuid() == 0))


def advisory_refusal(config: Config, adapters: list[str], *, root: bool) -> str:
    """Why the dispatcher does not start, the two ways on, and (as root, who can) the line that makes a run user."""
    said = (
        f"{config.path}: adapter {', '.join(adapters)} runs a model and [dispatch] run_as is not set: its attempts "
        "would run as this service's own user and could approve their own held tasks. Set [dispatch] run_as "
        f"(`agentd install` makes the users), or run in the advisory mode on purpose: {FLAG}, or {SETTING}"
    )
    if not root:
        return said
    name = f"agentd-{config.agent.agent_id}-run"
    return (
        f"{said}. As root, make a run user now: `useradd --system --user-group --no-create-home "
        f'--shell /usr/sbin/nologin {name}`, then add run_as = "{name}" under [dispatch]'
    )


def shown_boundary(
    found: dict[str, Any], waiver: tuple[str, dict[str, Any]] | None, services: list[dict[str, Any]]
) -> dict[str, Any]:
    """`boundary` as status shows it: `waived` (when, by whom) while the dispatcher that waived it is the one
    its service row names, and the line saying so first."""
    dispatch = next((row for row in services if row["service"] == "dispatch"), None)
    if waiver is None or dispatch is None or dispatch["pid"] != waiver[1].get("pid") or dispatch["status"] == "stopped":
        return {**found, "waived": None}
    at, payload = waiver
    line = f"ADVISORY by {payload['by']} since {at}: attempts can approve their own tasks; {found['line']}"
    return {**found, "waived": {"at": at, "by": payload["by"], "adapters": payload.get("adapters", [])}, "line": line}
