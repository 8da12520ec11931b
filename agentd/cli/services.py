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
    from agentd.outlook.metrics import DispatchMetrics, Metrics, NullMetrics, SensorMetrics
    from agentd.process.privilege import RunUser
    from agentd.services.ports import Held
    from agentd.services.shell import Service
    from agentd.store import AsyncStore, Store

logger = logging.getLogger("agentd.run")


def register(commands: Any) -> None:
    dispatch = add_command(
        commands,
        "dispatch",
        cmd_dispatch,
        "run the dispatcher: lock, boot sweep, then one verified attempt at a time until SIGTERM; "
        "`dispatch pause|resume` stops and restarts claiming",
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
    run.add_argument(
        "--free-ports",
        action="store_true",
        help="a configured port in use moves to a free one on the same host, and the ports are printed "
        "(what `make run` does); without it a port in use is refused",
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


def _open(args: argparse.Namespace, services: tuple[str, ...]) -> tuple[Config, AsyncStore, dict[str, Held]]:
    """The services' ports, bound first (a port in use: one line, exit 2, nothing started), the migrated
    database (a missing one is refused before anything is created: `init` and the units' `ExecStartPre=agentd
    migrate` make it), then the state dir's folders."""
    from agentd.cli.common import config_path_from
    from agentd.install.neighbours import refuse_neighbours
    from agentd.process.files import keep_workspace
    from agentd.process.privilege import (
        boundary_of,
        keep_capabilities_to_self,
        refuse_inside_attempt,
        require_switch,
        run_user,
    )
    from agentd.services.ports import hold_ports, ports_of
    from agentd.store import AsyncStore, init_state_dir

    config = config_from(args)
    refuse_neighbours(config)  # before keep_workspace opens the workspace to the run user
    what = "this command writes to the agent's database"  # as store_from says it, before any port is taken
    refuse_inside_attempt(config.dispatch.run_as, what, config.sensors.run_as)
    free, path = getattr(args, "free_ports", None), str(config_path_from(args))
    held = hold_ports(ports_of(config, services), path, free=bool(free), offer_free=free is not None)
    try:
        store = store_from(config)  # refused inside an attempt
    except BaseException:
        _let_go(held)
        raise
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
        _let_go(held)
        raise
    return config, AsyncStore(store), held


def _let_go(held: dict[str, Held]) -> None:
    for each in held.values():
        each.sock.close()


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
        () if one_shot else ("dispatch",),
        lambda config, db, held: Dispatcher(
            config,
            db,
            clock=SystemClock(),
            metrics=_dispatch_metrics(config, held, one_shot=one_shot),
            until_idle=args.until_idle,
        ),
    )


def cmd_sensors(args: argparse.Namespace) -> int:
    from agentd.services.sensing import SensorService

    one_shot = args.once and not args.metrics
    return _serve_one(
        args,
        () if one_shot else ("sensors",),
        lambda config, db, held: SensorService(
            config, db, clock=SystemClock(), metrics=_sensor_metrics(config, held, one_shot=one_shot), once=args.once
        ),
    )


def _serve_one(
    args: argparse.Namespace,
    services: tuple[str, ...],
    build: Callable[[Config, AsyncStore, dict[str, Held]], Service],
) -> int:
    """One service on its own connection until it ends (SIGTERM, or its one-shot pass)."""
    import anyio

    from agentd.services.shell import run_services

    config, db, held = _open(args, services)
    try:
        anyio.run(run_services, build(config, db, held))
    finally:
        db.close()
        _let_go(held)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Both services in one process, each with its own database connection (as under systemd)."""
    import anyio

    from agentd.services.dispatch import Dispatcher
    from agentd.services.sensing import SensorService
    from agentd.services.shell import AfterDispatch, run_services
    from agentd.store import AsyncStore

    config, dispatch_db, held = _open(args, ("dispatch", "sensors", "web"))
    sensors_db = AsyncStore(store_from(config))
    web_db = AsyncStore(store_from(config)) if config.web.enabled else None
    try:
        if args.free_ports:
            _print_ports(held)
        dispatcher = Dispatcher(config, dispatch_db, clock=SystemClock(), metrics=_dispatch_metrics(config, held))
        sensors = SensorService(config, sensors_db, clock=SystemClock(), metrics=_sensor_metrics(config, held))
        beside = [AfterDispatch(service, dispatcher) for service in (sensors, *_web(config, web_db, held))]
        anyio.run(run_services, dispatcher, *beside)
    finally:
        for db in (dispatch_db, sensors_db, web_db):
            if db is not None:
                db.close()
        _let_go(held)
    return 0


def _print_ports(held: dict[str, Held]) -> None:
    """Where each service listens, on stdout before anything starts (`make run` shows it): the console's
    URL is the one it serves, not the config's when that port was in use."""
    for each in sorted(held.values(), key=lambda h: h.port.key != "web"):  # the console first
        url = f"http://{each.address}/" + ("metrics" if each.port.key != "web" else "")
        note = f"  ({each.port.listen} was in use; {each.port.setting} names it)" if each.moved else ""
        print(f"  {each.port.what}: {url}{note}", flush=True)


def _web(config: Config, db: AsyncStore | None, held: dict[str, Held]) -> list[Service]:
    """The console beside the two services, when [web] enabled (docs/web.md), on the port held for it."""
    from agentd.install.neighbours import neighbour_run_users
    from agentd.web.service import WebService

    others = functools.partial(neighbour_run_users, config)
    sock = held["web"].sock if "web" in held else None
    return [] if db is None else [WebService(config, db, clock=SystemClock(), beside=True, run_users=others, held=sock)]


def _dispatch_metrics(
    config: Config, held: dict[str, Held], *, one_shot: bool = False
) -> DispatchMetrics | NullMetrics:
    """A one-shot run (--until-idle) serves no metrics unless asked: it would take the port of the
    agent's own service, and nothing scrapes a process that is about to exit."""
    from agentd.outlook.metrics import dispatch_metrics

    enabled = config.metrics.enabled and not one_shot
    metrics = dispatch_metrics(enabled, config, SystemClock())
    _hold(metrics, held.get("dispatch"))
    return metrics


def _sensor_metrics(config: Config, held: dict[str, Held], *, one_shot: bool = False) -> SensorMetrics | NullMetrics:
    from agentd.outlook.metrics import sensor_metrics

    enabled = config.metrics.enabled and not one_shot
    metrics = sensor_metrics(enabled, config, SystemClock())
    _hold(metrics, held.get("sensors"))
    return metrics


def _hold(metrics: Metrics | NullMetrics, held: Held | None) -> None:
    """`metrics` serves on the socket bound for it before the service started."""
    from agentd.outlook.metrics import Metrics

    if held is not None and isinstance(metrics, Metrics):
        metrics.held = held.sock
