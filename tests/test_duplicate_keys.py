"""A JSON object that writes one key twice is refused at every edge (agentd/edge.py): JSON readers disagree
on which of the two counts (Python's takes the last, others the first, some refuse), so what agentd acted on
and what a reviewer's or an auditor's tool reads of the same bytes could differ. The other edges' tests name
it too: a `task add --batch` line (test_task_batch.py), `--payload` and `--context` (test_poison_cli.py), an
attempt's result file (test_poison_dispatch.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rig import Rig
from support import write_sensor
from webrig import Client, serving

from agentd.edge import Refused, loads, loads_setting_aside

KEYS = st.text(max_size=8)
SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=10,
)


def with_a_key_twice(value: dict[str, Any], key: str, first: Any, second: Any) -> str:
    """`value` as JSON text with `key` written twice (first, then second), then the rest."""
    rest = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in value.items() if k != key]
    return (
        "{"
        + ", ".join([f"{json.dumps(key)}: {json.dumps(first)}", *rest, f"{json.dumps(key)}: {json.dumps(second)}"])
        + "}"
    )


@given(st.dictionaries(KEYS, VALUES, max_size=4), KEYS, VALUES, VALUES, st.integers(0, 3))
def test_a_key_written_twice_at_any_depth_is_refused_naming_it(
    value: dict[str, Any], key: str, first: Any, second: Any, depth: int
) -> None:
    text = with_a_key_twice(value, key, first, second)
    for _ in range(depth):
        text = '{"outer": [' + text + "]}"
    for read in (lambda t: loads(t, "here"), lambda t: loads_setting_aside(t, "here", "usage")):
        with pytest.raises(Refused) as refused:
            read(text)
        assert str(refused.value).startswith("here: the key ") and "is written twice in one object" in str(
            refused.value
        )


@given(VALUES)
def test_json_without_a_repeated_key_reads_as_json_loads_reads_it(value: Any) -> None:
    text = json.dumps(value)
    assert loads(text, "here") == json.loads(text)
    assert loads(text.encode(), "here") == json.loads(text), "bytes too"
    assert loads(b"\xef\xbb\xbf" + text.encode(), "here") == json.loads(text), "and bytes after a byte-order mark"


@pytest.fixture
def alice(rig: Rig) -> Iterator[Client]:
    with serving(rig) as web:
        yield web.client("alice")


def test_the_api_refuses_a_body_with_a_key_twice_and_writes_nothing(rig: Rig, alice: Client) -> None:
    raw = b'{"task_type": "example", "payload": {"note": "a"}, "priority": 9, "priority": 1}'
    answer = alice.post("/api/tasks", raw=raw)
    assert answer.status == 400 and answer.error_at() == "body", answer.text
    assert "the key 'priority' is written twice" in answer.json()["error"]["what"]
    assert rig.store.list_tasks() == []


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_sensor_line_with_a_key_twice_is_rejected_and_its_neighbours_count(
    sensing: Callable[[], Rig], sensors_dir: Path
) -> None:
    body = """
print(event("a"))
print(event("twice").replace('"source_ref": "test"', '"source_ref": "test", "dedupe_key": "other"'))
print(event("b"))
"""
    write_sensor(sensors_dir, "twice", body)
    rig = sensing()
    [report] = await rig.service.run_due(rig.clock.now())
    assert [r.line for r in report.rejected] == [2], report.rejected
    assert "the key 'dedupe_key' is written twice" in report.rejected[0].reason
    assert sorted(t.subject for t in rig.store.list_tasks()) == ["task a", "task b"]
