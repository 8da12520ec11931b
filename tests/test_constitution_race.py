"""Deciding a constitution proposal while another decision races it (issue 23, finding 5): the decision
is taken inside the write transaction and the file written under it, so the document always holds what
the records say was accepted, exactly one decision wins, and the loser writes nothing and says so.

One test interleaves the two deterministically in this process (a second connection holds the write
lock and decides first); the other runs two real `agentd constitution` processes against one state dir
for many rounds, released together by one barrier."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from support import ok
from test_constitution import soul

from agentd.control.constitution import accept_proposal
from agentd.errors import InputError
from agentd.store import open_store

NEW_SOUL = "# Soul\n\nI am careful, candid and brief.\n"


async def propose(rig: Rig, text: str) -> str:
    """One proposal for SOUL.md, made through the real dispatcher and outbox; its id."""
    before = {p.proposal_id for p in rig.store.constitution_proposals(include_decided=True)}
    proposal = {"document": "soul", "path": "proposal.md", "reason": "race"}
    task = rig.add("scripted", payload={"files": {"proposal.md": text}, "outcome": ok(constitution_proposal=proposal)})
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.claim_and_run(rig.clock.now())
    await dispatcher.stop()
    assert rig.store.get_task_or_raise(task.task_id).status == "completed"
    [made] = [
        p.proposal_id for p in rig.store.constitution_proposals(include_decided=True) if p.proposal_id not in before
    ]
    return made


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- one interleaving, deterministic ------------------------------------------------------------------


@pytest.mark.parametrize("first", ["rejected", "accepted"])
@pytest.mark.asyncio
async def test_a_decision_that_commits_first_leaves_the_loser_writing_nothing(rig: Rig, first: str) -> None:
    """Another process's decision holds the write lock while this accept starts; it commits first. The
    accept must then find the proposal decided and write nothing (it used to write SOUL.md and the TOML
    first, then learn it had lost)."""
    proposal_id = await propose(rig, NEW_SOUL)
    soul_before, toml_before = soul(rig).read_bytes(), rig.config.path.read_bytes()
    other = open_store(rig.config.db_path, rig.clock)  # the other process's connection
    accepting = open_store(rig.config.db_path, rig.clock)
    waiting = threading.Event()
    accepting._conn.set_trace_callback(lambda sql: waiting.set() if sql.startswith("BEGIN IMMEDIATE") else None)
    outcome: list[BaseException | object] = []

    def accept() -> None:
        try:
            outcome.append(accept_proposal(rig.config, accepting, proposal_id, note=None, now=rig.clock.now()))
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    other._conn.execute("BEGIN IMMEDIATE")
    thread = threading.Thread(target=accept)
    thread.start()
    try:
        assert waiting.wait(10), "the accept never asked for the write lock"
        other._conn.execute(
            "UPDATE constitution_proposals SET status = ?, decided_by = 'other', decided_at = '2026-01-01T00:00:00Z' "
            "WHERE proposal_id = ?",
            (first, proposal_id),
        )
        other._conn.execute("COMMIT")
        thread.join(30)
    finally:
        accepting.close()
        other.close()
    [result] = outcome
    assert isinstance(result, InputError) and f"already {first}" in str(result), result
    assert soul(rig).read_bytes() == soul_before, "the loser wrote SOUL.md after losing"
    assert rig.config.path.read_bytes() == toml_before, "the loser moved the TOML's version after losing"
    assert not [e for e in rig.events() if e.type == "constitution_accepted"]


@pytest.mark.asyncio
async def test_a_decision_that_cannot_be_recorded_puts_the_files_back(rig: Rig) -> None:
    """The files are written inside the decision's transaction; if recording it then fails (here a
    trigger refuses its event, as a full disk would refuse the commit), SOUL.md and the TOML go back to
    what they held and the proposal stays pending: the records and the files never disagree."""
    proposal_id = await propose(rig, NEW_SOUL)
    soul_before, toml_before = soul(rig).read_bytes(), rig.config.path.read_bytes()
    rig.store._conn.execute(
        """CREATE TRIGGER refuse_accepted BEFORE INSERT ON events WHEN NEW.type = 'constitution_accepted'
           BEGIN SELECT RAISE(ABORT, 'the disk refused it'); END"""
    )
    with pytest.raises(sqlite3.IntegrityError, match="the disk refused it"):
        accept_proposal(rig.config, rig.store, proposal_id, note=None, now=rig.clock.now())
    assert soul(rig).read_bytes() == soul_before and rig.config.path.read_bytes() == toml_before
    [proposal] = rig.store.constitution_proposals()
    assert proposal.status == "pending"


# --- real processes, many rounds -------------------------------------------------------------------------

WORKER = """
import contextlib, io, json, sys
from agentd.cli import main
import agentd.control.constitution  # what `constitution accept` imports: loaded before the barrier
print("ready", flush=True)
for line in sys.stdin:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(json.loads(line))
    print(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue()}), flush=True)
