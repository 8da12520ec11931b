"""The console's charts as SVG written on the server (docs/web.md, "Charts"): no chart library, no
script, nothing from another origin, so the Content-Security-Policy holds as it is (agentd/web/app.py).
Pure functions from numbers to markup: every text escaped, every number finite, and each series told
apart by a pattern or a dash as well as a colour, so a chart reads without colour (and in print)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from html import escape as escape_html

from markupsafe import Markup

from agentd import frozen_value
from agentd.edge import printable

WIDTH, HEIGHT = 720, 260
LEFT, RIGHT, BOTTOM = 64, 12, 36  # room for the y labels and the x labels
LEGEND_ROW = 18  # the legend wraps into rows of this height above the plot
NAME_CHARS = 32  # of a series' name in the legend (its tooltips say it whole)
X_LABELS = 8  # at most this many x labels, so they never overlap
Y_TICKS = 4
SMALLEST = 1e-6  # a chart whose largest value is below it is drawn as empty: axis 0 to 1
MAX_VALUE = 1e12  # a value beyond it is drawn as it (a bar taller than the chart helps no one)
CHART_ID = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
# One look per series: a fill colour, a hatch drawn over it, a dash and a marker for lines. Colours
# from the Okabe-Ito palette (told apart with colour-blindness too); the hatch and dash without colour.
LOOKS = (
    ("#0072b2", "", "", "circle"),
    ("#d55e00", "M0,8 L8,0", "6 3", "square"),
    ("#009e73", "M0,4 L8,4", "2 3", "diamond"),
    ("#cc79a7", "M4,0 L4,8", "8 3 2 3", "triangle"),
    ("#e69f00", "M0,0 L8,8", "1 2", "circle"),
    ("#56b4e9", "M0,8 L8,0 M0,0 L8,8", "10 2", "square"),
    ("#777777", "M0,2 L8,2 M0,6 L8,6", "4 4", "diamond"),
)


@frozen_value
class Series:
    """One named row of values, one per x label."""

    name: str
    values: tuple[float, ...]


def escape(text: str) -> str:
    """Text as SVG holds it: control and invisible characters shown as escapes (XML forbids most of
    them; agentd/edge.py `printable`), then <, >, & and quotes escaped."""
    return escape_html(printable(text), quote=True)


def finite(value: float) -> float:
    """A value as drawn: NaN, infinities and negatives are 0, anything above MAX_VALUE is MAX_VALUE."""
    if not math.isfinite(value) or value < 0:
        return 0.0
    return min(value, MAX_VALUE)


def nice_top(value: float) -> float:
    """The top of the y axis: the least 1, 2 or 5 × 10ⁿ at or above `value` (1 for an empty chart)."""
    if value <= SMALLEST:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value * (1 - 1e-12))


def number(value: float, unit: str) -> str:
    """A value as a label: `$1.25` for dollars, `3` or `2.5` otherwise."""
    if unit == "$":
        return f"${value:,.2f}"
    return f"{value:,.0f}" if value == int(value) else f"{value:,.2g}"


@frozen_value
class Scale:
    """Where a value is drawn: the plot runs from `top_px` (below the legend) down to the x axis, and
    from 0 up to `most`, the axis' top."""

    top_px: float
    most: float

    def y(self, value: float) -> float:
        return self.top_px + (HEIGHT - BOTTOM - self.top_px) * (1 - value / self.most)


def bar_chart(chart_id: str, title: str, labels: Sequence[str], series: Sequence[Series], *, unit: str = "") -> Markup:
    """Stacked bars, one stack per label, the series bottom up in order."""
    rows = _checked(chart_id, labels, series)
    totals = [sum(values) for values in zip(*rows, strict=True)] if rows else [0.0] * len(labels)
    top_px, legend = _legend(chart_id, series, bars=True)
    scale = Scale(top_px, nice_top(max(totals, default=0.0)))
    parts = [*_frame(chart_id, title, labels, scale, unit), *legend]
    slot = _plot_width() / max(len(labels), 1)
    for column, label in enumerate(labels):
        base = 0.0
        for index, (named, values) in enumerate(zip(series, rows, strict=True)):
            if values[column] > 0:
                said = (named.name, label, unit)
                parts.append(_bar(chart_id, index, (column * slot, slot), (base, values[column]), scale, said))
            base += values[column]
    return _svg(chart_id, title, parts)


def line_chart(chart_id: str, title: str, labels: Sequence[str], series: Sequence[Series], *, unit: str = "") -> Markup:
    """One line per series, a marker on each point, the points at the middle of each label's slot."""
    rows = _checked(chart_id, labels, series)
    top_px, legend = _legend(chart_id, series, bars=False)
    scale = Scale(top_px, nice_top(max((v for values in rows for v in values), default=0.0)))
    parts = [*_frame(chart_id, title, labels, scale, unit), *legend]
    slot = _plot_width() / max(len(labels), 1)
    for index, (named, values) in enumerate(zip(series, rows, strict=True)):
        points = [(LEFT + (column + 0.5) * slot, scale.y(value)) for column, value in enumerate(values)]
        parts.append(_line(index, points))
        for column, (x, y) in enumerate(points):
            parts.append(_marker(index, x, y, f"{named.name}, {labels[column]}: {number(values[column], unit)}"))
    return _svg(chart_id, title, parts)


