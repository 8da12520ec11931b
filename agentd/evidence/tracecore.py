"""An attempt as a TraceCore v1.0 run artifact (seed 001), from its sealed evidence alone.

Pure: the manifest and the action trace in, the artifact out. `tracecore verify --run FILE
--strict-spec` (the tracecore package's own checker) accepts what this writes; tests hold it to that.

How agentd's terms map:
- run_id is the attempt's ULID and trace_id the ULID of the event that created the task, each
  written as the UUID with the same 128 bits (lossless both ways: `ulid_of_uuid`).
- task_ref is `<task type>@<task type version>` (`[task_types.X] version`, default 1): TraceCore's
  task and task version. The task's own inputs are in task_hash (the manifest's).
- agent_ref is `<agent>/<profile>@<variant id>`; agent_hash the agent definition's version.
- seed is 0: agentd does not seed its adapters (a model is not seeded; a script gets its payload).
- budgets: agentd's hard budget is the wall clock (the adapter's timeout); steps and tool calls are capped
  only where the harness allows it (claude's and hermes' max_turns), so `steps` and `tool_calls` report what
  the attempt used, or max_turns when that is larger; running out of turns is `budget_exhausted`.
- io_audit: what each step's tool shows of its IO (a file read or written, a command, a request), by its
  name (`io_audit_of`).
- failure_type comes from FAILURE_TYPES below; termination_reason stays agentd's own.
- validator is agentd's completion gate: its payload is the manifest's outcome, verbatim.
- artifact_hash is TraceCore's: sha256 over the canonical JSON (sorted keys, no spaces, UTF-8) of
  the artifact without run_id, trace_id, started_at, completed_at, wall_clock_elapsed_s and each
  step's action_ts, prefixed `sha256:`.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from typing import Any

SPEC_VERSION = "tracecore-spec-v1.0"
VOLATILE = ("run_id", "trace_id", "started_at", "completed_at", "wall_clock_elapsed_s")

# agentd's failure_type (the attempt's diagnostics) → TraceCore's taxonomy. A completed attempt has
# none. A gate failure over a path outside the workspace is a sandbox violation (see failure_type_of).
FAILURE_TYPES: dict[str, str] = {
    "timeout": "timeout",  # the adapter's timeout: the wall-clock budget
    "rate_limited": "budget_exhausted",  # the provider's quota ran out
    "max_turns": "budget_exhausted",  # the harness ran out of the turns the adapter allows (claude --max-turns)
    "resource_limit": "budget_exhausted",  # its own cgroup's limit on processes or memory ended it
    "budget_exceeded": "budget_exhausted",  # it was stopped as it passed its spending cap (docs/policy.md)
    "policy_violation": "sandbox_violation",  # a tool call ran without the tool policy's decision (docs/policy.md)
    "gate_failed": "logic_failure",  # claimed completed; the evidence did not hold it up
    "model_reported_failure": "logic_failure",  # the agent itself reported failure
    "evidence_unverified": "logic_failure",  # strict_evidence: the sealed evidence failed its check
    "no_outcome": "non_termination",  # ended without reporting an outcome
    "adapter_error": "non_termination",  # the harness failed before an outcome (HTTP 5xx, a crash)
    "start_error": "non_termination",  # the adapter could not be started
    "interrupted": "non_termination",  # the service stopped during it
    "operator_canceled": "non_termination",  # stopped from outside
    "crashed_runtime": "non_termination",  # agentd died during it (the boot sweep closed it)
    "internal_error": "non_termination",  # agentd itself failed during it
}
_OUTSIDE = re.compile(r"outside the workspace|leads outside")
_SLUG = re.compile(r"[^a-z0-9_\-]+")
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def uuid_of_ulid(ulid: str) -> str:
    """The UUID with the ULID's 128 bits."""
    value = 0
    for char in ulid.upper():
        value = value * 32 + _CROCKFORD.index(char)
    return str(uuid.UUID(int=value))


def ulid_of_uuid(text: str) -> str:
    value, chars = uuid.UUID(text).int, []
    for _ in range(26):
        value, digit = divmod(value, 32)
        chars.append(_CROCKFORD[digit])
    return "".join(reversed(chars))


def failure_type_of(manifest: dict[str, Any]) -> str | None:
    if manifest["outcome"]["next_status"] == "completed":
        return None
    agentd_type = manifest.get("failure_type")
    if agentd_type == "gate_failed" and any(_OUTSIDE.search(r) for r in manifest["outcome"].get("gate_reasons", [])):
        return "sandbox_violation"
    return FAILURE_TYPES.get(agentd_type or "", "non_termination")


