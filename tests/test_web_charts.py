"""The console's charts (issue 40, finding 8; docs/web.md "Charts"): the queue over time, the outcomes per
hour and the cost per day by adapter, from the database within a window, drawn as SVG on /charts and
the same numbers at /api/charts."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from inprocess import ok
from rig import Rig
from test_web_console import logged_in
from webrig import serving

from agentd import control
from agentd.clock import format_ts, parse_ts
from agentd.web import charts
from agentd.web.charts import OTHER, QUEUE_HOURS, charts_view, open_at, top_adapters

pytestmark = pytest.mark.timeout(60)
HOUR = 3600.0
failed = {"status": "permanent_failure", "machine_status": "failed", "operator_summary": "no"}


async def run_all(rig: Rig) -> None:
    await rig.drain()


async def a_day_of_work(rig: Rig) -> None:
    """From 10:00: two tasks at 10:30 that end at 12:30 (one completed, one failed, costing $0.50 and
    $0.25), then one left pending and one canceled at 12:30; the charts read at 13:15."""
    rig.clock.advance(HOUR / 2)
    rig.add("scripted", payload={"outcome": ok(), "usage": {"cost_usd": 0.5}})
    rig.add("scripted", payload={"outcome": failed, "usage": {"cost_usd": 0.25}})
    rig.clock.advance(2 * HOUR)
    await run_all(rig)
    rig.add("scripted", payload={"outcome": ok()})
    canceled = rig.add("scripted", payload={"outcome": ok()}).task_id
    control.cancel_task(rig.config, rig.store, canceled, rig.clock.now(), by="alice")
    rig.clock.advance(HOUR * 3 / 4)


@pytest.mark.asyncio
async def test_the_charts_count_the_queue_the_outcomes_and_the_cost_where_they_happened(rig: Rig) -> None:
    await a_day_of_work(rig)
    view = charts_view(rig.store, rig.clock.now())
    queue = dict(
        zip(view["queue"]["labels"], zip(view["queue"]["waiting"], view["queue"]["running"], strict=True), strict=True)
    )
    assert len(queue) == QUEUE_HOURS
    assert (queue["22 10:00"], queue["22 11:00"], queue["22 12:00"], queue["22 13:00"], queue["now"]) == (
        (0, 0), (2, 0), (2, 0), (1, 0), (1, 0),
    )  # fmt: skip
    assert sum(w for w, _ in queue.values()) == 6 and not view["queue"]["cut"]
    outcomes = view["outcomes"]
    at = outcomes["labels"].index("22 12:00")
    assert {name: values[at] for name, values in outcomes["series"].items()} == {
        "completed": 1, "failed": 1, "blocked": 0, "canceled": 1,
    }  # fmt: skip
    assert sum(sum(values) for values in outcomes["series"].values()) == 3
    cost = view["cost"]
    assert cost["days"][-1] == "2026-11-22" and cost["series"] == {"scripted": [0.0] * 13 + [0.75]}
    assert not cost["estimated"]


@pytest.mark.asyncio
async def test_rows_older_than_the_window_are_not_counted(rig: Rig) -> None:
    await a_day_of_work(rig)
    rig.clock.advance(15 * 24 * HOUR)
    view = charts_view(rig.store, rig.clock.now())
    assert set(view["queue"]["waiting"]) == {1}, "only the task still pending, at every moment"
    assert all(set(values) == {0} for values in view["outcomes"]["series"].values())
    assert view["cost"]["series"] == {}


@pytest.mark.asyncio
async def test_the_page_draws_each_chart_with_its_numbers_and_the_api_returns_them(rig: Rig) -> None:
    await a_day_of_work(rig)
    with serving(rig) as web:
        browser, _ = logged_in(web)
        answer = browser.get("/charts")
        assert answer.status == 200
        assert "script-src 'self'" in answer.headers["content-security-policy"]
        html = answer.text
        assert len(re.findall(r'<svg class="chart" id="(queue|outcomes|cost)"', html)) == 3
        assert "<title>completed, 22 12:00: 1</title>" in html and "<title>scripted, Nov 22: $0.75</title>" in html
        assert "last 48 hours" in html and "last 14 days" in html
        assert re.search(r"<td>22 12:00</td><td>1</td><td>1</td><td>0</td><td>1</td>", html), "the table beside it"
        assert ' style="' not in html, "no inline style: the CSP refuses it"
        numbers = web.client().get("/api/charts").json()
        assert numbers == charts_view(rig.store, rig.clock.now())
        assert web.client(None).get("/api/charts").status == 401


spans = st.lists(
    st.tuples(st.integers(0, 50), st.none() | st.integers(0, 50)).map(
        lambda s: (s[0], None if s[1] is None else s[0] + s[1])
    ),
    max_size=40,
)


@given(spans, st.lists(st.integers(0, 120), max_size=20))
def test_open_at_counts_what_started_and_had_not_ended(found: list[tuple[int, int | None]], moments: list[int]) -> None:
    start = parse_ts("2026-11-22T10:00:00.000000Z")

    def text(minutes: int) -> str:
        return format_ts(start + timedelta(minutes=minutes))

    stored = [(text(a), None if b is None else text(b)) for a, b in found]
    naive = [sum(1 for a, b in found if a <= m and (b is None or b > m)) for m in moments]
    assert open_at(stored, [text(m) for m in moments]) == naive


def test_the_adapters_that_cost_most_are_shown_and_the_rest_are_one() -> None:
    rows = [("d", f"a{i}", float(i), False) for i in range(9)]
    assert top_adapters(rows, 6) == ["a8", "a7", "a6", "a5", "a4", "a3"]
    assert top_adapters(rows[:7], 6) == [f"a{i}" for i in range(6, -1, -1)], "seven fit: no other"
    assert OTHER == "other adapters"


@pytest.mark.asyncio
async def test_a_queue_read_that_hit_its_limit_says_it_was_cut(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    await a_day_of_work(rig)
    assert not charts_view(rig.store, rig.clock.now())["queue"]["cut"]
    monkeypatch.setattr(charts, "SPANS_READ", 2)
    view = charts_view(rig.store, rig.clock.now())
    assert view["queue"]["cut"] and max(view["queue"]["waiting"]) <= 2
    with serving(rig) as web:
        browser, _ = logged_in(web)
        assert "<strong>Cut:</strong>" in browser.get("/charts").text


@pytest.mark.asyncio
async def test_every_chart_read_is_an_index_search_never_a_scan_of_all_tasks(rig: Rig) -> None:
    """The queue chart's read of open tasks had no index and scanned every task ever kept (migration 0020):
    each statement a chart runs is planned here by SQLite, and none scans tasks or task_attempts."""
    await a_day_of_work(rig)
    ran: list[str] = []
    conn = rig.store._conn
    conn.set_trace_callback(ran.append)
    try:
        charts_view(rig.store, rig.clock.now())
    finally:
        conn.set_trace_callback(None)
    statements = [s for s in ran if s.lstrip().upper().startswith("SELECT")]
    assert statements
    for statement in statements:
        plan = " / ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {statement}"))
        assert not re.search(r"\bSCAN (tasks|task_attempts)\b", plan), (statement, plan)
