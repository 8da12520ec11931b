"""psycopg and the fleet's connection (docs/fleet.md): psycopg imported on first use, the connection string
read as libpq reads it, one bounded connection, and every failure as FleetUnavailable, whose message never
holds the string or its password."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agentd.errors import AgentdError, InputError
from agentd.redaction import Redactor


@functools.cache
def _psycopg() -> Any:
    """psycopg (the `fleet` extra), imported on first use: an agent without a fleet never pays its
    ~40 ms import at start-up. InputError saying how to get it where it is missing."""
    try:
        import psycopg
        import psycopg.rows
    except ImportError:
        raise InputError("the fleet needs psycopg: pip install 'agentd[fleet]'") from None
    return psycopg


# A service's connection gives up rather than hang: on a statement, a lock, or a peer that vanished
# (TCP keepalives notice a partition within about 25 s).
BOUNDED: dict[str, Any] = {
    "connect_timeout": 10,
    "options": "-c statement_timeout=15000 -c lock_timeout=5000 -c idle_in_transaction_session_timeout=30000",
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


def installed() -> bool:
    """True when psycopg (the `fleet` extra) is importable."""
    return importlib.util.find_spec("psycopg") is not None


class FleetUnavailable(AgentdError):
    """PostgreSQL could not be reached or dropped the connection: nothing was decided; try again later."""


def connect(dsn: str) -> Any:
    """One connection (autocommit: each verb opens its own short transaction).

    :raises FleetUnavailable: the connection string cannot be read, or the server cannot be reached;
        the message never holds the string's password.
    """
    psycopg = _psycopg()
    password = dsn_parts(dsn).get("password") or ""
    try:
        return psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row, **BOUNDED)
    except (psycopg.Error, UnicodeError, ValueError) as exc:  # UnicodeError: a host name IDNA cannot encode
        said = Redactor([password]).text(_first_line(exc))
        raise FleetUnavailable(f"cannot reach the fleet's PostgreSQL ({said})") from None


def dsn_parts(dsn: str) -> dict[str, str]:
    """A connection string's parameters, as libpq reads it (a URI or key=value pairs).

    :raises FleetUnavailable: libpq cannot read it, saying why in the fixed words of libpq's message
        only: what it quotes after them is the string itself, password and all, or the word it stopped
        at, which may be the password, and a quote inside that word hides where it ends.
    """
    psycopg = _psycopg()
    try:
        parts: dict[str, str] = psycopg.conninfo.conninfo_to_dict(dsn)
    except (psycopg.Error, UnicodeError) as exc:  # UnicodeError: a percent-encoded value that is not UTF-8
        said = _first_line(exc)
        why = next((words for words in LIBPQ_WORDS if said.startswith(words)), "libpq cannot parse it")
        if isinstance(exc, UnicodeError):
            why = "a %-encoded value that is not UTF-8"
        raise FleetUnavailable(
            f"the fleet's connection string is not one libpq reads ({why} …); expected "
            "postgresql://USER@HOST:PORT/DBNAME or key=value pairs such as host=… dbname=… user=…"
        ) from None
    return parts


# How libpq's messages for a string it cannot parse begin (fe-connect.c), before the part they quote.
LIBPQ_WORDS = (
    'missing "=" after',
    "unterminated quoted string",
    "invalid connection option",
    'end of string reached when looking for matching "]" in IPv6 host address in URI',
    "IPv6 host address may not be empty in URI",
    "unexpected character",
    'extra key/value separator "=" in URI query parameter',
    'missing key/value separator "=" in URI query parameter',
    "invalid URI query parameter",
    "invalid percent-encoded token",
    "forbidden value %00 in percent-encoded value",
    "invalid URI propagated to internal parser routine",
)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextmanager
def unavailable() -> Iterator[None]:
    """A connection that failed under the block is FleetUnavailable (the server rolled back what it
    had not committed: nothing of it happened)."""
    psycopg = _psycopg()
    try:
        yield
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        if isinstance(exc, psycopg.errors.QueryCanceled | psycopg.errors.LockNotAvailable):
            raise FleetUnavailable(f"the fleet's PostgreSQL took too long ({_first_line(exc)})") from None
        raise FleetUnavailable(f"lost the fleet's PostgreSQL ({_first_line(exc)})") from None
