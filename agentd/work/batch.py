"""`agentd task add --batch`: JSON lines, each one task intent judged exactly as `agentd task add` judges
its flags (the TaskIntent record, the operator's source, `admit_task` with its payload schema). Every
line is judged before anything is written: one bad line and nothing is (docs/operate.md, "Many tasks at
once"); then the tasks are written CHUNK lines per transaction, and a write that fails part way says
which lines were written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any, Generic, TypeVar

from pydantic import ValidationError

from agentd import frozen_value
from agentd.config import Config
from agentd.edge import Refused, json_kind
from agentd.edge import loads as load_json
from agentd.errors import AgentdError, InputError, Interrupted
from agentd.process.privilege import operator_source
from agentd.records import NewTask, TaskIntent
from agentd.store import Store
from agentd.store.base import no_cycle_collection
from agentd.work.intake import admit_task

CHUNK = 500  # tasks (non-blank lines) per transaction: bounds how long a batch holds the write lock
MAX_TASKS = 100_000  # per batch: every judged task is held in memory until the writing starts
MAX_LINE_BYTES = 2 * 1024 * 1024  # a payload's 1 MiB and a description's 64 KiB fit with room to spare
MAX_SKIPPED_BYTES = 64 * 1024 * 1024  # an overlong line is skipped this far to report the lines after it
MAX_LINES = 10 * MAX_TASKS  # blank and bad lines included: an input that never ends is not read forever
SHOWN_PROBLEMS = 20  # bad lines named in the refusal; the rest are counted

T = TypeVar("T")


@frozen_value
class BadLine:
    number: int
    reason: str


@dataclass
class Judged(Generic[T]):
    """Every line judged: what each good line made (with its line number), the lines refused."""

    tasks: list[tuple[int, T]] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)
    lines: int = 0  # read, blank ones included


@frozen_value
class Written:
    """One transaction's tasks: the line numbers they came from, their ids."""

    lines: list[int]
    task_ids: list[int]


def read_lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes | None]]:
    """(line number, its bytes without the line end) for each line; None for a line longer than
    MAX_LINE_BYTES, which is skipped to its end without holding it. InputError (nothing is written) past
    MAX_LINES lines, or for a line still going after MAX_SKIPPED_BYTES (`--batch /dev/zero`)."""
    number = 0
    while line := stream.readline(MAX_LINE_BYTES + 1):
        number += 1
        if number > MAX_LINES:
            raise InputError(f"more than {MAX_LINES:,} lines in one batch; split the input (nothing was written)")
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            skipped = len(line)
            while (rest := stream.readline(1 << 20)) and not rest.endswith(b"\n"):
                skipped += len(rest)
                if skipped > MAX_SKIPPED_BYTES:
                    raise InputError(
                        f"line {number}: over {MAX_SKIPPED_BYTES:,} bytes and no end in sight; stopped reading "
                        "(nothing was written)"
                    )
            yield number, None
            continue
        yield number, line.rstrip(b"\r\n")


def judge_lines(
    lines: Iterable[tuple[int, bytes | None]],
    config: Config,
    now: datetime,
    *,
    source: str,
    require_approval: bool = False,
) -> Judged[NewTask]:
    """Each line on its own: a task `agentd task add` would enqueue, or the reason it would not. Blank
    lines are skipped. `source`: the source of the lines that name none, as `operator_source` made it
    from --source (judged once, by the caller)."""
    return judge_each(lines, lambda raw: judge_line(raw, config, now, source, require_approval))


def judge_each(lines: Iterable[tuple[int, bytes | None]], judge: Callable[[bytes], T]) -> Judged[T]:
    """Every non-blank line through `judge` (InputError: the line is bad, and why), the cyclic GC paused;
    `fleet submit --batch` judges its lines with this too."""
    judged: Judged[T] = Judged()
    with no_cycle_collection():
        for number, raw in lines:
            judged.lines = number
            try:
                if raw is None:
                    raise InputError(f"longer than {MAX_LINE_BYTES:,} bytes; a task intent is at most ~1.1 MiB")
                if raw.strip():
                    judged.tasks.append((number, judge(raw)))
            except InputError as exc:
                judged.bad.append(BadLine(number, str(exc)))
            if len(judged.tasks) > MAX_TASKS:
                raise InputError(f"more than {MAX_TASKS:,} tasks in one batch; split the file (nothing was written)")
    return judged


