"""JSON Schemas (2020-12) of agentd's records, for `agentd schema export` and for validators."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from agentd.records import EXPORTED_RECORDS, AdapterConfig


def json_schemas() -> dict[str, dict[str, Any]]:
    """Every exported record's JSON Schema (2020-12), keyed by its schema id."""
    from annotated_types import Ge, Interval  # noqa: F401  the stored records' bounds: pydantic reads them here

    schemas: dict[str, dict[str, Any]] = {}
    for model in EXPORTED_RECORDS:  # a pydantic record, or a stored one (a plain value pydantic describes)
        schema = TypeAdapter(model).json_schema(mode=model.schema_mode)
        schemas[model.schema_id] = _with_id(model.schema_id, schema)
    union = TypeAdapter(AdapterConfig).json_schema(mode="validation")
    schemas["agent-runtime/adapter.config/v1"] = _with_id("agent-runtime/adapter.config/v1", union)
    return schemas


def _with_id(schema_id: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": schema_id, **schema}
