"""`agentd …`: argument parsing and output only; every command calls the modules below it.

Exit codes: 0 ok, 2 bad input or configuration (nothing written), 1 runtime failure.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from agentd import __version__
from agentd.cli import harness, ops, queue, services, setup, work
from agentd.cli.common import COMMON, CommandError
from agentd.errors import AgentdError, ConfigError

COMMAND_MODULES = (setup, queue, work, harness, services, ops)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentd",
        description="An agent runtime: a durable task queue, one verified attempt at a time.",
        parents=[COMMON],
    )
    parser.add_argument("--version", action="version", version=f"agentd {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else getattr(args, "log_level", logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.handler(args) or 0)
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return exc.exit_code
    except (AgentdError, CommandError) as exc:
        print(f"agentd: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
