"""What an attempt's harness refused, in words for people (docs/policy.md, "Two layers"): `agentd task show` and
the console's task page say the same line. Plain functions over `policy_denied` payloads, nothing heavy imported, so
the CLI's fast path can print it without pydantic."""

from __future__ import annotations

from typing import Any

from agentd.vocabulary import counted


def denials_line(denials: list[dict[str, Any]]) -> str:
    """The harness's refusals, saying which layer decided what: agentd's policy allowed a call
    (`agentd_decision`) and the harness's own permissions refused it."""
    tools = ", ".join(sorted({str(p["tool"]) for p in denials if "tool" in p}))
    total = sum(p["dropped"] if isinstance(p.get("dropped"), int) else 1 for p in denials)
    allowed = sum(1 for p in denials if p.get("agentd_decision") == "allowed")
    said = f"denials: {counted(total, 'tool call')} refused by the harness"
    if allowed:
        some = "" if allowed == total else f"{allowed} "
        said += f", {some}after agentd's policy allowed {'it' if allowed == 1 else 'them'}"
    return f"{said} ({tools})"