def _checked(chart_id: str, labels: Sequence[str], series: Sequence[Series]) -> list[list[float]]:
    """The values as drawn; ValueError for an id the page cannot hold, more series than looks to tell
    them apart, or a series of the wrong length."""
    if not CHART_ID.fullmatch(chart_id):
        raise ValueError(f"chart id: expected lowercase letters, digits and -, found {chart_id[:40]!r}")
    if len(series) > len(LOOKS):
        raise ValueError(f"{len(series)} series: at most {len(LOOKS)} (fold the rest into one)")
    for named in series:
        if len(named.values) != len(labels):
            raise ValueError(f"series {named.name[:40]!r}: {len(named.values)} values for {len(labels)} labels")
    return [[finite(v) for v in named.values] for named in series]


def _plot_width() -> float:
    return WIDTH - LEFT - RIGHT


def _frame(chart_id: str, title: str, labels: Sequence[str], scale: Scale, unit: str) -> list[str]:
    """The axes, the y ticks with their labels and grid lines, and at most X_LABELS x labels."""
    parts = [f'<title id="{chart_id}-title">{escape(title)}</title>']
    for tick in range(Y_TICKS + 1):
        value = scale.most * tick / Y_TICKS
        y = scale.y(value)
        parts.append(f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}"/>')
        said = escape(number(value, unit))
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{said}</text>')
    every = max(1, math.ceil(len(labels) / X_LABELS))
    slot = _plot_width() / max(len(labels), 1)
    for column in range(len(labels) - 1, -1, -every):  # from the last: the newest label is always shown
        x, said = LEFT + (column + 0.5) * slot, escape(labels[column])
        parts.append(f'<text class="tick" x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{said}</text>')
    parts.append(f'<line class="axis" x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}"/>')
    parts.append(f'<line class="axis" x1="{LEFT}" y1="{scale.top_px:.1f}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}"/>')
    return parts


def _legend(chart_id: str, series: Sequence[Series], *, bars: bool) -> tuple[float, list[str]]:
    """A swatch (the bar's pattern, or the line's dash and marker) and the name of each series, in rows
    that wrap at the chart's width; and the top of the plot below them."""
    parts = ["<defs>", *(_pattern(chart_id, i) for i in range(len(series))), "</defs>"] if bars else []
    x, y = float(LEFT), 8.0
    for index, named in enumerate(series):
        name = legend_name(printable(named.name))
        width = 30 + 7 * len(name)
        if x > LEFT and x + width > WIDTH - RIGHT:
            x, y = float(LEFT), y + LEGEND_ROW
        if bars:
            parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="14" height="14" {_fill(chart_id, index)}/>')
        else:
            parts += [_line(index, [(x, y + 7), (x + 14, y + 7)]), _marker(index, x + 7, y + 7, named.name)]
        parts.append(f'<text class="legend" x="{x + 18:.1f}" y="{y + 12:.1f}">{escape(name)}</text>')
        x += width
    return y + LEGEND_ROW + 8, parts


def legend_name(name: str) -> str:
    """A series' name as its legend shows it: at most NAME_CHARS characters."""
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"


def _look(index: int) -> tuple[str, str, str, str]:
    return LOOKS[index % len(LOOKS)]


def _pattern(chart_id: str, index: int) -> str:
    colour, hatch, _, _ = _look(index)
    mark = f'<path d="{hatch}" stroke="#ffffff" stroke-width="1.5"/>' if hatch else ""
    return (
        f'<pattern id="{chart_id}-p{index}" width="8" height="8" patternUnits="userSpaceOnUse">'
        f'<rect width="8" height="8" fill="{colour}"/>{mark}</pattern>'
    )


def _fill(chart_id: str, index: int) -> str:
    return f'fill="url(#{chart_id}-p{index})" stroke="{_look(index)[0]}"'


def _bar(
    chart_id: str,
    index: int,
    span: tuple[float, float],
    stack: tuple[float, float],
    scale: Scale,
    said: tuple[str, ...],
) -> str:
    """One segment of a stack (`span`: its slot's x and width; `stack`: its base and value), with a
    tooltip saying what it counts."""
    (x, slot), (base, value), (name, label, unit) = span, stack, said
    low, high = scale.y(base), scale.y(base + value)
    left, width = LEFT + x + slot * 0.15, slot * 0.7
    tip = escape(f"{name}, {label}: {number(value, unit)}")
    return (
        f'<rect class="bar" x="{left:.1f}" y="{high:.1f}" width="{width:.1f}" height="{max(low - high, 0.5):.1f}" '
        f"{_fill(chart_id, index)}><title>{tip}</title></rect>"
    )


def _line(index: int, points: Sequence[tuple[float, float]]) -> str:
    colour, _, dash, _ = _look(index)
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    drawn = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return f'<polyline class="line" points="{drawn}" fill="none" stroke="{colour}" stroke-width="2"{dashed}/>'


def _marker(index: int, x: float, y: float, tip: str) -> str:
    """The series' own shape at a point (circle, square, diamond, triangle), with a tooltip."""
    colour, _, _, shape = _look(index)
    said = f"<title>{escape(tip)}</title>"
    if shape == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}">{said}</circle>'
    if shape == "square":
        return f'<rect x="{x - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7" fill="{colour}">{said}</rect>'
    if shape == "diamond":
        corners = [(x, y - 4.5), (x + 4.5, y), (x, y + 4.5), (x - 4.5, y)]
    else:
        corners = [(x, y - 4.5), (x + 4.5, y + 4), (x - 4.5, y + 4)]
    drawn = " ".join(f"{a:.1f},{b:.1f}" for a, b in corners)
    return f'<polygon points="{drawn}" fill="{colour}">{said}</polygon>'


def _svg(chart_id: str, title: str, parts: list[str]) -> Markup:
    head = (
        f'<svg class="chart" id="{chart_id}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-labelledby="{chart_id}-title">'
    )
    return Markup(head + "".join(parts) + "</svg>")
