"""The long-running services: `agentd dispatch`."""

from __future__ import annotations

import argparse
import functools
import logging
from typing import Any

import anyio

from agentd.cli.common import add_command, config_from, store_from
from agentd.clock import SystemClock
from agentd.dispatch import Dispatcher
from agentd.store import AsyncStore


def register(commands: Any) -> None:
    dispatch = add_command(
        commands,
        "dispatch",
        cmd_dispatch,
        "run the dispatcher: lock, boot sweep, then one verified attempt at a time until SIGTERM",
    )
    dispatch.add_argument("--until-idle", action="store_true", help="drain what is claimable now, then exit 0")
    dispatch.set_defaults(log_level=logging.INFO)


def cmd_dispatch(args: argparse.Namespace) -> int:
    config = config_from(args)
    db = AsyncStore(store_from(config))
    try:
        dispatcher = Dispatcher(config, db, clock=SystemClock())
        anyio.run(functools.partial(dispatcher.run, until_idle=args.until_idle))
    finally:
        db.close()
    return 0
