"""`agentd replay ATTEMPT_ID` (or a task's number: its last finished attempt): re-run a finished script
attempt from its evidence (agentd/attempt/replay.py).

Exit 0 identical, 1 different or not replayable (neither is a pass), 2 bad input.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from agentd.cli.common import add_command, agent_store, print_json, wants_json
from agentd.edge import printable, whole_number
from agentd.errors import InputError

if TYPE_CHECKING:
    from agentd.attempt.replay import Difference, Replay
    from agentd.store import Store

TASK_NUMBER_MAX = 10**18  # a whole number below this is a task's; an attempt's id is a 26-character ULID


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "replay",
        cmd_replay,
        "re-run a finished script attempt from its evidence in a scratch dir and compare; "
        "exit 0 identical, 1 different or not replayable, 2 bad input",
    )
    parser.add_argument(
        "attempt_id",
        metavar="ATTEMPT_ID|TASK",
        help="the attempt (`agentd task show ID` lists them), or a task's number: its last finished attempt",
    )


def cmd_replay(args: argparse.Namespace) -> int:
    import anyio

    from agentd.attempt.replay import Replay, plan_replay, run_replay

    with agent_store(args, readonly=True) as (config, store):
        attempt_id, chosen = attempt_named(store, args.attempt_id)
        planned = plan_replay(config, store, attempt_id)
    result = planned if isinstance(planned, Replay) else anyio.run(run_replay, planned)
    if wants_json(args):
        print_json({**result.as_dict(), **({"chosen": chosen} if chosen else {})})
    else:
        for line in [*([f"note: {chosen}"] if chosen else []), *text_lines(result)]:
            print(printable(line))
    return 0 if result.verdict == "identical" else 1


def attempt_named(store: Store, given: str) -> tuple[str, str | None]:
    """The attempt `given` names, and what was chosen when it names a task (its last finished attempt)."""
    number = whole_number(given)
    if number is None or number >= TASK_NUMBER_MAX:
        return given, None
    task = store.get_task_or_raise(number)
    finished = [a for a in store.attempts_of(task.task_id) if a.ended_at is not None]
    if not finished:
        raise InputError(f"task {task.task_id} has no finished attempt to replay (`agentd task show {task.task_id}`)")
    last = finished[-1]
    return last.attempt_id, (
        f"replaying task {task.task_id}'s last finished attempt: attempt {last.attempt_number}, {last.attempt_id} "
        "(name another by its id)"
    )


def text_lines(result: Replay) -> list[str]:
    """One line per difference, then the notes, then the verdict."""
    lines = [difference_line(d) for d in result.differences]
    lines += [f"note: {note}" for note in result.notes]
    if result.verdict == "not_replayable":
        lines.append(f"not_replayable: attempt {result.attempt_id}: {result.reason}")
    elif result.differences:
        lines.append(f"different: attempt {result.attempt_id}: {len(result.differences)} difference(s)")
        if result.finding is not None:
            lines.append(
                f"finding: {result.finding['failure_type']}: attempt {result.attempt_id} did not do the same again "
                "(TraceCore failure_type, seed 001 §4.6)"
            )
    else:
        lines.append(f"identical: attempt {result.attempt_id}")
    return lines


def difference_line(difference: Difference) -> str:
    if difference.expected is None and difference.found is None:
        return f"{difference.where}: {difference.what}"
    expected, found = (v if v is not None else "(absent)" for v in (difference.expected, difference.found))
    return f"{difference.where}: {difference.what}: expected {expected}, found {found}"
