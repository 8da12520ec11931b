"""The sensor service's idle sleep: until the next sensor falls due (at most `tick_s` between due
checks), on the schedule read at the last check, woken at once by the doorbell. A fake clock and
no sensor processes: nothing here is due to run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from rig import Rig
from support import write_sensor

pytestmark = pytest.mark.asyncio


def ran_at(rig: Rig, sensor_id: str, interval_s: float) -> None:
    """Record a run of the sensor that started now (as the service or `agentd sensor run` does)."""
    now = rig.clock.now()
    rig.store.finish_sensor_run(sensor_id, now, now + timedelta(seconds=interval_s), "ok", None, {}, now, quiet=True)


async def test_an_idle_service_sleeps_until_the_next_sensor_is_due_at_most_tick_s(
    sensing: Callable[[], Rig], sensors_dir: Path
) -> None:
    write_sensor(sensors_dir, "slow", 'print(event("a"))', interval=300)
    write_sensor(sensors_dir, "slower", 'print(event("b"))', interval=900)
    rig = sensing()
    ran_at(rig, "slow", 300)
    ran_at(rig, "slower", 900)
    service, tick_s = rig.service, rig.config.sensors.tick_s
    assert await service.run_due(rig.clock.now()) == []  # the due check: nothing due, the schedule read
    assert service.seconds_to_next_check(rig.clock.now()) == tick_s
    rig.clock.advance(300 - tick_s / 2)
    assert service.seconds_to_next_check(rig.clock.now()) == tick_s / 2
    rig.clock.advance(tick_s / 2)
    assert service.seconds_to_next_check(rig.clock.now()) == 0
    assert "next due in" in await service.status_line()


async def test_an_idle_wake_reads_nothing_the_schedule_is_read_again_when_a_sensor_falls_due(
    sensing: Callable[[], Rig], sensors_dir: Path
) -> None:
    """Nothing but the service brings a sensor's turn forward: an operator's `agentd sensor run`
    only pushes it later, which the service reads when the old turn comes."""
    write_sensor(sensors_dir, "slow", 'print(event("a"))', interval=300)
    rig = sensing()
    ran_at(rig, "slow", 300)
    service = rig.service
    assert await service.run_due(rig.clock.now()) == []
    rig.clock.advance(100)
    ran_at(rig, "slow", 300)  # the operator ran it: next due 400 s after the first run
    rig.clock.advance(200)
    assert service.seconds_to_next_check(rig.clock.now()) == 0, "the schedule read at the last check"
    assert await service.run_due(rig.clock.now()) == []  # read again: not due for another 100 s
    rig.clock.advance(100 - 0.25)
    assert service.seconds_to_next_check(rig.clock.now()) == 0.25


async def test_the_doorbell_ends_the_idle_sleep_at_once(sensing: Callable[[], Rig], sensors_dir: Path) -> None:
    """A run's end (or a stop) rings: the sleep ends without waiting for the schedule or the clock,
    which this fake one never moves."""
    write_sensor(sensors_dir, "slow", 'print(event("a"))', interval=300)
    rig = sensing()
    ran_at(rig, "slow", 300)
    service = rig.service
    assert await service.run_due(rig.clock.now()) == []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(service._sleep_until_due)
            await anyio.lowlevel.checkpoint()
            service.doorbell.ring()
    assert service.seconds_to_next_check(rig.clock.now()) > 0, "still nothing due: the ring alone woke it"
