"""What claude's own permission settings would let a call do, answered by agentd's hook instead (docs/policy.md,
"What each harness enforces").

Under a tool policy claude runs with `--permission-mode dontAsk` and no tool allowed of its own: a call runs
only when agentd's hook answers `allow`, so a hook that dies, stops or is never started leaves the call
denied (measured on 2.1.197: in dontAsk, a call the hook does not allow is refused, but for read-only
commands inside the working folder, which the ledger accounts for). What the adapter's own settings would
have allowed claude to do without asking (its `allowed_tools`, its `sandbox`, the trusted-vm posture) is
therefore judged here, after the policy: a call both allow gets the hook's `allow`; any other is left to
claude's own check (in dontAsk: refused unless read-only) or refused by the policy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agentd.adapters.harness import trusted
from agentd.config.tool_policy import Call, command_of, resolved, segments
from agentd.records import AdapterConfig, ClaudeCodeAdapterConfig

# Tools claude runs without asking in its default mode when they stay inside the working folder: reading and
# searching, its todo list, and subagents (whose own calls come to the hook one by one).
READ_TOOLS = frozenset({"Read", "Glob", "Grep", "LS", "NotebookRead", "TodoWrite", "Task", "Agent", "ExitPlanMode"})
EDIT_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})  # sandbox "workspace-write" (acceptEdits)
PATH_KEYS = ("file_path", "notebook_path", "path")
PREFIX_RULE = re.compile(r"^(?P<tool>[A-Za-z0-9_]+)\((?P<prefix>[^()]*):\*\)$")  # claude's `Bash(git status:*)`


def claude_would_allow(adapter: AdapterConfig, call: Call) -> bool:
    """Whether the adapter's own settings let claude run `call` without asking (what `--allowedTools`, the
    permission mode and the trusted-vm bypass said before agentd's hook took their place)."""
    if not isinstance(adapter, ClaudeCodeAdapterConfig):
        return False
    if trusted(adapter) or listed(adapter.allowed_tools or [], call):
        return True
    inside = _inside(call)
    if call.tool in READ_TOOLS:
        return inside is not False
    return call.tool in EDIT_TOOLS and adapter.sandbox in ("workspace-write", "danger-full-access") and bool(inside)


def listed(allowed: Sequence[str], call: Call) -> bool:
    """`call` is one an `allowed_tools` entry names: the tool itself, or `Tool(prefix:*)` for a command each of
    whose simple commands starts with the prefix. Other patterns are claude's to judge: not named here."""
    for entry in allowed:
        if entry == call.tool:
            return True
        rule = PREFIX_RULE.match(entry)
        if rule is None or rule["tool"] != call.tool or (command := command_of(call)) is None:
            continue
        pieces, whole = segments(command)
        if whole and pieces and all(_starts(piece, rule["prefix"]) for piece in pieces):
            return True
    return False


def _starts(piece: str, prefix: str) -> bool:
    return piece == prefix or piece.startswith(prefix + " ")


def _inside(call: Call) -> bool | None:
    """Whether the path the call names is inside the workspace; None when it names none."""
    found = next((call.input[key] for key in PATH_KEYS if isinstance(call.input.get(key), str)), None)
    if found is None:
        return None
    path, workspace = resolved(found, call.cwd), call.workspace.rstrip("/")
    return path == workspace or path.startswith(workspace + "/")
