"""Poison in a fleet row (issue 38, finding 3), against a real PostgreSQL (tests/pg.py): anyone with the
DSN can write a row, and whatever it holds is one row's problem. A row 3,000 levels deep made psycopg's
JSON decoder raise after the claim had committed, so every row of that claim stayed leased, none
admitted or refused, and was claimed again every lease_s, forever. Each row is now read as text and
judged by agentd's bounded loader on its own: a bad one is reported failed/refused with its reason, the
rest of its claim goes on."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rig import Rig
from support import examples

from agentd.services.fleet import FleetLink
from agentd.store.fleet import FleetQueue

pytestmark = pytest.mark.process

CONTEXT = {"originSurface": "web", "originProductId": "console", "dispatchMode": "queued"}
ORIGIN = {"submitted_by": "alice", "dispatch_context": {**CONTEXT, "initiatedAt": "2026-11-25T00:00:00Z"}}
DEEP = "[" * 3000 + "]" * 3000


@pytest.fixture
def link(rig_factory: Callable[..., Rig], dsn: str, tmp_path: Path) -> Iterator[tuple[Rig, FleetLink]]:
    """An agent whose intake draws from the test's database, with room for every claim a test makes."""
    dsn_file = tmp_path / "fleet.dsn"
    dsn_file.write_text(dsn + "\n")
    dsn_file.chmod(0o600)

    def mutate(raw: dict[str, Any]) -> None:
        raw["fleet"] = {"dsn_file": str(dsn_file), "lease_s": 30, "poll_s": 1, "max_local": 1000}

    rig = rig_factory(mutate)
    made = rig.dispatcher().fleet
    assert made is not None
    yield rig, made
    made.close()


def write_row(queue: FleetQueue, **columns: str) -> int:
    """A row written straight into PostgreSQL, past `fleet submit`'s judgment: each column as SQL text
    PostgreSQL casts to the column's type."""
    row = {"task_type": "example", "subject": "s", "payload": "{}", "origin": json.dumps(ORIGIN), **columns}
    names = ", ".join(row)
    with queue.conn.cursor() as cur:
        cur.execute(
            f"INSERT INTO fleet_tasks ({names}) VALUES ({', '.join(['%s'] * len(row))}) RETURNING id",
            list(row.values()),
        )
        return int(cur.fetchone()["id"])


def good_rows(queue: FleetQueue, n: int) -> list[int]:
    return [queue.submit("example", f"good {i}", {}, origin=ORIGIN)[0].fleet_id for i in range(n)]


POISON = {
    "payload 3,000 levels deep": ({"payload": DEEP}, "payload: JSON nested deeper than 64 levels"),
    "origin 3,000 levels deep": ({"origin": '{"submitted_by": ' + DEEP + "}"}, "origin: JSON nested deeper"),
    "payload 3 MB of text": (
        {"payload": json.dumps({"note": "x" * 3_000_000})},
        "payload: over 2,097,152 characters of JSON",
    ),
    "a 5,000-digit number": ({"payload": '{"n": 1' + "0" * 5000 + "}"}, "payload: not JSON agentd can hold"),
    "a number past int64": ({"payload": '{"n": 1e400}'}, "is outside the 64-bit integer range"),
    "payload an array": ({"payload": "[1, 2]"}, "payload: expected a JSON object, found an array"),
    "payload text": ({"payload": '"text"'}, "payload: expected a JSON object, found a string"),
    "payload null": ({"payload": "null"}, "payload: expected a JSON object, found null"),
    "origin a number": ({"origin": "5"}, "origin: expected a JSON object, found a number"),
    "origin without its context": ({"origin": '{"submitted_by": "x"}'}, "dispatch_context: Field required"),
    "subject 1 MB": ({"subject": "s" * 1_000_000}, "subject: String should have at most 500 characters"),
    "a lone surrogate in a key": ({"payload": '{"\\udc80x": 1}'}, None),  # PostgreSQL refuses it itself
}


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", list(POISON))
async def test_a_poisoned_row_is_refused_with_its_reason_and_the_rest_of_its_claim_goes_on(
    link: tuple[Rig, FleetLink], queue: FleetQueue, kind: str
) -> None:
    rig, intake = link
    columns, reason = POISON[kind]
    before = good_rows(queue, 2)
    try:
        poisoned = write_row(queue, **columns)
    except psycopg.DataError:
        assert reason is None, f"{kind}: PostgreSQL refused it"
        return
    after = good_rows(queue, 2)
    await intake.round()
    refused = queue.get(poisoned)
    assert refused.status == "failed" and refused.result is not None, refused
    assert refused.result["status"] == "refused" and reason is not None and reason in refused.result["summary"]
    admitted = {t.source for t in rig.store.list_tasks()}
    assert admitted == {f"fleet:{i}" for i in before + after}, "the rest of the claim was admitted"
    assert all(queue.get(i).status == "leased" for i in before + after)
    await intake.round()  # never claimed again
    assert queue.get(poisoned).claims == 1 and [e["type"] for e in queue.events(poisoned)] == [
        "claimed", "failed"
    ]  # fmt: skip


