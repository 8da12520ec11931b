"""An attempt's tool calls as a timeline on its task's page (docs/web.md, "An attempt's timeline"): each
tool step of its action trace (agentd/evidence/action_trace.py) a row, a bar from its start to its end
where the harness gave both times, a mark where it gave one; without any time, an ordered list. Drawn on
the server as SVG (agentd/web/svg.py's reasons); read from the sealed evidence, bounded."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from markupsafe import Markup

from agentd.clock import parse_ts
from agentd.evidence.action_trace import TRACE_FILE, parse_trace
from agentd.process.files import read_beneath
from agentd.web.svg import LOOKS, escape

TIMELINE_STEPS = 200  # rows shown of one attempt; the rest are in its action_trace.jsonl
TRACE_READ_BYTES = 8 * 1024 * 1024  # of action_trace.jsonl (at most ~5 MiB: MAX_TRACE_STEPS)
TOOL_KINDS = ("tool", "command", "generate", "decision")  # message steps are text, not calls
WIDTH, ROW, LABEL_W, RIGHT, HEAD = 720, 20, 230, 12, 30
ERROR_FILL, OK_FILL = LOOKS[1][0], LOOKS[0][0]


def read_steps(root: Path, relative_folder: str) -> dict[str, Any]:
    """The tool steps of one attempt's action trace (at most TIMELINE_STEPS), how many there were, and
    why none could be read (no trace, or one that does not parse): never an exception for a page."""
    try:
        found = read_beneath(root, f"{relative_folder}/{TRACE_FILE}", TRACE_READ_BYTES)
    except OSError:
        return {"steps": [], "total": 0, "problem": None}
    data = found.data[:TRACE_READ_BYTES]
    if len(found.data) > TRACE_READ_BYTES:
        data = data[: data.rfind(b"\n") + 1]  # whole lines only
    try:
        rows = parse_trace(data)
    except ValueError as exc:
        return {"steps": [], "total": 0, "problem": f"{TRACE_FILE}: {exc}"}
    tools = [shown_step(row) for row in rows if row.get("kind") in TOOL_KINDS]
    return {"steps": tools[:TIMELINE_STEPS], "total": len(tools), "problem": None}


def shown_step(row: dict[str, Any]) -> dict[str, Any]:
    """A step as the page shows it: its number, kind, tool, whether it failed, its times, its summary."""
    return {
        "step": row.get("step") if isinstance(row.get("step"), int) else None,
        "kind": str(row.get("kind")),
        "tool": str(row.get("tool") or row.get("kind")),
        "is_error": row.get("is_error") is True,
        "started_at": _time(row.get("started_at")),
        "ended_at": _time(row.get("ended_at")),
        "summary": str(row.get("summary") or ""),
    }


def _time(value: Any) -> str | None:
    """A step's time as written, or None for none or one that is not a time agentd writes."""
    try:
        parse_ts(value)
    except (TypeError, ValueError):
        return None
    return str(value)


def timeline_svg(chart_id: str, steps: list[dict[str, Any]]) -> Markup | None:
    """The steps as rows on one time axis, or None when no step has a time (the page lists them)."""
    times = [parse_ts(t) for s in steps for t in (s["started_at"], s["ended_at"]) if t]
    if not times:
        return None
    first, span = min(times), max((max(times) - min(times)).total_seconds(), 0.001)
    height = HEAD + ROW * len(steps) + 6
    parts = [f'<title id="{chart_id}-title">Tool calls over {escape(duration(span))}</title>', *_axis(span, height)]
    for row, step in enumerate(steps):
        parts += _row(step, HEAD + row * ROW, first, span)
    head = (
        f'<svg class="timeline" id="{chart_id}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-labelledby="{chart_id}-title">'
    )
    return Markup(head + "".join(parts) + "</svg>")


def duration(seconds: float) -> str:
    """`0.25s`, `12s`, `3m05s`, `2h01m`."""
    if seconds < 10:
        return f"{seconds:.2g}s" if seconds < 1 else f"{seconds:.1f}s".replace(".0s", "s")
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def _x(moment: datetime, first: datetime, span: float) -> float:
    return LABEL_W + (WIDTH - LABEL_W - RIGHT) * (moment - first).total_seconds() / span


def _axis(span: float, height: int) -> list[str]:
    """Five ticks from the first time seen (+0s) to the last."""
    parts = []
    for tick in range(5):
        x = LABEL_W + (WIDTH - LABEL_W - RIGHT) * tick / 4
        parts.append(
            f'<line class="axis" x1="{x:.1f}" y1="{HEAD - 8}" x2="{x:.1f}" y2="{height - 4}" stroke-dasharray="2 4"/>'
        )
        anchor = "start" if tick == 0 else "end" if tick == 4 else "middle"
        parts.append(
            f'<text x="{x:.1f}" y="{HEAD - 12}" text-anchor="{anchor}">+{escape(duration(span * tick / 4))}</text>'
        )
    return parts


def _row(step: dict[str, Any], y: int, first: datetime, span: float) -> list[str]:
    """The step's label (its number, tool, and `error` or `denied` in words), then its bar or mark."""
    failed = (" denied" if step["kind"] == "decision" else " error") if step["is_error"] else ""
    label = f"{step['step'] or ''} {step['tool'][:28]}{failed}".strip()
    tip = f"<title>{escape(label + ': ' + step['summary'])}</title>"
    parts = [f'<text x="4" y="{y + 14}">{escape(label)}</text>']
    start, end = (parse_ts(t) if t else None for t in (step["started_at"], step["ended_at"]))
    fill = ERROR_FILL if step["is_error"] else OK_FILL
    if start and end:
        x0, x1 = _x(start, first, span), _x(max(start, end), first, span)
        dash = (
            ' stroke="#000" stroke-dasharray="3 2"' if step["is_error"] else ""
        )  # an error's bar: dashed, not only red
        box = f'x="{x0:.1f}" y="{y + 3}" width="{max(x1 - x0, 2):.1f}" height="{ROW - 6}"'
        parts.append(f'<rect class="step" {box} fill="{fill}"{dash}>{tip}</rect>')
    elif start or end:
        x = _x(start or end, first, span)  # type: ignore[arg-type]
        points = f"{x:.1f},{y + 3} {x + 6:.1f},{y + 10} {x:.1f},{y + 17} {x - 6:.1f},{y + 10}"
        parts.append(f'<polygon class="step" points="{points}" fill="{fill}">{tip}</polygon>')
    else:
        parts.append(f'<text x="{LABEL_W}" y="{y + 14}">no time{tip}</text>')
    return parts
