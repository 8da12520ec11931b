"""`agentd events` for a person (docs/cli.md, "agentd events"): newest first, the migrations a fresh agent
starts with folded into one line, filters by type, task and time, paging back by sequence; the machine
formats and --follow keep the log's order."""

from __future__ import annotations

import argparse
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agentd.cli.observe import order_of


def sequences(out: str) -> list[int]:
    return [int(line.split()[0]) for line in out.splitlines()[1:] if not line.startswith("#")]


def started(cli: Any, tasks: int = 3) -> int:
    assert cli("init").code == 0
    for n in range(tasks):
        assert cli("task", "add", "--type", "example", "--subject", f"s{n}").code == 0
    return len([e for e in cli("events", "--json").json_lines() if e["type"] == "migration_applied"])


def test_events_lists_the_newest_first_with_the_migrations_on_one_line(cli: Any) -> None:
    migrations = started(cli)
    shown = cli("events")
    lines = shown.out.splitlines()
    assert shown.code == 0 and lines[0].split() == ["SEQ", "TIME", "TYPE", "DETAIL"]
    assert sequences(shown.out) == sorted(sequences(shown.out), reverse=True), "newest first"
    assert [line.split()[2] for line in lines[1:]] == ["task_enqueued"] * 3 + ["migration_applied"]
    assert f"{migrations} migrations applied (sequences 1-{migrations}, versions 1-{migrations})" in lines[-1]
    oldest = cli("events", "--oldest-first").out.splitlines()
    assert oldest[1:] == [oldest[1], *lines[1:-1][::-1]] and "migrations applied" in oldest[1]
    typed = cli("events", "--type", "migration_applied").out.splitlines()
    assert len(typed) == 1 + migrations, "asked for by type: every migration, one line each"


def test_events_pages_back_by_sequence_as_its_last_line_says(cli: Any) -> None:
    started(cli, tasks=6)
    first = cli("events", "--limit", "4", "--type", "task_enqueued")
    assert sequences(first.out) == sorted(sequences(first.out), reverse=True) and len(sequences(first.out)) == 4
    hint = first.out.splitlines()[-1]
    assert hint == f"# older: agentd events --before {sequences(first.out)[-1]} (with the same filters)"
    page = cli("events", "--limit", "4", "--type", "task_enqueued", "--before", str(sequences(first.out)[-1]))
    assert len(sequences(page.out)) == 2 and max(sequences(page.out)) < min(sequences(first.out))
    assert "# older" not in page.out, "the last page names no page before it"
    json_page = cli("events", "--json", "--limit", "2", "--before", str(sequences(first.out)[-1]))
    assert [e["sequence"] for e in json_page.json_lines()] == sorted(sequences(page.out))[-2:], "JSON: log order"


def test_events_filters_by_task_and_time(cli: Any) -> None:
    started(cli)
    assert cli("task", "cancel", "2").code == 0
    of_task = cli("events", "--task", "2").out.splitlines()[1:]
    assert [line.split()[2] for line in of_task] == ["task_finished", "task_enqueued"]
    assert cli("events", "--until", "1h").out.splitlines()[1:] == [], "nothing is older than an hour"
    assert len(sequences(cli("events", "--until", "2999-01-01", "--type", "task_enqueued").out)) == 3
    both = cli("events", "--follow", "--before", "5")
    assert both.code == 2 and both.err.count("\n") == 1 and "--before" in both.err
    bad = cli("events", "--until", "yesterday")
    assert bad.code == 2 and "expected a UTC time like" in bad.err


def test_the_machine_formats_keep_the_logs_order(cli: Any) -> None:
    started(cli)
    lines = cli("events", "--json").json_lines()
    assert [e["sequence"] for e in lines] == sorted(e["sequence"] for e in lines)
    assert len([e for e in lines if e["type"] == "migration_applied"]) > 1, "never folded"


FLAGS = st.fixed_dictionaries(
    {
        "format": st.sampled_from([None, "text", "json", "agent-runtime"]),
        "json": st.booleans(),
        "follow": st.booleans(),
        "after": st.sampled_from([None, 0, 5]),
        "last": st.sampled_from([None, 3]),
        "before": st.sampled_from([None, 9]),
        "oldest_first": st.booleans(),
    }
)


@given(FLAGS)
def test_only_text_for_a_person_is_printed_newest_first(flags: dict[str, Any]) -> None:
    order = order_of(argparse.Namespace(**flags))
    text = flags["format"] in (None, "text") and not flags["json"]
    forward = flags["follow"] or flags["after"] is not None or flags["last"] is not None or flags["oldest_first"]
    assert order.shown_newest_first == (text and not forward)
    assert order.newest == (order.shown_newest_first or flags["before"] is not None)
