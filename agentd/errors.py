"""The flat error hierarchy; each error's message says what went wrong and how to fix it.

The CLI maps `exit_code`: 2 for bad input or configuration, 1 for a runtime failure.
A model's failure is data (a TaskOutcome), never one of these.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from agentd import frozen_value


class AgentdError(Exception):
    """Base of every error agentd raises on purpose."""

    exit_code = 1


class InputError(AgentdError):
    """The caller gave something agentd cannot accept; nothing was written."""

    exit_code = 2


class NotFound(InputError):
    """A task, workflow, skill or schedule the caller named does not exist."""


@frozen_value
class Problem:
    """One configuration problem: where it is and what was expected."""

    source: str  # the file (or environment variable) holding the bad value
    key_path: str  # dotted path inside it, e.g. "adapters[1].timeout_ms"; "" for the whole file
    message: str  # what was expected, what was found

    def __str__(self) -> str:
        where = f"{self.source}: {self.key_path}" if self.key_path else self.source
        return f"{where}: {self.message}"


class ConfigError(InputError):
    """The identity TOML (or its environment overrides) is invalid; every problem is listed."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class SchemaMismatch(AgentdError):
    """The database's applied migrations do not match this code."""


class DispatchLocked(AgentdError):
    """Another live dispatcher holds the dispatch lock."""


class StorageError(AgentdError):
    """The state dir or its database cannot be used (full, read-only, unreadable, locked, damaged).

    One line naming the path, what is wrong and what to do. Operator commands exit 2 (nothing was
    written); the services exit 1 so systemd restarts them once the disk is usable again.
    """

    exit_code = 2

    def __init__(self, path: object, problem: str, fix: str) -> None:
        super().__init__(f"{path}: {problem}; {fix}")
        self.path, self.problem = path, problem


class Interrupted(AgentdError):
    """A signal (Ctrl-C, SIGTERM, SIGHUP) asked a command to stop; it stopped between two transactions,
    or before its first (`said` adds what became of its work). Exit 128 + the signal's number, as a shell
    reports a command the signal ended."""

    def __init__(self, signal_name: str, said: str | None = None) -> None:
        super().__init__(f"stopped by {signal_name}" + (f"; {said}" if said else ""))
        self.exit_code = 128 + signal.Signals[signal_name].value


class UnreadableRow(AgentdError):
    """A database row no record can be made of: the database was changed outside agentd (a row edited by
    hand, a restore of another version's file). One line naming the row and what does not fit; a
    service records it as the failure of what it was doing (a tick, an attempt) and goes on."""

    def __init__(self, what: str) -> None:
        said = "it was changed outside agentd; `agentd evidence verify` names what the event chain says"
        super().__init__(f"{what}: {said}")


# What ends a service (exit 1: systemd restarts it once the disk is usable); anything else a service
# records as one tick's, one run's or one attempt's failure and goes on.
FATAL = (StorageError,)


@dataclass
class Contained:
    """What a `contained` block caught: None while it went well."""

    error: Exception | None = None


@contextmanager
def contained(log: logging.Logger | None, message: str = "", *args: object) -> Iterator[Contained]:
    """A block whose failure is one tick's, one run's or one attempt's own: anything but FATAL is
    logged with its traceback (`message % args`; not when `log` is None; an UnreadableRow in one line)
    and handed back for the caller to record; FATAL (and cancellation, which is no Exception) goes on up
    and ends the service."""
    caught = Contained()
    try:
        yield caught
    except FATAL:
        raise
    except UnreadableRow as exc:  # the data's fault, said in one line: a traceback would add nothing
        if log is not None:
            log.error("%s: %s", message % args if args else message, exc)
        caught.error = exc
    except Exception as exc:
        if log is not None:
            log.exception(message, *args)
        caught.error = exc


class DatabaseGone(StorageError):
    """The database file a process opened was deleted or replaced under it: whatever it wrote now would
    reach no one (an unlinked inode) or fork the history (another file). A service exits 1 at once."""


class DatabaseBehind(AgentdError):
    """The database is older than what happened (a restored backup, a lost -wal): attempt folders it does
    not know, or a chain head behind the one agentd published outside it. The services refuse to act
    until the operator accepts it (`agentd evidence accept-rollback`); exit 2, so systemd does not
    restart them in a loop."""

    exit_code = 2