"""


class Operator:
    """A real process running `agentd …` commands one at a time, each when the test releases it."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None and self.process.stdout.readline() == "ready\n"

    def send(self, *args: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(["--config", str(self.config), "constitution", *args]) + "\n")

    def release(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.flush()

    def result(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        return json.loads(self.process.stdout.readline())  # type: ignore[no-any-return]

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.process.stdout.close()


@pytest.fixture
def operators(rig: Rig) -> Iterator[tuple[Operator, Operator]]:
    pair = (Operator(rig.config.path), Operator(rig.config.path))
    yield pair
    for operator in pair:
        operator.close()


ROUNDS = 30 if os.environ.get("AGENTD_TEST_TIER") == "slow" else 10  # `make test-slow`: 30 (the old code broke at 3)


@pytest.mark.process
@pytest.mark.asyncio
async def test_two_operators_deciding_at_once_many_rounds(rig: Rig, operators: tuple[Operator, Operator]) -> None:
    """Each round: SOUL.md back to the text the agent proposes against, two proposals, and two processes
    released at once: accept A and accept B, accept A twice, or accept A and reject A. Afterwards the
    file holds exactly what the one accepted proposal says, the TOML's version is the one it recorded,
    one process won and the other was refused (exit 2) saying the proposal was already decided."""
    original = soul(rig).read_bytes()
    kinds = ("accept-two", "accept-same", "accept-reject")
    for round_number in range(ROUNDS):
        kind = kinds[round_number % len(kinds)]
        soul(rig).write_bytes(original)
        a = await propose(rig, f"# Soul\n\nround {round_number}: take A\n")
        b = await propose(rig, f"# Soul\n\nround {round_number}: take B\n")
        version_before = tomllib.loads(rig.config.path.read_text())["constitution"]["version"]
        first, second = operators
        first.send("accept", a)
        if kind == "accept-two":
            second.send("accept", b)
        elif kind == "accept-same":
            second.send("accept", a)
        else:
            second.send("reject", a, "--reason", "raced")
        first.release()
        second.release()
        results = [first.result(), second.result()]
        where = f"round {round_number} ({kind}): {results}"
        assert sorted(r["code"] for r in results) == [0, 2], where

        decided = {p.proposal_id: p for p in rig.store.constitution_proposals(include_decided=True)}
        accepted = [decided[p] for p in (a, b) if decided[p].status == "accepted"]
        text = soul(rig).read_bytes()
        version = tomllib.loads(rig.config.path.read_text())["constitution"]["version"]
        if accepted:
            [winner] = accepted
            assert sha256(text) == winner.proposed_sha256, (
                f"SOUL.md holds another text than {winner.proposal_id}; {where}"
            )
            assert (winner.version_before, winner.version_after) == (version_before, version), where
        else:  # the reject won: nothing written
            assert decided[a].status == "rejected" and text == original and version == version_before, where
        decisions = [
            e
            for e in rig.events()
            if e.type in ("constitution_accepted", "constitution_rejected") and e.payload["proposal_id"] in (a, b)
        ]
        assert len(decisions) == 1, where
        for pending in [p for p in (a, b) if decided[p].status == "pending"]:
            rig.store.reject_constitution_proposal(pending, by="test", reason="next round", now=rig.clock.now())
        [loser] = [r for r in results if r["code"] == 2]
        assert "already" in loser["err"] and "nothing was written" in loser["err"], where
