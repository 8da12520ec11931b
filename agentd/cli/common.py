"""What every command shares: --config/--agent/--json, config loading and printing.

Cheap to import: every command's parser is built on each run, so the config, the store and
pydantic are imported by the functions that load them, and a command pays only for what it uses."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gettext
import json
import re
import signal
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar

from agentd.clock import SystemClock, moment_at, parse_duration
from agentd.edge import (
    INT64_MAX,
    NotJson,
    Refused,
    check_text,
    note_text,
    printable,
    quoted,
    visible,
    visible_json,
    whole_number,
)
from agentd.edge import loads as load_json
from agentd.errors import ConfigError, InputError, Interrupted

if TYPE_CHECKING:
    from pydantic import ValidationError

    from agentd.config import Config
    from agentd.store import Store


# argparse asks gettext for every string it builds (~40 per subcommand) and gettext searches the disk for
# catalogs at each ask, found or not: half of building agentd's parser. The answers cannot change within
# a process, so they are remembered (agentd ships no catalogs; a user's own locale still applies).
argparse._ = functools.lru_cache(maxsize=4096)(gettext.gettext)  # type: ignore[attr-defined]


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (`agentd: --limit: expected…`) and exit 2, and help
    ends with the command's examples (agentd/cli/examples.py)."""

    def format_help(self) -> str:
        from agentd.cli.examples import examples_text  # only when help is shown

        return super().format_help() + examples_text(self.prog)

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("agentd").strip()
        message = did_you_mean(message)
        raise CommandError(f"{command + ': ' if command else ''}{message}; see `{self.prog} --help`")


INVALID_CHOICE = re.compile(r"argument \S+: invalid choice: '?([^' ]*)'? \(choose from (.*)\)$")


def did_you_mean(message: str) -> str:
    """argparse's "invalid choice" for a mistyped command or subcommand, as `unknown command 'stauts'; did you
    mean 'status'?` (difflib's close matches); with none close, the commands there are. Others as they are."""
    found = INVALID_CHOICE.fullmatch(message)
    if found is None:
        return message
    import difflib  # only for a mistyped command: every other run starts without it

    given, listed = found.group(1), [name.strip(" '") for name in found.group(2).split(",")]
    starts = [name for name in listed if len(given) > 1 and name.startswith(given)]
    close = [*starts, *(n for n in difflib.get_close_matches(given, listed, n=3, cutoff=0.6) if n not in starts)][:3]
    if close:
        return f"unknown command {given!r}; did you mean {' or '.join(map(repr, close))}?"
    return f"unknown command {given!r} (the commands: {', '.join(listed)})"


COMMON = Parser(add_help=False)
COMMON.add_argument(
    "--config",
    metavar="FILE",
    default=argparse.SUPPRESS,
    help="identity TOML (default: $AGENTD_CONFIG, /etc/agentd/AGENT.toml, the embedded example)",
)
COMMON.add_argument("--agent", metavar="NAME", default=argparse.SUPPRESS, help="read /etc/agentd/NAME.toml")
COMMON.add_argument(
    "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts instead of text for people"
)
COMMON.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging on stderr")


class CommandError(Exception):
    """A command-level refusal that is not a domain error (exit code chosen by the command)."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def whole_in(low: int, high: int | None, expected: str) -> Callable[[str], int]:
    """argparse type for a whole number from `low` to `high` (None: the record checks the top), in
    ASCII digits (edge.whole_number); anything else is refused saying what was `expected`."""

    def parse(text: str) -> int:
        value = whole_number(text)
        if value is None or value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {expected}, found {quoted(text)}")
        return value

    return parse


# A task, workflow or event id: an integer SQLite can hold, 1 or more.
record_id = whole_in(1, INT64_MAX, f"an id from 1 to {INT64_MAX}")
# --limit/--after/--last: 0 up to the largest SQLite integer.
count = whole_in(0, INT64_MAX, f"a whole number from 0 to {INT64_MAX}")
# --priority wherever a task is made: a number here, its bounds the record's (input_problems says them).
priority = whole_in(0, None, "1 (most urgent) to 10 (least urgent)")


def note(flag: str, *, required: bool = False) -> Callable[[str], str | None]:
    """argparse type for an operator's note or reason, by the rule every surface uses (edge.note_text)."""

    def parse(text: str) -> str | None:
        try:
            return note_text(text, flag, required=required)
        except Refused as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{flag}: ")) from None

    return parse


