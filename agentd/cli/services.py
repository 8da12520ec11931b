"""The long-running services: `agentd dispatch`, `agentd sensors`, and `agentd run` (both)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

import anyio

from agentd.cli.common import add_command, check_live_workflows, config_from, store_from
from agentd.clock import SystemClock
from agentd.config import Config
from agentd.dispatch import Dispatcher
from agentd.metrics import DispatchMetrics, NullMetrics, SensorMetrics, dispatch_metrics, sensor_metrics
from agentd.sensor_service import SensorService
from agentd.service import run_services
from agentd.store import AsyncStore, init_state_dir

logger = logging.getLogger("agentd.run")


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
        dispatcher = Dispatcher(
            config, db, clock=SystemClock(), metrics=_dispatch_metrics(config), until_idle=args.until_idle
        )
        anyio.run(run_services, dispatcher)
    finally:
        db.close()
    return 0


def cmd_sensors(args: argparse.Namespace) -> int:
    config, db = _open(args)
    try:
        service = SensorService(config, db, clock=SystemClock(), metrics=_sensor_metrics(config), once=args.once)
        anyio.run(run_services, service)
    finally:
        db.close()
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Both services in one process, each with its own database connection (as under systemd)."""
    config, dispatch_db = _open(args)
    sensors_db = AsyncStore(store_from(config))
    try:
        dispatcher = Dispatcher(config, dispatch_db, clock=SystemClock(), metrics=_dispatch_metrics(config))
        sensors = SensorService(config, sensors_db, clock=SystemClock(), metrics=_sensor_metrics(config))
        anyio.run(run_services, dispatcher, sensors)
    finally:
        dispatch_db.close()
        sensors_db.close()
    return 0


def _dispatch_metrics(config: Config) -> DispatchMetrics | NullMetrics:
    return dispatch_metrics(config.metrics.enabled, config.agent.agent_id, config.db_path, SystemClock())


def _sensor_metrics(config: Config) -> SensorMetrics | NullMetrics:
    return sensor_metrics(config.metrics.enabled, config.agent.agent_id, config.db_path, SystemClock())
