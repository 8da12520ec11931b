"""An attempt's tool calls as a timeline on its task's page (issue 40, finding 8; docs/web.md "An attempt's
timeline"): a row per tool step of its action trace, a bar where the harness gave both times, a mark where
it gave one, an ordered list where it gave none; errors and denials said in words; bounded and escaped."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rig import Rig
from test_web_console import logged_in
from webrig import serving

from agentd.clock import format_ts, parse_ts
from agentd.evidence.action_trace import TRACE_FILE
from agentd.web.timeline import TIMELINE_STEPS, WIDTH, duration, read_steps, shown_step, timeline_svg

pytestmark = pytest.mark.timeout(60)
SVG = "{http://www.w3.org/2000/svg}"
START = parse_ts("2026-11-22T10:00:00.000000Z")


def at(seconds: float) -> str:
    return format_ts(START + timedelta(seconds=seconds))


def step(number: int, tool: str, start: float | None, end: float | None, **more: Any) -> dict[str, Any]:
    row = {"step": number, "kind": "tool", "tool": tool, "is_error": False, "summary": f"{tool} did it"}
    row |= {"started_at": None if start is None else at(start), "ended_at": None if end is None else at(end)}
    return row | more


def write_trace(folder: Path, rows: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TRACE_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_steps_with_times_are_bars_on_one_axis_and_one_time_is_a_mark() -> None:
    steps = [
        shown_step(s)
        for s in (step(1, "Bash", 0, 10), step(2, "Edit", 10, 40, is_error=True), step(3, "Read", None, 60))
    ]
    root = ET.fromstring(timeline_svg("t", steps) or "")
    bars = list(root.iter(f"{SVG}rect"))
    assert len(bars) == 2 and len(list(root.iter(f"{SVG}polygon"))) == 1
    widths = [float(b.attrib["width"]) for b in bars]
    assert widths[1] == pytest.approx(3 * widths[0], rel=0.01), "a bar's length is its duration on one axis"
    assert float(bars[1].attrib["x"]) == pytest.approx(float(bars[0].attrib["x"]) + widths[0], abs=0.2)
    labels = [t.text for t in root.iter(f"{SVG}text")]
    assert "2 Edit error" in labels, "an error said in words, not only in colour"
    assert bars[1].get("stroke-dasharray") and not bars[0].get("stroke-dasharray")
    assert "+1m00s" in labels and root.findtext(f"{SVG}title") == "Tool calls over 1m00s"


def test_without_any_time_there_is_no_picture_but_a_list() -> None:
    assert timeline_svg("t", [shown_step(step(1, "shell", None, None))]) is None
    assert timeline_svg("t", []) is None


times = st.none() | st.integers(0, 10**6).map(float)


@given(
    st.lists(
        st.tuples(st.text(max_size=40), times, times, st.booleans(), st.sampled_from(["tool", "decision"])),
        min_size=1,
        max_size=30,
    )
)
def test_any_steps_draw_well_formed_and_inside(drawn: list[tuple[str, float | None, float | None, bool, str]]) -> None:
    steps = [
        shown_step(step(i, tool, a, b, is_error=err, kind=kind)) for i, (tool, a, b, err, kind) in enumerate(drawn, 1)
    ]
    markup = timeline_svg("t", steps)
    if markup is None:
        assert all(a is None and b is None for _, a, b, _, _ in drawn)
        return
    root = ET.fromstring(markup)
    rows = [t for t in root.iter(f"{SVG}text") if t.get("x") == "4"]
    assert len(rows) == len(steps)
    for shape in [*root.iter(f"{SVG}rect"), *root.iter(f"{SVG}polygon")]:
        xs = (
            [float(shape.attrib["x"])]
            if "x" in shape.attrib
            else [float(p.split(",")[0]) for p in shape.attrib["points"].split()]
        )
        assert all(0 <= x <= WIDTH for x in xs), xs
    assert sum(1 for t in rows if (t.text or "").endswith(" denied")) == sum(
        1 for _, _, _, e, k in drawn if e and k == "decision"
    )


def test_read_steps_keeps_tool_steps_bounded_and_says_what_it_could_not_read(tmp_path: Path) -> None:
    rows = [
        {"step": 1, "kind": "message", "summary": "hello"},
        *(step(i, "Bash", i, i + 1) for i in range(2, TIMELINE_STEPS + 12)),
    ]
    write_trace(tmp_path / "1" / "a", rows)
    found = read_steps(tmp_path, "1/a")
    assert found["total"] == TIMELINE_STEPS + 10 and len(found["steps"]) == TIMELINE_STEPS
    assert all(s["kind"] == "tool" for s in found["steps"]), "a message is not a call"
    (tmp_path / "1" / "b").mkdir()
    (tmp_path / "1" / "b" / TRACE_FILE).write_text('{"step": 1}\nnot json\n')
    assert read_steps(tmp_path, "1/b")["problem"].startswith(f"{TRACE_FILE}: line 2: not JSON")
    assert read_steps(tmp_path, "1/none") == {"steps": [], "total": 0, "problem": None}
    assert shown_step({"started_at": "yesterday", "tool": None, "kind": "tool"})["started_at"] is None


def test_durations_read_as_people_say_them() -> None:
    assert [duration(s) for s in (0.25, 3, 12.4, 185, 7260)] == ["0.25s", "3s", "12s", "3m05s", "2h01m"]


@pytest.mark.asyncio
async def test_the_task_page_shows_each_attempts_calls(rig: Rig) -> None:
    task_id = await rig.completed_task()
    with serving(rig) as web:
        browser, _ = logged_in(web)
        html = browser.get(f"/tasks/{task_id}").text
        assert "Tool calls: 1" in html and re.search(r'<svg class="timeline" id="timeline-0"', html)
        assert ">1 script</text>" in html, "the script's one command step, with the attempt's times"
        attempt = web.client("bob").get(f"/api/tasks/{task_id}").json()["attempts"][0]
        assert attempt["timeline"]["steps"][0]["tool"] == "script", "the API returns the same steps"
        folder = rig.config.paths.state_dir / "attempts" / str(task_id) / attempt["attempt_id"]
        write_trace(folder, [step(1, "<b>Bash</b>", None, None), step(2, "Edit", None, None, is_error=True)])
        answer = browser.get(f"/tasks/{task_id}")
        html = answer.text
        assert answer.status == 200, html
        assert '<svg class="timeline"' not in html, "no time: a list, not a picture"
        assert re.search(r'<ol class="steps"><li value="1"><code>&lt;b&gt;Bash&lt;/b&gt;</code>', html)
        assert "<code>Edit</code> <strong>error</strong>" in html