def attempts(text: str) -> int:
    """argparse type for --attempts: 1 to MAX_ATTEMPTS (0 is refused, not read as "the default")."""
    from agentd.control import MAX_ATTEMPTS  # only `task retry` takes --attempts, and it needs control anyway

    return whole_in(1, MAX_ATTEMPTS, f"1 to {MAX_ATTEMPTS} attempts")(text)


def duration(bare_unit: str) -> Callable[[str], float]:
    """argparse type for a duration (90s, 15m, 2h, 7d) in seconds; a bare number is in `bare_unit`
    (minutes for --delay, seconds for --every: what they meant before units existed)."""

    def parse(text: str) -> float:
        try:
            return parse_duration(text, bare_unit)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def moment(text: str) -> datetime:
    """argparse type for a point in time (agentd/clock.py `moment_at`: an ISO-8601 time, a date, or an age
    before now)."""
    try:
        return moment_at(text, SystemClock().now())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def json_object(text: str, flag: str) -> dict[str, Any]:
    """A JSON object option (--payload, --context), parsed by the same rules as every other edge."""
    try:
        value = load_json(text, flag)
    except NotJson as exc:
        raise InputError(f"{flag}: expected a JSON object, found invalid JSON ({exc.detail})") from None
    if not isinstance(value, dict):
        raise InputError(f"{flag}: expected a JSON object, found {type(value).__name__}")
    return value


FLAGS = {
    "task_type": "--type",
    "payload": "--payload",
    "priority": "--priority",
    "available_at": "--at",
    "schedule": "--delay",
    "skill_ids": "--skill",
    "requested_profile_id": "--profile",
    "requested_adapter_id": "--adapter",
    "requested_model": "--model",
    "schedule_id": "ID",
    "interval_seconds": "--every",
    "evidence_requirements": "--require-artifact",
}


def input_problems(exc: ValidationError) -> str:
    """A refused task or schedule in the words of its command line, the same for every command:
    `--priority: expected 1 (most urgent) to 10 (least urgent), found 0`."""
    problems = []
    for err in exc.errors():
        loc = [str(part) for part in err["loc"] if part != "task"]  # schedule add's task fields are its own flags
        flag = FLAGS.get(loc[0], "--" + loc[0].replace("_", "-")) if loc else "input"
        if err["type"] == "string_pattern_mismatch":
            allowed = "letters, digits and . _ : - (starting with a letter or digit)"
            problems.append(f"{flag}: expected {allowed}, found {err['input']!r}")
        elif loc and loc[0] == "priority":
            problems.append(f"--priority: expected 1 (most urgent) to 10 (least urgent), found {err.get('input')!r}")
        else:
            message = str(err["msg"]).removeprefix("Value error, ")
            found = "" if "found" in message else f", found {err.get('input')!r}"
            problems.append(f"{flag}: {message[0].lower()}{message[1:]}{found}")
    return "; ".join(problems)


def check_argv(argv: Sequence[str]) -> None:
    """Every argument must be valid UTF-8 text (a lone surrogate is what invalid bytes decode to)."""
    for index, arg in enumerate(argv):
        where = argv[index - 1] if index and argv[index - 1].startswith("-") else f"argument {index + 1}"
        check_text(arg, where)


