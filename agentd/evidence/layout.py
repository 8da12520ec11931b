"""An attempt's evidence by name: the files it holds, and the JSON Schema of its sealed manifest
(agentd-evidence/v1), which `agentd evidence verify` holds every manifest to, whatever ended the attempt."""

from __future__ import annotations

from typing import Any, get_args

from agentd.records import MachineStatus, OutcomeStatus

EVIDENCE_SPEC = "agentd-evidence/v1"
MANIFEST = "manifest.json"
EVIDENCE_FILES = (
    "prompt.md",
    "stdin.json",
    "stdout.log",
    "stderr.log",
    "result.json",
    "last_message.txt",
    "action_trace.jsonl",
    "hermes-usage.json",
    "hermes-session.json",
    "model_calls.jsonl",  # each model call through the gateway, its bodies redacted (docs/gateway.md)
)

_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_TEXT = {"type": "string", "minLength": 1}
_MAYBE_TEXT = {"type": ["string", "null"]}


def _object(properties: dict[str, Any], *optional: str) -> dict[str, Any]:
    """A JSON Schema object whose properties are all required but the `optional` ones."""
    return {"type": "object", "required": [k for k in properties if k not in optional], "properties": properties}


# [0-9], not \d: a JSON Schema's \d is ASCII (ECMA-262), Python's takes every script's digits.
_TIME = {"type": "string", "pattern": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$"}
# The sealed manifest (agentd-evidence/v1), as `agentd evidence verify` holds every manifest to it:
# what every ending (completed, failed, timed out, canceled, interrupted, boot-swept, agentd's own
# failure) writes. Extra fields are allowed for later versions; the listed ones must be as here.
MANIFEST_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "agentd-evidence/v1",
    **_object(
        {
            "spec_version": {"const": EVIDENCE_SPEC},
            "run_id": {"type": "string", "pattern": "^[0-9A-HJKMNP-TV-Z]{26}$"},
            "runtime_identity": _object(
                {"agentd_version": _TEXT, "host": _TEXT, "agent_id": _TEXT, "runner_id": _TEXT}
            ),
            "agent_ref": _object(
                {
                    "agent": _TEXT,
                    "profile": _TEXT,
                    "variant_id": _TEXT,
                    "variant": _object(
                        {
                            "skills": {
                                "type": "array",
                                "items": _object({"skill_id": _TEXT, "version": _TEXT}),
                            },
                            "agent_def_version": _MAYBE_TEXT,
                        }
                    ),
                }
            ),
            "task_ref": _object(
                {
                    "task_id": {"type": "integer", "minimum": 1},
                    "task_type": _TEXT,
                    "task_type_version": {"type": ["integer", "null"], "minimum": 1},
                    "attempt_number": {"type": "integer", "minimum": 1},
                }
            ),
            "task_hash": _SHA256,
            "bundle_hash": {"anyOf": [_SHA256, {"type": "null"}]},
            "constitution": _object({"soul_hash": _SHA256, "purpose_hash": _SHA256, "version": _TEXT}),
            "adapter": _object(
                {
                    "adapter_id": _TEXT,
                    "kind": _TEXT,
                    "cli_version": _MAYBE_TEXT,
                    "argv": {"type": "array", "items": {"type": "string"}},
                    "command_sha256": {"anyOf": [_SHA256, {"type": "null"}]},
                },
                "cli_version",
                "argv",
                "command_sha256",
            ),
            "model": _MAYBE_TEXT,
            "model_pin": {
                "anyOf": [
                    {"type": "null"},
                    _object({"provider": _TEXT, "model": _TEXT, "version": _MAYBE_TEXT, "endpoint": _MAYBE_TEXT}),
                ]
            },
            "action_trace": _object(
                {
                    "steps": {"type": "integer", "minimum": 0},
                    "tool_calls": {"type": "integer", "minimum": 0},
                    "digest": _SHA256,
                    "steps_dropped": {"type": "integer", "minimum": 1},
                },
                "steps_dropped",
            ),
            "budgets": {"type": "object"},
            "started_at": _TIME,
            "completed_at": _TIME,
            "wall_clock_elapsed_s": {"type": "number", "minimum": 0},
            "termination_reason": _TEXT,
            "failure_type": _MAYBE_TEXT,
            "exit_status": {"enum": ["ok", "error", "timeout", "unknown"]},  # unknown: sealed before migration 0017
            "side_effects": {"enum": ["none", "possible"]},
            "redactions": _object({"count": {"type": "integer", "minimum": 0}}),
            "outcome": _object(
                {
                    "status": {"enum": list(get_args(OutcomeStatus))},
                    "machine_status": {"enum": list(get_args(MachineStatus))},
                    "next_status": _TEXT,
                    "gate_reasons": {"type": "array", "items": {"type": "string"}},
                },
                "gate_reasons",
            ),
            "artifacts": {
                "type": "array",
                "items": _object(
                    {"role": _TEXT, "path": _TEXT, "sha256": {"anyOf": [_SHA256, {"type": "null"}]}}, "sha256"
                ),
            },
            "files": {
                "type": "object",
                "propertyNames": {"enum": list(EVIDENCE_FILES)},
                "additionalProperties": _object({"sha256": _SHA256, "bytes": {"type": "integer", "minimum": 0}}),
            },
            "artifact_hash": _SHA256,
        }
    ),
}
