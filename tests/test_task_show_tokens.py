"""`agentd task show` prints each attempt's tokens and cost, through the fast path and the full one alike
(issue 52, finding 1: docs/connect-a-model.md promised them, only `--json` and `agentd cost` had them)."""

from __future__ import annotations

from typing import Any

import pytest
from rig import Rig
from test_fast_cli import both_paths

from agentd.cli.queue import usage_line


@pytest.mark.asyncio
async def test_a_finished_attempt_s_tokens_and_cost_are_on_the_page_through_both_paths(rig: Rig, rig_cli: Any) -> None:
    outcome = {"status": "completed", "machine_status": "ok", "operator_summary": "done",
               "usage": {"input_tokens": 1234, "output_tokens": 7, "cost_usd": 0.0021}}  # fmt: skip
    task = rig.add("scripted", payload={"outcome": outcome})
    await rig.drain()
    full, fast = both_paths(rig, rig_cli, "task", "show", str(task.task_id))
    assert full.code == fast.code == 0 and full.out == fast.out
    assert "\ntokens\n  #1  1,234 in, 7 out; $0.0021\n" in full.out, full.out


@pytest.mark.parametrize(
    ("usage", "line"),
    [
        ({}, None),
        ({"input_tokens": 11, "output_tokens": 7}, "11 in, 7 out"),
        ({"input_tokens": 31, "output_tokens": 9, "cache_read_tokens": 5, "cache_write_tokens": 2},
         "31 in, 9 out, 5 cache read, 2 cache write"),
        ({"cost_usd": 0.5, "cost_estimated": True}, "$0.5000 (estimated)"),
    ],
)  # fmt: skip
def test_the_usage_line_says_only_what_is_known(usage: dict[str, Any], line: str | None) -> None:
    assert usage_line(usage) == line
