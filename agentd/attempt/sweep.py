"""The boot sweep (docs/design.md, "Dispatch"): close every attempt a dead runtime left open.

Whatever it left running is killed first (its cgroup, else its marker). If its processes were
already gone and it left a result, that result is judged like a live attempt's; otherwise the
runtime crashed under it (agentd/attempt/conclude.py `sweep_end`). Each ending is committed through the same
boundary as a live attempt's, so one attempt that cannot be swept is recorded and the rest go on.
"""

from __future__ import annotations

import logging

import anyio

from agentd.attempt.conclude import sweep_end
from agentd.attempt.prepare import adapter_redactor
from agentd.attempt.run import AttemptRunner, Running
from agentd.config import Config
from agentd.errors import contained
from agentd.outlook.metrics import DispatchMetrics, NullMetrics
from agentd.process.containment import attempt_group, sweep_run
from agentd.process.privilege import RunUser
from agentd.store import AsyncStore, Store

logger = logging.getLogger(__name__)


async def boot_sweep(
    config: Config,
    db: AsyncStore,
    user: RunUser | None,
    attempts: AttemptRunner,
    metrics: DispatchMetrics | NullMetrics,
) -> int:
    """Sweep every open attempt; return how many. `user`: who attempts run as (whose processes are killed);
    `attempts`: the runner whose ending and outcome commit every attempt's is, a live one's or a swept one's."""
    swept = 0
    for task, attempt in await db.call(Store.running_attempts):
        survivors = await sweep_run(attempt_group(config.paths.state_dir, attempt.attempt_id), user)
        running = Running(task, attempt)  # found outside a run: no control, nothing prepared, nothing after it
        with contained(logger, "boot sweep of attempt %s failed inside agentd", attempt.attempt_id) as failed:
            redactor = adapter_redactor(config, attempt.adapter_id)  # its secrets as they are now
            end = await anyio.to_thread.run_sync(
                sweep_end, attempts.ending(running), task, attempt, survivors, redactor
            )
        if failed.error is not None:
            end = await attempts.internal_failure(running, failed.error, "sweeping this attempt")
        await attempts.commit(task, attempt, end)
        metrics.boot_swept()
        swept += 1
    return swept
