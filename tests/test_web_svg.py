"""The console's SVG charts (agentd/web/svg.py, docs/web.md "Charts"): well-formed for any numbers and
names, every shape inside the picture, a bar for each positive value saying what it counts, text escaped."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.edge import printable
from agentd.web.svg import (
    HEIGHT,
    LOOKS,
    MAX_VALUE,
    WIDTH,
    Series,
    bar_chart,
    finite,
    legend_name,
    line_chart,
    nice_top,
    number,
)

SVG = "{http://www.w3.org/2000/svg}"
values = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-5, 10**6).map(float)
names = st.text(min_size=1, max_size=30)


@st.composite
def charts(draw: st.DrawFn) -> tuple[list[str], list[Series]]:
    labels = draw(st.lists(names, min_size=0, max_size=60))
    count = draw(st.integers(0, len(LOOKS)))
    series = [
        Series(draw(names), tuple(draw(st.lists(values, min_size=len(labels), max_size=len(labels)))))
        for _ in range(count)
    ]
    return labels, series


def parsed(markup: str) -> ET.Element:
    return ET.fromstring(markup)


def numbers_inside(root: ET.Element) -> None:
    """Every coordinate is a finite number within the view box (a stroke's width aside)."""
    for element in root.iter():
        for name in ("x", "y", "x1", "x2", "y1", "y2", "cx", "cy"):
            if name in element.attrib:
                value = float(element.attrib[name])
                assert math.isfinite(value) and -1 <= value <= max(WIDTH, HEIGHT) + 1, (element.tag, name, value)
        if "height" in element.attrib and element.tag == f"{SVG}rect" and element.get("class") == "bar":
            assert 0 < float(element.attrib["height"]) <= HEIGHT


@given(charts())
def test_a_bar_chart_is_well_formed_with_a_bar_per_positive_value(chart: tuple[list[str], list[Series]]) -> None:
    labels, series = chart
    root = parsed(bar_chart("c", "Outcomes <per hour>", labels, series))
    numbers_inside(root)
    bars = [e for e in root.iter(f"{SVG}rect") if e.get("class") == "bar"]
    assert len(bars) == sum(1 for s in series for v in s.values if finite(v) > 0)
    tips = {e.findtext(f"{SVG}title") for e in bars}
    wanted = {
        printable(f"{s.name}, {labels[i]}: {number(finite(v), '')}")
        for s in series
        for i, v in enumerate(s.values)
        if finite(v) > 0
    }
    assert tips == wanted
    assert root.findtext(f"{SVG}title") == "Outcomes <per hour>"
    assert [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "legend"] == [
        legend_name(printable(s.name)) for s in series
    ]


@given(charts())
def test_a_line_chart_is_well_formed_with_a_point_per_value(chart: tuple[list[str], list[Series]]) -> None:
    labels, series = chart
    root = parsed(line_chart("queue", "Queue", labels, series, unit="$"))
    numbers_inside(root)
    lines = [e for e in root.iter(f"{SVG}polyline")]
    assert len(lines) == 2 * len(series)  # one in the chart, one in the legend
    for line in lines:
        for point in line.attrib["points"].split():
            assert all(math.isfinite(float(v)) for v in point.split(","))


def test_stacked_bars_share_one_axis_and_a_taller_total_is_a_taller_stack() -> None:
    root = parsed(bar_chart("c", "t", ["a", "b"], [Series("x", (1, 3)), Series("y", (1, 5))]))
    heights = [float(e.attrib["height"]) for e in root.iter(f"{SVG}rect") if e.get("class") == "bar"]
    assert heights[1] == heights[0]
    assert heights[2] == pytest.approx(3 * heights[0], rel=0.01) and heights[3] == pytest.approx(
        5 * heights[0], rel=0.01
    )
    ticks = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "tick"]
    assert sorted(ticks) == sorted(["0", "2.5", "5", "7.5", "10", "a", "b"])  # b's stack of 8 under a top of 10


def test_series_told_apart_without_colour() -> None:
    """Each of the first series has its own hatch (bars) and its own dash and marker (lines)."""
    series = [Series(f"s{i}", (1.0,)) for i in range(4)]
    bars = bar_chart("c", "t", ["a"], series)
    hatches = [p.find(f"{SVG}path") for p in parsed(bars).iter(f"{SVG}pattern")]
    drawn = {None if h is None else h.attrib["d"] for h in hatches}
    assert len(drawn) == 4
    lines = parsed(line_chart("c", "t", ["a"], series))
    dashes = {p.get("stroke-dasharray") for p in lines.iter(f"{SVG}polyline")}
    assert len(dashes) == 4


def test_text_is_escaped_and_ids_are_checked() -> None:
    markup = bar_chart("c", 'a "t" & <b>', ["<script>"], [Series("</svg><script>x</script>", (1.0,))])
    assert "<script>" not in markup and "&lt;script&gt;" in markup
    with pytest.raises(ValueError, match="chart id"):
        bar_chart('c" onload="x', "t", [], [])
    with pytest.raises(ValueError, match="2 values for 1 labels"):
        line_chart("c", "t", ["a"], [Series("s", (1.0, 2.0))])


@given(st.floats(min_value=0, max_value=MAX_VALUE * 10, allow_nan=False))
def test_the_axis_top_holds_the_largest_value(value: float) -> None:
    top = nice_top(value)
    assert top >= value * (1 - 1e-9)
    assert value == 0 or top <= 2.5 * value * (1 + 1e-9) or top == 1.0


def test_values_are_drawn_finite_and_bounded() -> None:
    assert [finite(v) for v in (math.nan, math.inf, -1.0, 2.0, 1e300)] == [0.0, 0.0, 0.0, 2.0, MAX_VALUE]
    assert number(1.5, "$") == "$1.50" and number(3.0, "") == "3"


def test_at_most_eight_x_labels_and_always_the_newest() -> None:
    labels = [f"h{i}" for i in range(48)]
    root = parsed(bar_chart("c", "t", labels, [Series("s", (1.0,) * 48)]))
    shown = [t.text for t in root.iter(f"{SVG}text") if t.get("text-anchor") == "middle"]
    assert len(shown) <= 8 and "h47" in shown
