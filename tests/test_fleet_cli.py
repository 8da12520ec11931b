"""The fleet's commands as a newcomer meets them (issue 40, finding 6), against a real PostgreSQL
(tests/pg.py): a database without the fleet's schema is one line saying to run `agentd fleet init`, never
a traceback; a connection string in a file others can read is refused as `config check` refuses it; and
`fleet show` prints its task as text and JSON, never as Python's own notation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import EXAMPLE_CONFIG, CliResult, run_main

from agentd.store.fleet import FleetQueue

pytestmark = pytest.mark.process

ORIGIN = {"submitted_by": "alice", "dispatch_context": None}


def fleet(capsys: pytest.CaptureFixture[str], *args: str) -> CliResult:
    return run_main(capsys, EXAMPLE_CONFIG, "fleet", *args)


@pytest.mark.parametrize(
    "command", [["status"], ["show", "1"], ["cancel", "1"], ["submit", "--type", "example", "--subject", "hi"]]
)
def test_every_fleet_command_on_a_database_without_its_schema_says_to_run_fleet_init(
    capsys: pytest.CaptureFixture[str], dsn: str, state_dir: Path, command: list[str]
) -> None:
    refused = fleet(capsys, *command, "--dsn", dsn)
    assert refused.code == 1, refused  # as `fleet submit` said it before: a schema to make, not bad input
    assert "Traceback" not in refused.err and "UndefinedTable" not in refused.err
    assert refused.err.startswith("agentd: the fleet's database has no schema yet: run `agentd fleet init"), refused.err


@pytest.mark.parametrize("command", [["init"], ["status"], ["show", "1"], ["submit", "--type", "example"]])
def test_a_dsn_file_others_can_read_is_refused_by_every_fleet_command(
    capsys: pytest.CaptureFixture[str], dsn: str, tmp_path: Path, state_dir: Path, command: list[str]
) -> None:
    """The rule `config check` holds `[fleet] dsn_file` to, held to `--dsn-file` too: a connection string
    (a password in it, often) in a file only its owner reads."""
    dsn_file = tmp_path / "fleet.dsn"
    dsn_file.write_text(dsn + "\n")
    dsn_file.chmod(0o644)
    refused = fleet(capsys, *command, "--dsn-file", str(dsn_file))
    assert refused.code == 2
    assert refused.err == f"agentd: --dsn-file: {dsn_file} holds secrets but others can read it; chmod 600 it\n"
    dsn_file.chmod(0o600)
    assert fleet(capsys, "init", "--dsn-file", str(dsn_file)).code == 0


def test_fleet_show_prints_its_payload_result_and_origin_as_json(
    capsys: pytest.CaptureFixture[str], dsn: str, queue: FleetQueue
) -> None:
    payload = {"pr": 42, "files": ["a.py", "b.py"], "draft": False}
    task, _ = queue.submit("example", "review", payload, origin=ORIGIN)
    [lease] = queue.claim("arc", ["example"], [], lease_s=60)
    result = {"summary": "done", "evidence": {"attempt": "01J", "verified": True}, "cost_usd": None}
    assert queue.finish(task.fleet_id, lease.token, "completed", result)
    shown = fleet(capsys, "show", str(task.fleet_id), "--dsn", dsn)
    assert shown.code == 0, shown.err
    fields = dict(line.split(None, 1) for line in shown.out.splitlines() if not line.startswith(" "))
    assert json.loads(fields["payload"]) == payload and json.loads(fields["origin"]) == ORIGIN  # JSON, not repr
    assert fields["result"].startswith("summary done, evidence {") and json.loads(fields["result"][22:]) == {
        "attempt": "01J",
        "verified": True,
    }
    assert "{'" not in shown.out and "True" not in shown.out and "None" not in shown.out