def run_artifact(manifest: dict[str, Any], steps: list[dict[str, Any]], *, trace_ulid: str) -> dict[str, Any]:
    """The TraceCore artifact of one attempt: its sealed manifest and its action trace."""
    task_ref = manifest["task_ref"]
    agent = manifest["agent_ref"]
    used_tools = sum(1 for s in steps if s.get("kind") == "tool")
    max_turns = manifest["budgets"].get("max_turns") or 0
    budgets = {
        "steps": max(len(steps), max_turns),
        "tool_calls": max(used_tools, max_turns),
        "wall_clock_seconds": int(manifest["budgets"].get("timeout_s") or 0),
    }
    success = manifest["outcome"]["next_status"] == "completed"
    failure_type = failure_type_of(manifest)
    failure_reason = None if success else "; ".join(manifest["outcome"].get("gate_reasons") or []) or None
    validator = {
        "success": success,
        "termination_reason": manifest["termination_reason"],
        "failure_type": failure_type,
        "failure_reason": failure_reason,
        "metrics": {},
        "payload": manifest["outcome"],
    }
    adapter = manifest["adapter"]
    pin = manifest.get("model_pin")
    artifact: dict[str, Any] = {
        "spec_version": SPEC_VERSION,
        "runtime_identity": {"name": "agentd", "version": manifest["runtime_identity"]["agentd_version"]},
        "run_id": uuid_of_ulid(manifest["run_id"]),
        "trace_id": uuid_of_ulid(trace_ulid),
        "agent_ref": f"{agent['agent']}/{agent['profile']}@{agent['variant_id']}",
        "agent_hash": agent["variant"].get("agent_def_version"),
        "task_ref": f"{_slug(task_ref['task_type'])}@{task_ref.get('task_type_version') or 1}",
        "task_hash": manifest["task_hash"],
        "seed": 0,
        "budgets": budgets,
        "success": success,
        "termination_reason": manifest["termination_reason"],
        "failure_type": failure_type,
        "failure_reason": failure_reason,
        "steps_used": len(steps),
        "tool_calls_used": used_tools,
        "metrics": {"steps_used": len(steps), "tool_calls_used": used_tools},
        "started_at": manifest["started_at"],
        "completed_at": manifest["completed_at"],
        "wall_clock_elapsed_s": manifest["wall_clock_elapsed_s"],
        "harness_version": " ".join(p for p in (adapter["kind"], adapter.get("cli_version")) if p),
        "determinism": {
            "seed": 0,
            "tooling": {
                "models": [{k: pin[k] for k in ("provider", "model", "version")}] if pin else [],
                "mocks": [],
            },
        },
        "action_trace": _trace(
            steps,
            manifest,
            budgets,
            task_ref=f"{_slug(task_ref['task_type'])}@{task_ref.get('task_type_version') or 1}",
        ),
        "validator": validator,
    }
    artifact["artifact_hash"] = artifact_hash(artifact)
    return artifact


def artifact_hash(artifact: dict[str, Any]) -> str:
    """TraceCore's: sha256 over the stable payload (seed 001 §5.5)."""
    stable = {k: v for k, v in artifact.items() if k not in (*VOLATILE, "artifact_hash")}
    if "action_trace" in stable:
        stable["action_trace"] = [{k: v for k, v in e.items() if k != "action_ts"} for e in stable["action_trace"]]
    text = json.dumps(stable, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _trace(
    steps: list[dict[str, Any]], manifest: dict[str, Any], budgets: dict[str, int], *, task_ref: str
) -> list[dict[str, Any]]:
    """Each step as a TraceCore trace entry: what was observed (the budget left, the last action),
    the action (tool and argument digest), its result (digest), and the budget it spent."""
    entries: list[dict[str, Any]] = []
    left = {"steps": budgets["steps"], "tool_calls": budgets["tool_calls"]}
    task = {"id": task_ref, "description": None}
    last_action: dict[str, Any] | None = None
    last_result: dict[str, Any] | None = None
    for number, step in enumerate(steps, start=1):
        delta = {"steps": -1, "tool_calls": -1 if step.get("kind") == "tool" else 0}
        observation = {
            "step": number,
            "task": task,
            "last_action": last_action,
            "last_action_result": last_result,
            "budget_remaining": dict(left),
        }
        left = {k: max(left[k] + delta[k], 0) for k in left}
        action = {
            "type": step.get("kind"),
            "tool": step.get("tool"),
            "arguments_sha256": step.get("arguments_sha256"),
            "summary": step.get("summary"),
        }
        result = {"result_sha256": step.get("result_sha256"), "is_error": step.get("is_error")}
        entries.append(
            {
                "step": number,
                "action_ts": step.get("started_at") or step.get("ended_at") or manifest["started_at"],
                "observation": observation,
                "action": action,
                "result": result,
                "io_audit": io_audit_of(step),
                "budget_after_step": dict(left),
                "budget_delta": delta,
            }
        )
        last_action, last_result = action, result
    return entries


# The IO a step's tool shows (docs/determinism.md): what the harness's tool did, by its name, not what the
# kernel saw (agentd does not intercept an adapter's IO). Claude's, codex's and hermes's tool names.
FS_READ = ("Read", "Glob", "Grep", "LS", "NotebookRead", "read_file", "search_files")
FS_WRITE = ("Write", "Edit", "MultiEdit", "NotebookEdit", "write_file", "patch", "file_change")
EXEC = ("Bash", "BashOutput", "command_execution", "terminal", "execute_code", "script")
NET = ("WebFetch", "WebSearch", "web_search", "web_extract", "mcp_tool_call")


def io_audit_of(step: dict[str, Any]) -> list[dict[str, Any]]:
    """A step's io_audit entries (TraceCore's `type` fs | net | custom): a file read or written, a command run, a
    request sent; [] for a step that shows none (a message, a plan)."""
    tool = step.get("tool")
    if step.get("kind") == "command" or tool in EXEC:
        kind, op = "custom", "exec"
    elif tool in FS_READ or tool in FS_WRITE:
        kind, op = "fs", "read" if tool in FS_READ else "write"
    elif tool in NET:
        kind, op = "net", "request"
    else:
        return []
    return [
        {
            "type": kind,
            "op": op,
            "path": None,
            "host": None,
            "tool": tool,
            "arguments_sha256": step.get("arguments_sha256"),
        }
    ]


def _slug(task_type: str) -> str:
    return _SLUG.sub("-", task_type.lower()).strip("-") or "task"
