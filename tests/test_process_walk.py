"""From its claim to its spawn an attempt enters the process starter (agentd/process/runner.py) once, at
`run_process`: what a child is given and what its output is kept as are concerns of their own
(docs/decisions.md, "One value per running attempt (issue 53)")."""

from __future__ import annotations

import sys
import threading
from types import FrameType
from typing import Any

import pytest
from rig import Rig
from support import ok

pytestmark = pytest.mark.asyncio

STARTER = "agentd/process/runner.py"


@pytest.mark.process
async def test_an_attempt_enters_the_process_starter_once_from_its_claim_to_its_spawn(rig: Rig) -> None:
    entered: list[str] = []
    held: dict[int, FrameType] = {}  # a coroutine's frame is called again at each resumption; held, no id is reused
    spawned = threading.Event()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or spawned.is_set():
            return
        code = frame.f_code
        if code.co_filename.endswith(STARTER) and id(frame) not in held:
            held[id(frame)] = frame
            caller = frame.f_back
            if caller is None or not caller.f_code.co_filename.endswith(STARTER):
                entered.append(f"{caller.f_code.co_filename if caller else '?'} -> {code.co_name}")
        if code.co_filename.endswith("agentd/process/containment.py") and code.co_name == "spawn":
            spawned.set()

    rig.add("scripted", payload={"outcome": ok()})
    dispatcher = rig.dispatcher(processes=True)
    await dispatcher.start()
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        await dispatcher.claim_and_run(rig.clock.now())
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        await dispatcher.stop()
    assert spawned.is_set(), "the attempt's process was spawned"
    assert [e.rsplit(" -> ", 1)[1] for e in entered] == ["run_process"], entered
