"""`agentd events` prints a header whose columns line up with its rows (issue 40, finding 7): each
heading starts where its field starts on every row, whatever the event's type."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from support import agent_config, run_main

from agentd.cli.observe import TYPE_WIDTH
from agentd.records.event_names import EVENT_TYPES


def starts(line: str) -> list[int]:
    """Where each whitespace-separated word of a line starts."""
    return [m.start() for m in re.finditer(r"\S+", line)]


def test_the_type_column_is_as_wide_as_the_longest_event_type() -> None:
    assert max(len(name) for name in EVENT_TYPES) == TYPE_WIDTH


def test_the_events_header_lines_up_with_every_row(tmp_path: Path, capsys: Any) -> None:
    config = agent_config(tmp_path)
    assert run_main(capsys, config, "init").code == 0
    for subject in ("a", "b"):
        assert run_main(capsys, config, "task", "add", "--type", "example", "--subject", subject).code == 0
    assert run_main(capsys, config, "task", "cancel", "1").code == 0
    for args in (("events",), ("events", "--last", "5")):
        lines = run_main(capsys, config, *args).out.splitlines()
        header, rows = lines[0], lines[1:]
        assert len({row.split()[2] for row in rows}) > 1, "rows of more than one type, of different lengths"
        columns = starts(header)
        for row in rows:
            for heading, at in zip(header.split()[1:], columns[1:], strict=True):
                assert row[at] != " " and row[at - 1] == " ", f"{heading!r} at column {at} is not where {row!r} has it"