def add_command(group: Any, name: str, handler: Any, help_text: str, **kwargs: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = group.add_parser(
        name, parents=[COMMON], help=help_text, description=help_text, **kwargs
    )
    parser.set_defaults(handler=handler)
    return parser


def option(args: argparse.Namespace, name: str, default: Any = None) -> Any:
    return getattr(args, name, default)


def wants_json(args: argparse.Namespace) -> bool:
    return bool(option(args, "json", False))


def config_path_from(args: argparse.Namespace) -> Path:
    """The identity TOML the command acts on (--config, --agent, $AGENTD_CONFIG, /etc/agentd), saying
    so on stderr when it is the embedded default."""
    from agentd.cli.fast.cache import resolve_config_path

    path, notice = resolve_config_path(option(args, "config"), option(args, "agent"))
    if notice and not wants_json(args) and not option(args, "notice_shown"):
        print(f"agentd: {notice}", file=sys.stderr)
        args.notice_shown = True  # a fast path that hands over to the full one: said once
    return path


def config_from(args: argparse.Namespace) -> Config:
    """The config, loaded and checked in full."""
    from agentd.work.validation import load_config

    return load_config(config_path_from(args))


def store_from(config: Config, *, readonly: bool = False) -> Store:
    """The agent's database. Every command that may write it (each control verb, each service) is
    refused inside an attempt, before anything is read (docs/install-and-deploy.md, "The boundary")."""
    from agentd.process.privilege import refuse_inside_attempt
    from agentd.store import open_store, own_state_dir

    if not readonly:
        what = "this command writes to the agent's database"
        refuse_inside_attempt(config.dispatch.run_as, what, config.sensors.run_as)
    store = open_store(config.db_path, SystemClock(), readonly=readonly)
    try:
        own_state_dir(config.paths.state_dir, config.agent.agent_id, bind=not readonly)
    except BaseException:
        store.close()
        raise
    if not readonly:  # a command that only looks leaves the state dir as it found it (a copy stays a copy)
        from agentd.cli.fast.cache import write_view

        write_view(config)  # for the next command's fast path (agentd/cli/fast/cache.py)
    return store


def config_view(args: argparse.Namespace) -> dict[str, Any]:
    """What a reading command needs of the config: its cached view (agentd/cli/fast/cache.py) while that
    is still exactly what a full load gives, else the view of a full load. One implementation per command
    reads it either way; only the first read after an edit pays for pydantic (docs/decisions.md, "One
    shape per fact")."""
    from agentd.cli.fast.cache import read_view

    path = config_path_from(args)
    view = read_view(path)
    if view is not None:
        return view
    from agentd.cli.fast.view import view_of
    from agentd.work.validation import load_config

    return view_of(load_config(path))


def full_config(view: dict[str, Any]) -> Config:
    """The whole config behind a view, for what a view does not hold (a budget's hold)."""
    from agentd.work.validation import load_config

    return load_config(Path(view["config_path"]))


@contextmanager
def viewed_store(args: argparse.Namespace) -> Iterator[tuple[dict[str, Any], Store]]:
    """The config's view and the agent's database opened read-only, closed when the command is done with
    it: what `store_from` checks, from the view."""
    from agentd.store import open_store, own_state_dir

    view = config_view(args)
    store = open_store(Path(view["database"]), SystemClock(), readonly=True)
    try:
        own_state_dir(Path(view["state_dir"]), view["agent_id"], bind=False)
        yield view, store
    finally:
        store.close()


@contextmanager
def agent_store(args: argparse.Namespace, *, readonly: bool = False) -> Iterator[tuple[Config, Store]]:
    """The agent's config and its open store, closed when the command is done with it. Commands
    that only look open it read-only: they work on a read-only copy and can never write."""
    config = config_from(args)
    store = store_from(config, readonly=readonly)
    try:
        yield config, store
    finally:
        store.close()


T = TypeVar("T")


def store_command(
    args: argparse.Namespace,
    act: Callable[[Config, Store], T],
    text: Callable[[T], object],
    *,
    readonly: bool = False,
    as_json: Callable[[T], Any] | None = None,
) -> int:
    """The pattern of every command on the agent's database, written once: open the store (read-only for
    a command that only looks), `act` on it, close it, then print what it returned: JSON with --json
    (`as_json(result)`, else the result itself), else `text(result)`. A refusal raised by `act` is reported
    by agentd/cli/__init__.py (exit 2 for bad input). Exit 0."""
    with agent_store(args, readonly=readonly) as (config, store):
        result = act(config, store)
    if wants_json(args):
        print_json(result if as_json is None else as_json(result))
    else:
        text(result)
    return 0


def check_live_workflows(config: Config, store: Store) -> None:
    """Refuse a config that would strand a live workflow in a state it no longer has."""
    from agentd.work.validation import stranded_workflows

    problems = stranded_workflows(config, store.live_workflow_states())
    if problems:
        raise ConfigError(problems)


def to_jsonable(value: Any) -> Any:
    """A record as JSON values: a stored one (a plain value: agentd/records/stored.py `record_json`), or one
    pydantic dumps, asked by its method, so printing plain values never imports pydantic."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        from agentd.records import record_json

        return record_json(value)
    if callable(getattr(value, "model_dump", None)) and not isinstance(value, type):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


def print_json(value: Any) -> None:
    """JSON for scripts, readable by people: text as itself, except what `printable` escapes, which is
    written as a JSON \\u escape (the same value for a parser; visible on a terminal)."""
    print(visible_json(json.dumps(to_jsonable(value), indent=2, ensure_ascii=False)))


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    text_rows = [["" if cell is None else printable(str(cell)) for cell in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in text_rows]) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in text_rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def held_input_words(call: dict[str, Any], *, whole: bool = False) -> str:
    """A tool call held for a person as a line says its input (docs/policy.md, "Asking a person"): its length
    and sha256 (the first 12 digits; all 64 and the input itself, escaped, when `whole`)."""
    if call.get("input_sha256") is None:
        return "input not kept (held before agentd kept inputs)"
    digest = call["input_sha256"] if whole else f"{call['input_sha256'][:12]}…"
    words = f"input {call['input_chars']:,} chars, sha256 {digest}"
    return f"{words}: {visible(call['input_json'])}" if whole else words


def print_fields(pairs: Iterable[tuple[str, Any]]) -> None:
    pairs = list(pairs)
    width = max((len(k) for k, _ in pairs), default=0)
    for key, value in pairs:
        if value is None or value == [] or value == {}:
            continue
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else str(value)
        print(f"{key.ljust(width)}  {printable(shown)}")


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, a service manager's stop, a closed terminal


class StopBetween:
    """What `stop_between` yields: `writes()` marks where the writes begin; called, it says which signal
    asked to stop since then (None: none did)."""

    def __init__(self) -> None:
        self.writing = False
        self.asked: str | None = None

    def __call__(self) -> str | None:
        return self.asked

    def writes(self) -> StopBetween:
        self.writing = True
        return self

    def handle(self, number: int, _frame: object) -> None:
        """A signal handler: before the writes, end the command here; during them, only take note."""
        name = signal.Signals(number).name
        if not self.writing:
            raise Interrupted(name, "nothing was written")
        self.asked = self.asked or name


@contextmanager
def stop_between() -> Iterator[StopBetween]:
    """For a command that reads its input, then writes it in several transactions (`task add --batch`,
    `fleet submit --batch`): only the writes are guarded. Until `writes()`, Ctrl-C, SIGTERM and SIGHUP end
    the command at once (exit 128 + the signal's number), however long a stdin stays open, and nothing is
    written; from then on they only note that a stop was asked, so the command stops between two
    transactions and can say exactly what is in, instead of dying between a commit and its report."""
    stop = StopBetween()
    previous = {number: signal.signal(number, stop.handle) for number in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextmanager
def opened_input(path: str, flag: str) -> Iterator[IO[bytes]]:
    """The operator's input file for `flag` (FILE, or - for stdin), read as bytes; InputError if unreadable."""
    if path == "-":
        yield sys.stdin.buffer
        return
    try:
        stream = open(path, "rb")  # noqa: SIM115 (closed below; the operator's own file)
    except OSError as exc:
        raise InputError(f"{flag}: cannot read {path!r}: {exc.strerror}") from None
    with stream:
        yield stream


def input_name(path: str) -> str:
    """How an input file is named in what a command prints."""
    return "stdin" if path == "-" else path