def line_object(raw: bytes, what: str) -> dict[str, Any]:
    """A line's JSON object; InputError for bytes that are not UTF-8, JSON or an object (`what` it should be)."""
    try:
        data = load_json(raw.decode(), "line")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    except Refused as exc:
        raise InputError(str(exc).removeprefix("line: ")) from None
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object ({what}), found {json_kind(data)}")
    return data


def judge_line(raw: bytes, config: Config, now: datetime, source: str, require_approval: bool) -> NewTask:
    """One line as `agentd task add` judges its flags; InputError naming the field and what was expected."""
    data = line_object(raw, "a task intent")
    if "workflow_ref" in data:  # the one intent field `task add` has no flag for: a workflow's step is the engine's
        raise InputError("workflow_ref: only the workflow engine creates workflow tasks; propose a workflow instead")
    if "source" not in data:
        data["source"] = source
    elif isinstance(data["source"], str):  # anything else: the record says what a source is
        data["source"] = _source(data["source"])
    try:
        intent = TaskIntent.model_validate(data)
    except ValidationError as exc:
        raise InputError(field_problems(exc)) from None
    return admit_task(intent, config, now, trusted=True, require_approval=require_approval)


def _source(given: str) -> str:
    """A line's own source, as `task add --source` takes one: agentd's own namespaces refused ("" is
    operator:<you>)."""
    try:
        return operator_source(given)
    except InputError as exc:
        raise InputError(str(exc).replace("--source:", "source:", 1)) from None


def field_problems(exc: ValidationError) -> str:
    """A refused intent in its fields' words: `priority: input should be less than or equal to 10, found 11`."""
    problems = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"]) or "line"
        message = str(err["msg"]).removeprefix("Value error, ")
        found = "" if "found" in message or err["type"] == "missing" else f", found {_short(err.get('input'))}"
        problems.append(f"{where}: {message[0].lower()}{message[1:]}{found}")
    return "; ".join(problems)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}… ({len(text):,} characters)"


def refusal(judged: Judged[Any]) -> InputError:
    """The batch refused: every bad line by number (the first SHOWN_PROBLEMS), nothing written."""
    shown = [f"  line {bad.number}: {bad.reason}" for bad in judged.bad[:SHOWN_PROBLEMS]]
    more = len(judged.bad) - len(shown)
    tail = [f"  … and {more:,} more bad lines"] if more else []
    head = f"{len(judged.bad):,} of {judged.lines:,} lines refused; nothing was written (fix them and run it again):"
    return InputError("\n".join([head, *shown, *tail]))


@dataclass
class Writing:
    """What was written, one Written per committed transaction, and the error that stopped it (if any)."""

    written: list[Written] = field(default_factory=list)
    failed: AgentdError | None = None

    @property
    def task_ids(self) -> list[int]:
        return [task_id for done in self.written for task_id in done.task_ids]

    def resume_note(self, total: int) -> str:
        """For an operator after a failed write: which lines are in, where to resume."""
        if not self.written:
            return "nothing of the batch was written"
        last, count = self.written[-1].lines[-1], len(self.task_ids)
        return (
            f"lines 1–{last} were written ({count:,} of {total:,} tasks: {id_ranges(self.task_ids)}); "
            f"the lines after {last} were not: resume from line {last + 1}"
        )


def write(
    store: Store,
    tasks: list[tuple[int, NewTask]],
    now: datetime,
    by: str,
    on_written: Callable[[Written], None] | None = None,
    stop: Callable[[], str | None] = lambda: None,
) -> Writing:
    """The judged tasks, CHUNK per transaction, in line order. A transaction that fails leaves those
    before it written, and ends the writing: `failed` says why, `written` what is in. `stop` (which
    signal asked, if one did: cli/common.py stop_between) is asked before each transaction."""
    writing = Writing()
    for start in range(0, len(tasks), CHUNK):
        if (signal_name := stop()) is not None:
            writing.failed = Interrupted(signal_name)
            return writing
        chunk = tasks[start : start + CHUNK]
        try:
            ids = store.enqueue_tasks([new for _, new in chunk], now, event_payload={"by": by})
        except AgentdError as exc:  # storage trouble (a full disk, a lock held too long): reported, not raised
            writing.failed = exc
            return writing
        writing.written.append(Written([number for number, _ in chunk], ids))
        if on_written is not None:
            on_written(writing.written[-1])
    return writing


def id_ranges(task_ids: list[int]) -> str:
    """12–511, 600, 700–701: ids as the runs they form."""
    runs: list[list[int]] = []
    for task_id in task_ids:
        if runs and task_id == runs[-1][1] + 1:
            runs[-1][1] = task_id
        else:
            runs.append([task_id, task_id])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)