def test_postgresql_itself_refuses_a_nul_in_a_rows_text_and_json(queue: FleetQueue) -> None:
    """NUL never reaches intake: PostgreSQL holds it in neither text nor jsonb (so `fleet submit` refuses it
    first: store/fleet.py Submission.check)."""
    for columns in ({"subject": "a\x00b"}, {"payload": '{"a": "\\u0000"}'}, {"origin": '{"x\\u0000": 1}'}):
        with pytest.raises(psycopg.DataError):
            write_row(queue, **columns)


@pytest.mark.asyncio
@pytest.mark.parametrize("column", ["created_at", "finished_at"])  # a claim sets the others anew
@pytest.mark.parametrize("when", ["infinity", "-infinity", "20000-01-01"])
async def test_a_time_python_cannot_hold_is_read_as_none_and_the_row_judged_as_ever(
    link: tuple[Rig, FleetLink], queue: FleetQueue, column: str, when: str
) -> None:
    """psycopg raises on a timestamp outside Python's years (after the claim committed, like the JSON);
    agentd reads such a time as none, and the row is admitted on its merits."""
    rig, intake = link
    fleet_id = write_row(queue, **{column: when})
    assert queue.counts()["tasks"]["queued"] == 1  # `fleet status` too: an age of 'infinity' is none
    await intake.round()
    assert [t.source for t in rig.store.list_tasks()] == [f"fleet:{fleet_id}"]
    assert getattr(queue.get(fleet_id), column) is None
    assert queue.counts()["tasks"]["leased"] == 1


def test_fleet_show_names_what_a_row_holds_that_agentd_cannot(
    queue: FleetQueue, dsn: str, capsys: pytest.CaptureFixture[str], state_dir: Path
) -> None:
    from support import EXAMPLE_CONFIG, run_main

    fleet_id = write_row(queue, payload=DEEP, result='{"summary": ' + DEEP + "}")
    with queue.conn.cursor() as cur:
        cur.execute("INSERT INTO fleet_events (task_id, type, detail) VALUES (%s, 'x', %s)", (fleet_id, DEEP))
    shown = run_main(capsys, EXAMPLE_CONFIG, "fleet", "show", str(fleet_id), "--dsn", dsn)
    assert shown.code == 0, shown.err
    assert "payload  unreadable: payload: JSON nested deeper than 64 levels" in shown.out
    assert "result   unreadable: result: JSON nested deeper than 64 levels" in shown.out
    as_json = run_main(capsys, EXAMPLE_CONFIG, "fleet", "show", str(fleet_id), "--dsn", dsn, "--json").json()
    assert as_json["payload"] is None and "payload" in as_json["unreadable"]
    assert as_json["events"][-1]["detail"] is None and "nested deeper" in as_json["events"][-1]["unreadable"]


# Text as anyone with the DSN could write it into a JSONB column: JSON of any shape, deep, wide or odd.
JSON_TEXT = st.one_of(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
        max_leaves=12,
    ).map(lambda value: json.dumps(value, ensure_ascii=False)),
    st.integers(1, 4000).map(lambda depth: "[" * depth + "]" * depth),
    st.integers(1, 200).map(lambda depth: '{"a": ' * depth + "1" + "}" * depth),
    st.integers(15, 6000).map(lambda digits: "9" * digits),
    st.just(json.dumps(ORIGIN)),
    st.just("{}"),
)


@settings(max_examples=examples(120), deadline=None, suppress_health_check=list(HealthCheck))
@given(payload=JSON_TEXT, origin=JSON_TEXT, subject=st.none() | st.text(max_size=600))
@pytest.mark.asyncio
async def test_whatever_json_a_row_holds_it_is_admitted_or_refused_once_and_never_left_leased(
    link: tuple[Rig, FleetLink], queue: FleetQueue, payload: str, origin: str, subject: str | None
) -> None:
    rig, intake = link
    try:
        fleet_id = write_row(queue, payload=payload, origin=origin, **({"subject": subject} if subject else {}))
    except psycopg.DataError:
        return  # PostgreSQL holds no such row (a NUL, a number past its range): nothing to claim
    await intake.round()
    row = queue.get(fleet_id)
    local = [t for t in rig.store.list_tasks(limit=100_000) if t.source == f"fleet:{fleet_id}"]
    if row.status == "leased":
        assert len(local) == 1 and row.lease_agent == rig.config.agent.agent_id, "admitted: a local task holds it"
    else:
        assert row.status == "failed" and local == [], row
        assert row.result is not None and row.result["status"] == "refused" and row.result["summary"]
