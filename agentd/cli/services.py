"""The long-running services: `agentd dispatch`, `agentd sensors`, and `agentd run` (both)."""

from __future__ import annotations

import argparse
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentd.cli import steer
from agentd.cli.common import add_command, check_live_workflows, config_from, store_from
from agentd.clock import SystemClock

if TYPE_CHECKING:  # the services' modules are imported by their commands: the others start faster without them
    from agentd.config import Config
    from agentd.outlook.metrics import DispatchMetrics, NullMetrics, SensorMetrics
    from agentd.process.privilege import RunUser
    from agentd.services.shell import Service
    from agentd.store import AsyncStore, Store

logger = logging.getLogger("agentd.run")


def register(commands: Any) -> None:
    dispatch = add_command(
        commands,
        "dispatch",
        cmd_dispatch,
        "run the dispatcher: lock, boot sweep, then one verified attempt at a time until SIGTERM",
    )
    dispatch.add_argument("--until-idle", action="store_true", help="drain what is claimable now, then exit 0")
    dispatch.add_argument(
        "--metrics", action="store_true", help="with --until-idle: serve /metrics too (a service always does)"
    )
    dispatch.set_defaults(log_level=logging.INFO, service=True)
    steer.register_dispatch(dispatch)
    _no_boundary(dispatch)
    sensors = add_command(
        commands,
        "sensors",
        cmd_sensors,
        "run the sensor service: each sensor when due, its events into tasks and workflows once",
    )
    sensors.add_argument("--once", action="store_true", help="run every sensor that is due now, then exit")
    sensors.add_argument(
        "--metrics", action="store_true", help="with --once: serve /metrics too (a service always does)"
    )
    sensors.set_defaults(log_level=logging.INFO, service=True)
    run = add_command(
        commands,
        "run",
        cmd_run,
        "run the dispatcher, the sensor service and ([web] enabled) the console in the foreground; Ctrl-C stops all",
    )
    run.set_defaults(log_level=logging.INFO, service=True)
    _no_boundary(run)


def _no_boundary(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-boundary",
        action="store_true",
        help="start without [dispatch] run_as although an adapter runs a model: its attempts can approve their "
        "own tasks (development only; recorded, and shown in status)",
    )


def _open(args: argparse.Namespace) -> tuple[Config, AsyncStore]:
    """The migrated database (a missing one is refused before anything is created: `init` and the
    units' `ExecStartPre=agentd migrate` make it), then the state dir's folders."""
    from agentd.install.neighbours import refuse_neighbours
    from agentd.process.files import keep_workspace
    from agentd.process.privilege import boundary_of, keep_capabilities_to_self, require_switch, run_user
    from agentd.store import AsyncStore, init_state_dir

    config = config_from(args)
    refuse_neighbours(config)  # before keep_workspace opens the workspace to the run user
    store = store_from(config)  # refused inside an attempt
    try:
        keep_capabilities_to_self()  # CAP_SETUID/SETGID/KILL (the units') pass on to no child
        user = run_user(config.dispatch.run_as)
        require_switch(user)
        logger.info("boundary: %s", boundary_of(config)["line"])
        if "no_boundary" in args:  # the dispatcher's: `agentd sensors` runs no model
            _waive(config, store, user, args.no_boundary)
        init_state_dir(config.paths.state_dir)  # StateDirectory= made only the first
        if problem := keep_workspace(config.paths.workspace, user):  # the run user's: install made it theirs
            logger.warning("workspace: %s", problem)
        check_live_workflows(config, store)
    except BaseException:
        store.close()
        raise
    return config, AsyncStore(store)


def _waive(config: Config, store: Store, user: RunUser | None, flag: bool) -> None:
    """Refuse the advisory mode unless said on purpose; said, record who said it (docs/install-and-deploy.md,
    "The advisory mode")."""
    import os

    from agentd.process.advisory import boundary_waiver, model_backed

    by = boundary_waiver(config, user, flag)
    if by is not None:
        logger.warning("boundary: ADVISORY by %s: attempts can approve their own tasks", by)
        store.record_event(
            "dispatch_boundary_waived",
            SystemClock().now(),
            {"by": by, "adapters": model_backed(config), "pid": os.getpid()},
        )


def cmd_dispatch(args: argparse.Namespace) -> int:
    from agentd.services.dispatch import Dispatcher

    one_shot = args.until_idle and not args.metrics
    return _serve_one(
        args,
        lambda config, db: Dispatcher(
            config,
            db,
            clock=SystemClock(),
            metrics=_dispatch_metrics(config, one_shot=one_shot),
            until_idle=args.until_idle,
        ),
    )


def cmd_sensors(args: argparse.Namespace) -> int:
    from agentd.services.sensing import SensorService

    one_shot = args.once and not args.metrics
    return _serve_one(
        args,
        lambda config, db: SensorService(
            config, db, clock=SystemClock(), metrics=_sensor_metrics(config, one_shot=one_shot), once=args.once
        ),
    )


def _serve_one(args: argparse.Namespace, build: Callable[[Config, AsyncStore], Service]) -> int:
    """One service on its own connection until it ends (SIGTERM, or its one-shot pass)."""
    import anyio

    from agentd.services.shell import run_services

    config, db = _open(args)
    try:
        anyio.run(run_services, build(config, db))
    finally:
        db.close()
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Both services in one process, each with its own database connection (as under systemd)."""
    import anyio

    from agentd.services.dispatch import Dispatcher
    from agentd.services.sensing import SensorService
    from agentd.services.shell import run_services
    from agentd.store import AsyncStore

    config, dispatch_db = _open(args)
    sensors_db = AsyncStore(store_from(config))
    web_db = AsyncStore(store_from(config)) if config.web.enabled else None
    try:
        dispatcher = Dispatcher(config, dispatch_db, clock=SystemClock(), metrics=_dispatch_metrics(config))
        sensors = SensorService(config, sensors_db, clock=SystemClock(), metrics=_sensor_metrics(config))
        anyio.run(run_services, dispatcher, sensors, *_web(config, web_db))
    finally:
        for db in (dispatch_db, sensors_db, web_db):
            if db is not None:
                db.close()
    return 0


def _web(config: Config, db: AsyncStore | None) -> list[Service]:
    """The console beside the two services, when [web] enabled (docs/web.md)."""
    from agentd.install.neighbours import neighbour_run_users
    from agentd.web.service import WebService

    others = functools.partial(neighbour_run_users, config)
    return [] if db is None else [WebService(config, db, clock=SystemClock(), beside=True, run_users=others)]


def _dispatch_metrics(config: Config, *, one_shot: bool = False) -> DispatchMetrics | NullMetrics:
    """A one-shot run (--until-idle) serves no metrics unless asked: it would take the port of the
    agent's own service, and nothing scrapes a process that is about to exit."""
    from agentd.outlook.metrics import dispatch_metrics

    enabled = config.metrics.enabled and not one_shot
    return dispatch_metrics(enabled, config, SystemClock())


def _sensor_metrics(config: Config, *, one_shot: bool = False) -> SensorMetrics | NullMetrics:
    from agentd.outlook.metrics import sensor_metrics

    enabled = config.metrics.enabled and not one_shot
    return sensor_metrics(enabled, config, SystemClock())
