"""The `agentd` command line: argument parsing and output only.

May import: records, config, gateway, process, store, work, evidence, outlook, adapters, attempt, control, archive,
services, web, backup.

May call: add_web_token, all_task_ids, attempt_usage, attempts_by_task, attempts_of, claim_order,
constitution_proposals, cost_totals, fleet_lease_of, follow_ups_of, get_constitution_proposal, get_task,
get_task_or_raise, get_workflow_or_raise, last_event_sequence, links_of, list_outbox, list_schedules, list_tasks,
list_workflows, live_workflow_states, pending_approvals, pending_calls, read_events, record_event, require_present,
revoke_web_token, seen_dedupe_keys, sensor_states, snapshot, spend_since, web_tokens, workflow_steps.

`agentd …`: argument parsing and output only; every command calls the modules below it.

Exit codes: 0 ok, 2 bad input or configuration (nothing written), 1 runtime failure, 130 Ctrl-C,
141 (128 + SIGPIPE, as a shell reports `cat | head`) when whoever read stdout has gone.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import functools
import io
import logging
import os
import select
import signal
import sqlite3
import sys
import time
from collections.abc import Sequence
from typing import Any

from agentd import __version__
from agentd.cli import (
    adapters,
    backup,
    completion,
    constitution,
    cost,
    demo_model,
    evidence,
    fleet,
    observe,
    ops,
    outbox,
    policy,
    queue,
    replay,
    retention,
    services,
    setup,
    steer,
    version,
    web,
    work,
)
from agentd.cli.common import COMMON, CommandError, Parser, check_argv
from agentd.edge import cut_long_runs, json_escape, printable
from agentd.errors import AgentdError, ConfigError, StorageError
from agentd.faults import is_storage_fault, os_storage_error

COMMAND_MODULES = (
    setup,
    queue,
    observe,
    work,
    adapters,
    demo_model,
    cost,
    services,
    ops,
    retention,
    backup,
    evidence,
    replay,
    steer,
    policy,
    constitution,
    outbox,
    completion,
    fleet,
    web,
    version,
)


def report(exc: AgentdError | CommandError, *, service: bool = False) -> int:
    """Print an error the way an operator reads it; return its exit code."""
    if isinstance(exc, ConfigError):  # whatever a message echoes back, each line stays a line (cut_long_runs)
        for problem in exc.problems:
            print(printable(cut_long_runs(str(problem))), file=sys.stderr)
    else:
        print(f"agentd: {printable(cut_long_runs(str(exc)), keep_newlines=True)}", file=sys.stderr)
    if service and isinstance(exc, StorageError):
        return 1  # a service exits 1 on unusable storage: systemd restarts it once the disk is usable
    return exc.exit_code


class UtcFormatter(logging.Formatter):
    """Log times as the events show them: UTC with a Z (`2026-11-23T10:00:00.123Z`), not local time. A
    message is one line whatever it quotes: its newlines and other control characters are shown as
    escapes (edge.printable), so no text from outside (a receiver's answer, a request's path, a sensor's
    line) can forge a log line of its own or drive a terminal. A traceback follows on its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


def _leaves(group: BaseExceptionGroup[Any]) -> list[Any]:
    found: list[Any] = []
    for exc in group.exceptions:
        found += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return found


@functools.cache
def build_parser() -> argparse.ArgumentParser:
    """The whole command tree, built once per process (parsing leaves it as it was; the in-process
    test suite calls `main` thousands of times, and building it is most of a quick command's cost)."""
    parser = Parser(
        prog="agentd",
        description="An agent runtime: a durable task queue, one verified attempt at a time.",
        parents=[COMMON],
    )
    parser.add_argument("--version", action="version", version=f"agentd {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(commands)
    parser.set_defaults(root_parser=parser)  # `agentd completion` walks the tree it was parsed by
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `agentd` command; its exit code. A reader of stdout that went away (`agentd events |
    head`) ends any command here, quietly: no traceback, whatever the command was printing."""
    for stream in (sys.stdout, sys.stderr):  # a terminal or file whose encoding cannot hold a character
        if isinstance(stream, io.TextIOWrapper):  # (a Latin-1 locale, PYTHONIOENCODING=ascii): \u escapes
            stream.reconfigure(errors=UNENCODABLE)
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # what is still buffered meets a closed pipe here, not at interpreter exit
    except BrokenPipeError:
        if not stdout_reader_gone(_stdout_fd()):
            raise  # some other pipe or socket broke: that is a real failure
        return _stdout_closed()
    except BaseExceptionGroup as group:  # the same, met inside a service's task group
        if group.split(BrokenPipeError)[1] is not None or not stdout_reader_gone(_stdout_fd()):
            raise
        return _stdout_closed()


def _as_json_escapes(error: UnicodeError) -> tuple[str, int]:
    """What the output's encoding cannot hold, as JSON's \\uXXXX escapes (UTF-16 pairs past U+FFFF):
    text stays readable, and JSON output stays JSON with the same values."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return "".join(map(json_escape, error.object[error.start : error.end])), error.end


UNENCODABLE = "agentd.json-escapes"
codecs.register_error(UNENCODABLE, _as_json_escapes)


def stdout_reader_gone(fd: int | None) -> bool:
    """Whether `fd` is a pipe or socket whose reading end is closed (poll says POLLERR there)."""
    if fd is None:
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _stdout_fd() -> int | None:
    try:
        return sys.stdout.fileno()
    except (OSError, ValueError):  # replaced by something without a descriptor (a test's capture)
        return None


def _stdout_closed() -> int:
    """Point stdout at /dev/null, so the flush at interpreter exit has nowhere to fail ("Exception
    ignored … BrokenPipeError"), and return 128 + SIGPIPE."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 128 + signal.SIGPIPE


def _run(argv: Sequence[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # agentd's records are pydantic's alone: no plugin another package put in this environment may
    # watch or change their validation, and looking for plugins reads every installed package's
    # metadata (50-80 ms of each command, measured on the bench machine).
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        check_argv(argv)
    except AgentdError as exc:
        return report(exc)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except CommandError as exc:
        return report(exc)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(UtcFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else getattr(args, "log_level", logging.WARNING),
        handlers=[handler],
    )
    service = bool(getattr(args, "service", False))
    try:
        return int(args.handler(args) or 0)
    except (AgentdError, CommandError) as exc:
        return report(exc, service=service)
    except BaseExceptionGroup as group:  # a service's task group: report ours plainly, raise the rest
        ours, rest = group.split((AgentdError, CommandError))
        if rest is not None or ours is None:
            raise
        once = {str(exc): exc for exc in _leaves(ours)}  # both services of `agentd run` met it: one line
        return max(report(exc, service=service) for exc in once.values())
    except sqlite3.DatabaseError as exc:  # a fault a read met (writes are converted in the store)
        return report(StorageError("the database", str(exc), "check the state dir and its disk"), service=service)
    except OSError as exc:
        if not is_storage_fault(exc):
            raise
        return report(os_storage_error(exc), service=service)
    except KeyboardInterrupt:
        return 130
