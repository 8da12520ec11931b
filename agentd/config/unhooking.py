"""Arguments that would take agentd's tool-call hook away from a harness (docs/policy.md, "What each
harness enforces"): claude's own settings sources and a bare run, codex's hooks table and its feature
switch. A config that gives one while a policy can refuse or hold a call is refused: a policy that only
looks enforced is worse than none."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Each takes the hook away, or gives the harness a way to run a call of its own accord that the hook did not
# allow (claude's allowances and bypasses; codex's sandbox switches): agentd sets these itself under a policy.
UNHOOKING_FLAGS = {
    "claude-code": (
        "--bare",
        "--setting-sources",
        "--settings",
        "--permission-mode",
        "--allowedTools",
        "--allowed-tools",
        "--dangerously-skip-permissions",
        "--allow-dangerously-skip-permissions",
    ),
    "codex": ("--disable", "--dangerously-bypass-approvals-and-sandbox", "--yolo", "-s", "--sandbox", "--full-auto"),
}
CODEX_UNHOOKING_KEYS = ("hooks", "features.hooks", "sandbox")


def unhooking(kind: str, extra_args: Sequence[str]) -> str | None:
    """The first of `extra_args` that would silence agentd's hook in a `kind` harness, or None."""
    flags = UNHOOKING_FLAGS.get(kind, ())
    for place, arg in enumerate(extra_args):
        name, _, inline = arg.partition("=")
        if name in flags:
            return arg
        if kind == "codex" and name in ("-c", "--config"):
            value = inline or (extra_args[place + 1] if place + 1 < len(extra_args) else "")
            if value.strip().startswith(CODEX_UNHOOKING_KEYS):
                return arg if inline else f"{arg} {value}"
    return None


def hook_problems(adapters: Mapping[str, Any], decisions: Iterable[str]) -> list[tuple[str, str]]:
    """(where, what) for each adapter whose extra_args would silence the hook, when any of `decisions` (every
    rule's and the default's, of [policy] and every profile) can refuse or hold a call."""
    if all(decision == "allow" for decision in decisions):
        return []
    found = []
    for adapter_id, adapter in adapters.items():
        autonomy = getattr(adapter, "autonomy", None)
        given = [*((autonomy.required_args or []) if autonomy else []), *(getattr(adapter, "extra_args", None) or [])]
        arg = unhooking(adapter.kind, given)
        if arg is not None:
            what = (
                f"{arg!r} would silence agentd's tool-call hook in {adapter.kind}, or let it run calls the hook did "
                "not allow, and [policy] (or a profile's tool_policy) refuses or holds calls: remove it (agentd sets "
                "the harness's permissions itself under a policy: docs/policy.md)"
            )
            found.append((f"adapters.{adapter_id}.extra_args", what))
    return found
