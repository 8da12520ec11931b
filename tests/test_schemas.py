"""`agentd schema export` writes a JSON Schema per record; what agentd produces validates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from pydantic import BaseModel

from agentd.config import Config
from agentd.records import EXPORTED_RECORDS, Record


def exported(cli: Any, tmp_path: Path) -> dict[str, Draft202012Validator]:
    target = tmp_path / "schemas"
    result = cli("schema", "export", str(target))
    assert result.code == 0, result.err
    validators = {}
    for file in target.iterdir():
        schema = json.loads(file.read_text())
        Draft202012Validator.check_schema(schema)
        validators[schema["$id"]] = Draft202012Validator(schema)
    return validators


def produced_by_config(config: Config) -> list[Record]:
    return [
        config.identity,
        config.constitution,
        *config.wallets,
        *config.adapters.values(),
        *config.profiles.values(),
        *config.task_types.values(),
        *config.workflows.values(),
        *(skill.manifest for skill in config.skills.values()),
    ]


def produced_by_store(cli: Any) -> list[tuple[str, Any]]:
    """(schema id, JSON) of every record the queue commands print."""
    out: list[tuple[str, Any]] = []
    for task in cli("task", "list", "--json", "--limit", "1000").json():
        out.append(("agent-runtime/task.record/v1", task))
        shown = cli("task", "show", str(task["task_id"]), "--json").json()
        out += [("agent-runtime/task.attempt/v1", a) for a in shown["attempts"]]
        if task["outcome"]:
            out.append(("agent-runtime/task.outcome/v1", task["outcome"]))
    out += [("agent-runtime/runtime.event/v1", e) for e in cli("events", "--json").json_lines()]
    return out


def test_one_schema_per_record_with_its_versioned_id(cli: Any, tmp_path: Path) -> None:
    validators = exported(cli, tmp_path)
    expected = {model.schema_id for model in EXPORTED_RECORDS} | {"agent-runtime/adapter.config/v1"}
    assert set(validators) == expected
    assert all(schema_id.startswith("agent-runtime/") and schema_id.endswith("/v1") for schema_id in validators)


def test_records_agentd_produces_validate_against_the_export(cli: Any, tmp_path: Path, config: Config) -> None:
    validators = exported(cli, tmp_path)
    cli("init")
    cli(
        "task",
        "add",
        "--type",
        "example",
        "--subject",
        "s",
        "--payload",
        '{"note": "n"}',
        "--delay",
        "2",
        "--skill",
        "example",
        "--require-artifact",
        "a.txt",
    )
    cli("task", "add", "--type", "plan", "--priority", "1")
    checked = 0
    for record in produced_by_config(config):
        validators[record.schema_id].validate(_json(record))
        checked += 1
    for adapter in config.adapters.values():
        validators["agent-runtime/adapter.config/v1"].validate(_json(adapter))
    for schema_id, data in produced_by_store(cli):
        validators[schema_id].validate(data)
        checked += 1
    assert checked >= 12


def test_the_export_refuses_invalid_records(cli: Any, tmp_path: Path) -> None:
    validators = exported(cli, tmp_path)
    task_schema = validators["agent-runtime/task.record/v1"]
    errors = list(task_schema.iter_errors({"task_id": 1, "priority": 11}))
    assert errors, "a schema that accepts anything checks nothing"


def _json(model: BaseModel) -> Any:
    return model.model_dump(mode="json")


def test_a_folder_the_system_refuses_is_one_line_about_that_folder(cli: Any, tmp_path: Path) -> None:
    """Not an OSError, and not advice about the state dir: DIR is the operator's own."""
    too_long, a_file = tmp_path / ("d" * 300), tmp_path / "a-file"
    a_file.write_text("x")
    for target, said in (
        (too_long, f"agentd: cannot write the JSON Schemas to {too_long}: File name too long"),
        (a_file / "sub", f"agentd: cannot write the JSON Schemas to {a_file / 'sub'}: Not a directory"),
        (a_file, f"agentd: {a_file} exists and is not a folder"),
    ):
        result = cli("schema", "export", str(target))
        assert result.code == 2 and result.err.splitlines() == [said], result.err
