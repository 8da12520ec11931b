"""`agentd task add --batch FILE|-`: many task intents, one per JSON line (agentd/work/batch.py judges
and writes them; this prints what happened)."""

from __future__ import annotations

import argparse
import sys

from agentd.cli.common import agent_store, input_name, opened_input, print_json, stop_between, wants_json
from agentd.clock import SystemClock
from agentd.errors import InputError

# Flags of `task add` that describe one task: with --batch each line gives its own.
PER_TASK = {
    "task_type": "--type",
    "subject": "--subject",
    "description": "--description",
    "priority": "--priority",
    "skills": "--skill",
    "profile": "--profile",
    "adapter": "--adapter",
    "model": "--model",
    "artifacts": "--require-artifact",
    "delay": "--delay",
    "at": "--at",
}


def cmd_task_add_batch(args: argparse.Namespace) -> int:
    """Judge every line, write nothing if one is bad (exit 2); else write them 500 per transaction. Only
    the writes are guarded (cli/common.py stop_between): a signal while stdin is read ends it at once."""
    from agentd import control
    from agentd.process.privilege import operator_source
    from agentd.process.wake import poke
    from agentd.work import batch

    _refuse_per_task_flags(args)
    source = operator_source(args.source)  # the lines that name no source of their own get this one
    now = SystemClock().now()
    with agent_store(args) as (config, store), stop_between() as stop:  # a signal ends the reading at once
        with opened_input(args.batch, "--batch") as stream:
            judged = batch.judge_lines(
                batch.read_lines(stream), config, now, source=source, require_approval=args.require_approval
            )
        if judged.bad:
            raise batch.refusal(judged)
        writing = batch.write(store, judged.tasks, now, control.operator(), stop=stop.writes())
    if writing.written:
        poke(config.paths.state_dir)  # new work: wake the dispatcher now
    if writing.failed is not None:
        print(f"agentd: {writing.resume_note(len(judged.tasks))}", file=sys.stderr)
        raise writing.failed
    ids = writing.task_ids
    if wants_json(args):
        print_json(ids)
    elif ids:
        waiting = sum(
            1 for _, new in judged.tasks if new.approval_reason is not None
        )  # --require-approval or the type's
        held = (
            f"; {'all' if waiting == len(ids) else waiting} waiting for approval (`agentd approve`)" if waiting else ""
        )
        print(f"{len(ids):,} tasks enqueued from {input_name(args.batch)}: tasks {batch.id_ranges(ids)}{held}")
    else:
        print(f"no tasks in {input_name(args.batch)} (only blank lines)")
    return 0


def _refuse_per_task_flags(args: argparse.Namespace) -> None:
    given = [flag for name, flag in PER_TASK.items() if getattr(args, name, None) not in (None, [], False)]
    if args.payload != "{}":
        given.append("--payload")
    if given:
        raise InputError(f"{', '.join(given)}: not with --batch; each line gives its own task's fields")
