"""The task page in plain words (docs/web.md, "A task's page"): the state the one state function gives
(agentd/outlook/taskstate.py) said as words, the verbs that apply to the task now (the same answer gives
its buttons and refuses a forced POST of any other), each attempt's outcome, and JSON an operator reads."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from markupsafe import Markup, escape

from agentd.clock import parse_ts

# A state's words (the machine word stays in the page's title attribute and `data-state`). A state this
# map does not know yet is shown as its own words, underscores as spaces.
STATE_WORDS: dict[str, str] = {
    "queued": "Waiting to run",
    "retrying": "Waiting to retry",
    "preparing": "Starting",
    "running": "Running",
    "streaming": "Running",
    "cancelling": "Canceling",
    "lost": "Lost",
    "completed": "Completed",
    "failed": "Failed",
    "timed_out": "Timed out",
    "blocked": "Blocked",
    "cancelled": "Canceled",
    "waiting_permission": "Waiting for approval",
    "waiting_call": "Waiting for approval of a tool call",
    "waiting_reset": "Waiting for a limit to reset",
    "waiting_resource": "Waiting for its budget or a provider's reset",
    "paused": "Paused",
}

# An attempt's outcome (the `outcome` its task_attempt_finished event recorded), in words.
OUTCOME_WORDS: dict[str, str] = {
    "completed": "completed",
    "retryable_failure": "failed, to be retried",
    "permanent_failure": "failed",
    "blocked": "blocked",
    "operator_canceled": "canceled",
}

# Every verb the page may offer, in the order its buttons stand, with the word on the button.
VERB_WORDS: dict[str, str] = {
    "approve": "Approve",
    "deny": "Deny",
    "resume": "Resume",
    "pause": "Pause",
    "cancel": "Cancel",
    "retry": "Retry",
    "edit": "Edit",
    "link": "Link",
    "unlink": "Unlink",
    "complete": "Complete",
    "fail": "Fail",
}
WAITING = ("pending", "retryable_failure")
RETRYABLE = ("permanent_failure", "blocked", "operator_canceled")  # agentd/store/tasks.py `TaskVerbs.retry_task`
PAYLOAD_ROWS = (4, 30)  # the payload editor's height: the pretty JSON's lines, within these


def state_words(state: str) -> str:
    return STATE_WORDS.get(state) or state.replace("_", " ").capitalize()


def verbs_for(task: dict[str, Any], paused: bool, approval: bool) -> tuple[str, ...]:
    """The verbs that apply to the task as it stands (its row as JSON, whether it is paused, whether an
    approval of it is pending: before its claim, or, ended, before its outcome's side effects apply):
    what the store and agentd/control/steering.py would accept, so the page offers no button that can
    only fail."""
    status = task["status"]
    found: list[str] = []
    if approval:
        found += ["approve", "deny"]
    if status in WAITING or status == "running":
        found.append("resume" if paused else "pause")
    if status in WAITING or (status == "running" and task.get("cancel_requested_at") is None):
        found.append("cancel")
    if status in RETRYABLE:
        found.append("retry")
    if status in WAITING:
        found += ["edit", "link", "unlink"]
        if not task.get("workflow_ref") and not task.get("awaiting_approval"):
            found += ["complete", "fail"]
    return tuple(found)


def not_applying(verb: str, task: dict[str, Any], state: str) -> str:
    """The one line a forced POST of a verb that does not apply gets."""
    return f"{VERB_WORDS.get(verb, verb)} does not apply to task {task['task_id']}: it is {state_words(state).lower()}"


def attempt_outcome(attempt: dict[str, Any], recorded: str | None) -> str:
    """How an attempt ended, in words: its recorded outcome, or (an attempt older than that record) what
    its row says; never its exit status alone (a process that exited 0 may still have failed its gate)."""
    if attempt.get("ended_at") is None:
        return "running"
    if attempt.get("termination_reason") == "timeout":
        return "timed out"
    if recorded is not None:
        return OUTCOME_WORDS.get(recorded, recorded.replace("_", " "))
    if attempt.get("retry_class") == "retryable":
        return "failed, to be retried"
    if attempt.get("retry_class") == "permanent" or attempt.get("exit_status") != "ok":
        return "failed"
    return "ended"


def pretty(value: Any) -> str:
    """JSON as an operator reads it: indented, keys in their order, non-ASCII as written."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def payload_rows(text: str) -> int:
    low, high = PAYLOAD_ROWS
    return max(low, min(high, text.count("\n") + 2))


def pretty_text(text: str) -> str:
    """A file's text pretty-printed when it is JSON (one object or array), else as it is."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return text
    try:
        return pretty(json.loads(stripped))
    except (ValueError, RecursionError):
        return text


CLI_TEXT = re.compile(r"`([^`\n]{1,200})`")
STORED_TIME = re.compile(r"\b(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?Z\b")


def with_code(text: str | None) -> Markup:
    """A sentence written for the terminal, for a page: escaped, each `command` between backticks as
    <code>, each stored time (agentd/clock.py format_ts) to the second."""
    if not text:
        return Markup("")
    escaped = STORED_TIME.sub(r"\1 \2 UTC", str(escape(text)))
    return Markup(CLI_TEXT.sub(lambda m: f"<code>{m.group(1)}</code>", escaped))


def page_context(shown: dict[str, Any], now: datetime) -> dict[str, Any]:
    """What task.html shows beyond `task_view` (agentd/web/views.py): the state in words, the verbs that
    apply, the payload as the editor holds it, and whether the task waits for a later time."""
    task, state = shown["task"], shown["state"]["status"]
    payload = pretty(task["payload"])
    waits = task["status"] in WAITING and parse_ts(task["available_at"]) > now
    return {
        "state_word": state_words(state),
        "verbs": verbs_for(task, shown["pause"] is not None, shown["approval_scope"] is not None),
        "payload_text": payload,
        "payload_rows": payload_rows(payload),
        "outcome_text": pretty(task["outcome"]) if task.get("outcome") else None,
        "available_later": waits,
        "outputs": list((task.get("outcome") or {}).get("artifact_paths") or []),
    }
