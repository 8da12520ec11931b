"""The operator's queue commands against a real SQLite file: add, list, show, events, status."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from agentd.clock import parse_ts
from agentd.store.migrations import available_migrations

ALL_FIELDS = (
    "--type",
    "example",
    "--subject",
    "hello",
    "--description",
    "say hello",
    "--priority",
    "2",
    "--payload",
    '{"note": "hi", "write": "out/hello.txt"}',
    "--skill",
    "example",
    "--profile",
    "operator",
    "--adapter",
    "script",
    "--require-artifact",
    "out/hello.txt",
    "--delay",
    "1.5",
    "--source",
    "test:cli",
)


def test_task_add_then_list_json_round_trips_every_field(initialised: Any) -> None:
    added = initialised("task", "add", *ALL_FIELDS, "--json")
    assert added.code == 0, added.err
    record = added.json()
    [listed] = initialised("task", "list", "--json").json()
    assert listed == record
    assert listed["task_type"] == "example" and listed["subject"] == "hello"
    assert listed["description"] == "say hello" and listed["priority"] == 2
    assert listed["payload"] == {"note": "hi", "write": "out/hello.txt"}
    assert listed["skill_ids"] == ["example"] and listed["requested_profile_id"] == "operator"
    assert listed["requested_adapter_id"] == "script" and listed["source"] == "test:cli"
    assert listed["evidence_requirements"]["required_artifacts"] == ["out/hello.txt"]
    assert listed["status"] == "pending" and listed["max_attempts"] == 3 and listed["attempt_count"] == 0
    delay = parse_ts(listed["available_at"]) - parse_ts(listed["created_at"])
    assert 89 <= delay.total_seconds() <= 91


def test_defaults_from_the_task_type(initialised: Any) -> None:
    record = initialised("task", "add", "--type", "example", "--subject", "hi", "--payload", "{}", "--json").json()
    assert record["priority"] == 5
    assert record["requested_profile_id"] == "operator"
    assert record["requested_adapter_id"] is None and record["requested_model"] is None
    assert record["available_at"] == record["created_at"] or parse_ts(record["available_at"]) <= parse_ts(
        record["created_at"]
    )


def test_absolute_time_from_the_operator(initialised: Any) -> None:
    record = initialised("task", "add", "--type", "example", "--at", "2030-01-02T03:04:05Z", "--json").json()
    assert record["available_at"] == "2030-01-02T03:04:05.000000Z"


def test_task_show_has_the_record_and_its_events(initialised: Any) -> None:
    task_id = initialised("task", "add", "--type", "example", "--subject", "hi", "--json").json()["task_id"]
    shown = initialised("task", "show", str(task_id), "--json").json()
    assert shown["task"]["task_id"] == task_id
    assert [e["type"] for e in shown["events"]] == ["task_enqueued"]
    assert shown["events"][0]["task_id"] == task_id and shown["attempts"] == []
    text = initialised("task", "show", str(task_id))
    assert "task_enqueued" in text.out and "subject" in text.out


def test_list_filters_by_status_and_limit(initialised: Any) -> None:
    for n in range(3):
        initialised("task", "add", "--type", "example", "--subject", f"t{n}")
    assert [t["subject"] for t in initialised("task", "list", "--limit", "2", "--json").json()] == ["t2", "t1"]
    assert initialised("task", "list", "--status", "completed", "--json").json() == []
    assert len(initialised("task", "list", "--status", "pending", "--json").json()) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--type", "nope"), "task_type: unknown task type 'nope'; registered: example, execute, plan, verify"),
        (
            ("--type", "example", "--payload", '{"bogus": 1}'),
            "payload: Additional properties are not allowed ('bogus' was unexpected)",
        ),
        (("--type", "example", "--payload", '{"sleep_s": "long"}'), "payload.sleep_s: 'long' is not of type 'number'"),
        (("--type", "example", "--payload", "[1"), "--payload: expected a JSON object, found invalid JSON"),
        (("--type", "example", "--payload", "[1]"), "--payload: expected a JSON object, found list"),
        (
            ("--type", "example", "--priority", "0"),
            "--priority: expected 1 (most urgent) to 10 (least urgent), found 0",
        ),
        (
            ("--type", "example", "--priority", "11"),
            "--priority: expected 1 (most urgent) to 10 (least urgent), found 11",
        ),
        (("--type", "example", "--skill", "nope"), "skill_ids: unknown skill 'nope'; known: example"),
        (("--type", "example", "--profile", "nope"), "requested_profile_id: unknown profile 'nope'; known: operator"),
        (("--type", "example", "--adapter", "nope"), "requested_adapter_id: unknown adapter 'nope'; known: script"),
        (("--type", "example", "--model", "gpt-9"), "requested_model: unknown model 'gpt-9'"),
        (("--type", "example", "--at", "tomorrow"), "--at: 'tomorrow' is not an ISO-8601 timestamp"),
        (("--type", "example", "--require-artifact", "../etc/passwd"), "must stay inside the workspace"),
    ],
)
def test_bad_input_is_refused_with_exit_2_and_nothing_written(
    initialised: Any, args: tuple[str, ...], message: str
) -> None:
    before = initialised("events", "--json").json_lines()
    result = initialised("task", "add", *args)
    assert result.code == 2
    assert message in result.err, result.err
    assert initialised("task", "list", "--json").json() == []
    assert initialised("events", "--json").json_lines() == before


def test_events_json_lines_and_after(initialised: Any) -> None:
    initialised("task", "add", "--type", "example")
    initialised("task", "add", "--type", "example")
    events = initialised("events", "--json").json_lines()
    migrations = len(available_migrations())
    assert [e["type"] for e in events] == ["migration_applied"] * migrations + ["task_enqueued", "task_enqueued"]
    assert [e["sequence"] for e in events] == list(range(1, migrations + 3))
    assert all(later["prev_hash"] == earlier["hash"] for earlier, later in itertools.pairwise(events))
    after = initialised("events", "--json", "--after", str(migrations + 1)).json_lines()
    assert [e["sequence"] for e in after] == [migrations + 2]


def test_status_counts_and_oldest_pending(initialised: Any) -> None:
    initialised("task", "add", "--type", "example")
    initialised("task", "add", "--type", "example", "--delay", "10")
    status = initialised("status", "--json").json()
    assert status["counts"]["pending"] == 2 and status["counts"]["completed"] == 0
    assert status["schema_version"] == len(available_migrations())
    assert status["oldest_pending_age_s"] is not None and status["oldest_pending_age_s"] < 60
    assert status["next_available_at"] is not None


def test_commands_before_init_say_what_to_do(cli: Any) -> None:
    result = cli("task", "list")
    assert result.code == 1
    assert "run `agentd init`" in result.err


def test_show_of_a_missing_task_exits_2(initialised: Any) -> None:
    result = initialised("task", "show", "404")
    assert result.code == 2 and "task 404 does not exist" in result.err


def test_identity_show(initialised: Any, config: Any) -> None:
    shown = initialised("identity", "show", "--json").json()
    assert shown["identity"]["internal_name"] == "demo"
    assert shown["constitution"]["soul_hash"] == config.constitution.soul_hash
    assert shown["wallets"][0]["agent_id"] == "demo"


@pytest.mark.process
def test_skills_list_show_and_run(initialised: Any, state_dir: Path) -> None:
    assert [s["skill_id"] for s in initialised("skills", "list", "--json").json()] == ["example"]
    assert "Keep short notes" in initialised("skills", "show", "example").out
    assert initialised("skills", "run", "example", "notes", "--", "add", "it works; $(rm -rf /)").code == 0
    notes = (state_dir.parent / "workspace" / "notes.md").read_text()
    assert notes == "- it works; $(rm -rf /)\n"  # argv, never a shell: the text arrives verbatim
    refused = initialised("skills", "run", "example", "rm", "--", "-rf", "/")
    assert refused.code == 2 and "declares no command 'rm' (declared: notes)" in refused.err
