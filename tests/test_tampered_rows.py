"""A database row edited outside agentd into a shape no record takes (a JSON column of another shape, a
time that is not one): every reader says which row and which column in one line, exit 1, and the
dispatcher ends a task it cannot read instead of failing its tick. Each was a pydantic or ValueError
traceback from `task list`, `task show`, `events`, `cost` and the console's API."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

import pytest
from rig import Rig

EXPECTED = "in the database is not a row agentd wrote"


def edit(rig: Rig, statement: str) -> None:
    with closing(sqlite3.connect(rig.config.db_path)) as conn:
        conn.execute(statement)
        conn.commit()


async def finished(rig: Rig) -> int:
    task = rig.add(subject="finished")
    await rig.drain()
    return task.task_id


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("statement", "commands", "said"),
    [
        ("UPDATE tasks SET outcome = '[]'", [["task", "show", "{id}"], ["task", "list"]],
         "task {id} " + EXPECTED + " (outcome: input should be a valid dictionary"),
        ("UPDATE tasks SET skill_ids = '{{\"a\": 1}}'", [["task", "show", "{id}"], ["task", "list", "--json"]],
         "task {id} " + EXPECTED + " (skill_ids: input should be a valid list, found {{'a': 1}})"),
        ("UPDATE tasks SET created_at = 'yesterday'", [["task", "show", "{id}"]],
         "task {id} " + EXPECTED + " (created_at: expected a time like 2026-11-22T10:00:00Z, found 'yesterday')"),
        ("UPDATE task_attempts SET started_at = '5'", [["task", "show", "{id}"], ["cost"]],
         EXPECTED + " (started_at: expected a time like"),
        ("UPDATE events SET timestamp = 'x' WHERE sequence = 2", [["events"]],
         "event 2 " + EXPECTED + " (timestamp: expected a time like"),
    ],
    ids=["an outcome of another shape", "skills of another shape", "a time that is none", "an attempt's time",
         "an event's time"],
)  # fmt: skip
async def test_a_row_no_record_takes_is_named_in_one_line(
    rig: Rig, rig_cli: Any, statement: str, commands: list[list[str]], said: str
) -> None:
    task_id = await finished(rig)
    edit(rig, statement.format(id=task_id))
    for command in commands:
        result = rig_cli(rig, *(part.format(id=task_id) for part in command))
        assert result.code == 1 and "Traceback" not in result.err, (command, result)
        assert len(result.err.strip().splitlines()) == 1, result.err
        assert said.format(id=task_id) in result.err, (command, result.err)
        assert "`agentd evidence verify` names what the event chain says" in result.err


@pytest.mark.asyncio
async def test_the_dispatcher_ends_a_task_it_cannot_read_and_runs_the_next(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    unreadable, readable = rig.add(subject="edited"), rig.add(subject="next")
    edit(rig, f"UPDATE tasks SET payload = '[1]' WHERE id = {unreadable.task_id}")
    await rig.drain()
    with closing(sqlite3.connect(rig.config.db_path)) as conn:
        rows = dict(conn.execute("SELECT id, status || ' ' || coalesce(last_error, '') FROM tasks").fetchall())
    assert rows[readable.task_id].startswith("completed"), rows
    assert rows[unreadable.task_id].startswith("permanent_failure internal_error: task"), rows
    assert "(payload: input should be a valid dictionary, found [1])" in rows[unreadable.task_id]
    said = [r for r in caplog.records if "not a row agentd wrote" in r.getMessage()]
    assert said and not any(r.exc_info for r in said), "one line: the row and the column, no traceback"


@pytest.mark.parametrize(
    ("setup", "statement", "command"),
    [
        (["task", "add", "--type", "example", "--require-approval"], "UPDATE approvals SET requested_at = '[]'",
         ["approvals"]),
        (["task", "add", "--type", "example", "--require-approval"], "UPDATE approvals SET requested_at = ''",
         ["status", "--json"]),
        (["dispatch", "pause", "--reason", "r"], "UPDATE dispatch_control SET paused_at = 'x'", ["status"]),
        (["web", "token", "add", "op"], "UPDATE web_tokens SET created_at = 'x'", ["web", "token", "list"]),
    ],
    ids=["an approval's time", "an empty time", "the pause's time", "a token's time"],
)  # fmt: skip
def test_every_stored_time_is_read_as_agentd_wrote_it_or_named(
    rig: Rig, rig_cli: Any, setup: list[str], statement: str, command: list[str]
) -> None:
    """The readers outside rows.py parsed times themselves: each was a ValueError traceback."""
    assert rig_cli(rig, *setup).code == 0
    edit(rig, statement)
    result = rig_cli(rig, *command)
    assert result.code == 1 and "Traceback" not in result.err and len(result.err.strip().splitlines()) == 1, result
    assert "a time in the database is not one agentd wrote (found " in result.err, result.err
