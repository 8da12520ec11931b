"""The console's events page over real HTTP (docs/web.md, "Events"): newest first, the migrations folded
into one line, filters by type, task and time, paging both ways by sequence, a bounded page; and the
filter parsers as properties."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from urllib.parse import urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_web_console import logged_in
from webrig import Client, WebRig

from agentd.web.events_page import PAGE_MAX, event_query, event_types, fold_migrations, moment_at
from agentd.web.inputs import BadInput

pytestmark = pytest.mark.timeout(60)
ROW = re.compile(r'<tr class="([a-z_ ]+)"><td>(\d+)(?:–(\d+))?</td>')
NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def rows(html: str) -> list[tuple[str, int]]:
    """(type, sequence) of each row shown, top to bottom."""
    return [(kind.removeprefix("folded ").strip(), int(seq)) for kind, seq, _ in ROW.findall(html)]


def link(html: str, rel: str) -> str | None:
    found = re.search(rf'<a href="([^"]+)" class="{rel}"', html)
    return found.group(1).replace("&amp;", "&") if found else None


def events(browser: Client, **query: object) -> str:
    answer = browser.get("/events" + (f"?{urlencode(query)}" if query else ""))
    assert answer.status == 200, answer.text[:400]
    return answer.text


def test_the_page_opens_newest_first_with_the_migrations_folded_and_pages_back_and_forth(web: WebRig) -> None:
    rig = web.rig
    migrations = [e for e in rig.events() if e.type == "migration_applied"]
    assert len(migrations) > 3, "a fresh agent starts with its migrations"
    for n in range(60):
        rig.add(subject=f"task {n}")
    browser, _ = logged_in(web)
    last = rig.store.last_event_sequence()  # the login's token included
    first = events(browser)
    shown = rows(first)
    assert len(shown) == 50 and shown[0][1] == last, "the newest page, newest on top"
    assert [seq for _, seq in shown] == sorted((seq for _, seq in shown), reverse=True)
    assert link(first, "newer") is None and link(first, "older") is not None
    older = events(browser, before=shown[-1][1])
    assert rows(older)[0][1] == shown[-1][1] - 1, "the page before the last one shown"
    oldest = older
    while (next_page := link(oldest, "older")) is not None:
        oldest = browser.get(next_page).text
    folded = [(kind, seq) for kind, seq in rows(oldest) if kind == "migration_applied"]
    assert len(folded) == 1, "every migration on one line"
    assert f"{len(migrations)} migrations applied" in oldest
    back = link(oldest, "newer")
    assert back is not None
    newer = browser.get(back).text
    assert rows(newer)[-1][1] > rows(oldest)[0][1], "newer: the page after the first one shown"
    assert [seq for _, seq in rows(newer)] == sorted((seq for _, seq in rows(newer)), reverse=True)


def test_filters_by_type_task_and_time_and_bounded_pages(web: WebRig) -> None:
    rig = web.rig
    first = rig.add(subject="one").task_id
    rig.clock.advance(3600)
    second = rig.add(subject="two").task_id
    rig.store.pause_task(second, "test", "x", rig.clock.now())
    browser, _ = logged_in(web)
    of_task = rows(events(browser, task_id=second))
    assert of_task and {kind for kind, _ in of_task} == {"task_enqueued", "task_paused"}
    typed = rows(events(browser, type="task_paused,task_enqueued"))
    assert {kind for kind, _ in typed} == {"task_enqueued", "task_paused"} and len(typed) == 3
    recent = rows(events(browser, since="30m", type="task_enqueued"))
    assert len(recent) == 1, "since: an age before the page's clock"
    before_then = events(browser, until="30m", type="task_enqueued")
    assert len(rows(before_then)) == 1 and f'href="/tasks/{first}"' in before_then
    assert len(rows(events(browser, limit=2))) == 2
    blank = events(browser, type="", task_id="", since="", until="", limit="50")  # the filter form, left empty
    assert len(rows(blank)) == len(rows(events(browser)))
    for bad in ({"limit": PAGE_MAX + 1}, {"since": "yesterday"}, {"type": "Not A Type"}, {"before": 3, "after": 1},
                {"since": "1h", "until": "2h"}, {"task_id": "x"}):  # fmt: skip
        answer = browser.get("/events?" + urlencode(bad))
        assert answer.status == 422 and "<nav>" in answer.text, bad
    assert browser.get("/events?task_id=99999").status == 404


def test_a_tasks_page_lists_its_events_newest_first(web: WebRig) -> None:
    rig = web.rig
    task_id = rig.add().task_id
    rig.store.pause_task(task_id, "test", "x", rig.clock.now())
    browser, _ = logged_in(web)
    page = browser.get(f"/tasks/{task_id}").text
    assert [kind for kind, _ in rows(page)] == ["task_paused", "task_enqueued"]


# --- the parsers and the folding ------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=100 * 365 * 86400))
def test_an_age_is_that_long_before_now(seconds: int) -> None:
    assert moment_at(f"{seconds}s", NOW, "query.since") == NOW - timedelta(seconds=seconds)


@given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9998, 1, 1)))
def test_a_utc_time_reads_as_itself(moment: datetime) -> None:
    moment = moment.replace(microsecond=0, tzinfo=UTC)
    assert moment_at(moment.strftime("%Y-%m-%dT%H:%M:%SZ"), NOW, "query.since") == moment
    assert moment_at(moment.strftime("%Y-%m-%dT%H:%M:%S"), NOW, "query.since") == moment, "UTC unless it says"
    assert moment_at(moment.strftime("%Y-%m-%d"), NOW, "q") == moment.replace(hour=0, minute=0, second=0)


@given(st.text(max_size=80))
def test_any_text_is_a_time_or_a_422_naming_the_field(text: str) -> None:
    try:
        found = moment_at(text, NOW, "query.until")
    except BadInput as exc:
        assert exc.status == 422 and exc.where == "query.until"
    else:
        assert found.tzinfo is not None


@given(st.lists(st.text(max_size=30), max_size=25))
def test_types_are_event_type_shaped_or_refused(values: list[str]) -> None:
    try:
        found = event_types(values)
    except BadInput as exc:
        assert exc.where == "query.type"
    else:
        assert all(re.fullmatch(r"[a-z][a-z0-9_]*", t) for t in found) and len(set(found)) == len(found)


@given(st.dictionaries(st.sampled_from(["before", "after", "task_id", "limit", "since", "until"]),
                       st.one_of(st.integers(-5, 10**20).map(str), st.text(max_size=12)), max_size=6))  # fmt: skip
def test_a_query_is_a_bounded_page_with_one_cursor_or_a_422(query: dict[str, str]) -> None:
    try:
        found = event_query(query, [], NOW)
    except BadInput as exc:
        assert exc.status == 422 and exc.where.startswith("query.")
        return
    assert 1 <= found.limit <= PAGE_MAX
    assert found.before is None or found.after is None
    if found.since and found.until:
        assert found.since < found.until
    again = event_query(dict(found.filters()), found.types, NOW)
    assert again.filters() == found.filters(), "a page's links keep its filters"


@given(st.lists(st.sampled_from(["migration_applied", "task_enqueued"]), max_size=40))
def test_folding_keeps_every_other_row_and_counts_every_migration(kinds: list[str]) -> None:
    shown_rows = [
        {"sequence": 100 - n, "type": kind, "payload": {"version": 100 - n} if kind == "migration_applied" else {}}
        for n, kind in enumerate(kinds)
    ]
    folded = fold_migrations([dict(r) for r in shown_rows])
    assert [r["sequence"] for r in folded if r["type"] != "migration_applied"] == [
        r["sequence"] for r in shown_rows if r["type"] != "migration_applied"
    ]
    assert sum(r.get("folded", 0) for r in folded) == kinds.count("migration_applied")
    assert all(not (a.get("folded") and b.get("folded")) for a, b in pairwise(folded))
