"""The long-running services: `agentd dispatch`, `agentd sensors`, and `agentd run` (both)."""

from __future__ import annotations

import argparse
import functools
import logging
import signal
from typing import Any, TypeVar

import anyio

from agentd.cli.common import add_command, check_live_workflows, config_from, store_from
from agentd.clock import SystemClock
from agentd.config import Config
from agentd.dispatch import Dispatcher
from agentd.metrics import DispatchMetrics, SensorMetrics
from agentd.sensing import SensorService
from agentd.store import AsyncStore, init_state_dir

logger = logging.getLogger("agentd.run")
M = TypeVar("M", DispatchMetrics, SensorMetrics)


def register(commands: Any) -> None:
    dispatch = add_command(
        commands,
        "dispatch",
        cmd_dispatch,
        "run the dispatcher: lock, boot sweep, then one verified attempt at a time until SIGTERM",
    )
    dispatch.add_argument("--until-idle", action="store_true", help="drain what is claimable now, then exit 0")
    dispatch.set_defaults(log_level=logging.INFO, service=True)
    sensors = add_command(
        commands,
        "sensors",
        cmd_sensors,
        "run the sensor service: each sensor when due, its events into tasks and workflows once",
    )
    sensors.add_argument("--once", action="store_true", help="run every sensor that is due now, then exit")
    sensors.set_defaults(log_level=logging.INFO, service=True)
    run = add_command(
        commands,
        "run",
        cmd_run,
        "run the dispatcher and the sensor service together in the foreground (Ctrl-C stops both)",
    )
    run.set_defaults(log_level=logging.INFO, service=True)


def _open(args: argparse.Namespace) -> tuple[Config, AsyncStore]:
    config = config_from(args)
    init_state_dir(config.paths.state_dir, config.paths.workspace)  # StateDirectory= made only the first
    store = store_from(config)
    try:
        check_live_workflows(config, store)
    except BaseException:
        store.close()
        raise
    return config, AsyncStore(store)


def cmd_dispatch(args: argparse.Namespace) -> int:
    config, db = _open(args)
    try:
        dispatcher = Dispatcher(config, db, clock=SystemClock(), metrics=_metrics(config, DispatchMetrics))
        anyio.run(functools.partial(dispatcher.run, until_idle=args.until_idle))
    finally:
        db.close()
    return 0


def cmd_sensors(args: argparse.Namespace) -> int:
    config, db = _open(args)
    try:
        service = SensorService(config, db, clock=SystemClock(), metrics=_metrics(config, SensorMetrics))
        anyio.run(functools.partial(service.run, once=args.once))
    finally:
        db.close()
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Both services in one process, each with its own database connection (as under systemd)."""
    config, dispatch_db = _open(args)
    sensors_db = AsyncStore(store_from(config))
    try:
        dispatcher = Dispatcher(config, dispatch_db, clock=SystemClock(), metrics=_metrics(config, DispatchMetrics))
        sensors = SensorService(config, sensors_db, clock=SystemClock(), metrics=_metrics(config, SensorMetrics))
        anyio.run(_run_both, dispatcher, sensors)
    finally:
        dispatch_db.close()
        sensors_db.close()
    return 0


def _metrics(config: Config, kind: type[M]) -> M | None:
    """The service's metrics, unless [metrics] enabled = false."""
    return kind(config.agent.agent_id, config.db_path, SystemClock()) if config.metrics.enabled else None


async def _run_both(dispatcher: Dispatcher, sensors: SensorService) -> None:
    async with anyio.create_task_group() as group:
        group.start_soon(_forward_signals, dispatcher, sensors)
        async with anyio.create_task_group() as services:
            services.start_soon(functools.partial(dispatcher.run, watch_signals=False))
            services.start_soon(functools.partial(sensors.run, watch_signals=False))
        group.cancel_scope.cancel()


async def _forward_signals(dispatcher: Dispatcher, sensors: SensorService) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            logger.info("%s received: stopping both services", signal.Signals(signum).name)
            immediately = sensors.stopping  # a second signal does not wait for the grace period
            sensors.request_stop()
            dispatcher.request_stop(immediately=immediately)
