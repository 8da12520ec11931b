"""What a sensor's proposed task may name (issue #38, finding 9; docs/sensors-and-workflows.md): a sensor turns
outside data into tasks, so, as a follow-up is held to its parent's profile and adapter, a sensor's task runs
on its task type's defaults unless its sensor.toml lists what it may name instead."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rig import Rig
from support import examples, write_config, write_sensor

from agentd.config.sensors import SensorManifest
from agentd.records import TaskIntent
from agentd.services.sensor_runs import parse_output
from agentd.work.intake import beyond_defaults
from agentd.work.validation import check_references


def line(**task: Any) -> str:
    proposed = {"task_type": "example", "source": "x", "subject": "from outside", "payload": {}, **task}
    event = {"event_id": "e1", "observed_at": "2026-11-28T00:00:00Z", "source_ref": "r", "dedupe_key": "k1"}
    return json.dumps({**event, "payload": {}, "proposed_task": proposed})


def judged(rig: Rig, sensor_id: str, text: str) -> tuple[int, list[str]]:
    accepted, rejected = parse_output(sensor_id, text, rig.config, rig.clock.now())
    return len([a for a in accepted if a.task is not None]), [r.reason for r in rejected]


def test_a_sensor_may_name_only_its_task_types_defaults_unless_it_lists_more(
    sensing: Callable[[], Rig], sensors_dir: Path
) -> None:
    write_sensor(sensors_dir, "plain", "pass")
    write_sensor(sensors_dir, "trusted", "pass", may_request_adapters=["scripted"], may_request_models=["big"])
    rig = sensing()
    for adapter_or_model in ({"requested_adapter_id": "scripted"}, {"requested_model": "big"}):
        made, why = judged(rig, "plain", line(**adapter_or_model))
        assert made == 0 and len(why) == 1, why
        assert "this sensor may name only its task type's default" in why[0] and "(listed: none)" in why[0], why
    assert judged(rig, "trusted", line(requested_adapter_id="scripted")) == (1, [])
    made, why = judged(rig, "trusted", line(requested_model="big"))  # listed: judged further, as any task is
    assert made == 0 and "this sensor may name" not in why[0] and "model" in why[0], why
    made, why = judged(rig, "trusted", line(requested_adapter_id="fails"))
    assert made == 0 and "may_request_adapters (listed: scripted)" in why[0], why
    assert judged(rig, "plain", line(requested_profile_id="operator")) == (1, []), "its task type's own default"
    assert judged(rig, "plain", line()) == (1, []), "naming nothing: the defaults"


def test_a_sensor_toml_naming_an_unknown_profile_or_adapter_is_a_config_problem(tmp_path: Path) -> None:
    sensors = tmp_path / "sensors"
    write_sensor(sensors, "feed", "pass", may_request_profiles=["ghost"], may_request_adapters=["script", "nope"])
    from agentd.config import parse_config

    config, _ = parse_config(write_config(tmp_path, lambda raw: raw["paths"].update(sensors_dir=str(sensors))))
    found = [str(p) for p in check_references(config)]
    manifest = sensors / "feed" / "sensor.toml"
    assert f"{manifest}: may_request_profiles[0]: expected a known profile (operator), found 'ghost'" in found, found
    assert f"{manifest}: may_request_adapters[1]: expected a known adapter (script), found 'nope'" in found, found


names = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))


@given(named=names, default=names, allowed=st.lists(st.sampled_from(["a", "b", "c"]), max_size=3))
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_proposal_passes_exactly_when_it_names_nothing_the_default_or_a_listed_adapter(
    named: str | None, default: str | None, allowed: list[str], config: Any
) -> None:
    spec = config.task_types["example"].model_copy(update={"default_adapter_id": default})
    local = dataclasses.replace(config, task_types={**config.task_types, "example": spec})
    manifest = SensorManifest(description="d", interval_seconds=60, command=["x"], may_request_adapters=allowed)
    intent = TaskIntent(task_type="example", source="x", subject="s", payload={}, requested_adapter_id=named)
    refused = beyond_defaults(local, manifest, intent)
    assert (refused is None) == (named is None or named == default or named in allowed), refused
