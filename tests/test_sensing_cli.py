"""`agentd sensor list|run` and sensor.toml problems, through the CLI (synchronous tests)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from support import task_subjects, write_sensor

pytestmark = pytest.mark.process


def test_sensor_list_and_run_dry_run(sensing: Callable[[], Rig], sensors_dir: Path, cli: Any) -> None:
    write_sensor(sensors_dir, "one", 'print(event("only"))\nprint("junk")')
    rig = sensing()
    dry = cli("sensor", "run", "one", "--dry-run", "--json", config=rig.config.path)
    assert dry.code == 0, dry.err
    shown = dry.json()
    assert shown["events"][0]["task"] == {"task_type": "example", "subject": "task only"}
    assert shown["rejected"] == [{"line": 2, "reason": "not JSON (Expecting value at column 1)"}]
    assert task_subjects(rig) == [], "a dry run writes nothing"
    assert cli("sensor", "run", "one", config=rig.config.path).code == 0
    assert task_subjects(rig) == ["task only"]
    [listed] = cli("sensor", "list", "--json", config=rig.config.path).json()
    assert listed["sensor_id"] == "one" and listed["runs"] == 1 and listed["last_result"] == "ok"
    again = cli("sensor", "run", "one", "--dry-run", "--json", config=rig.config.path).json()
    assert again["events"][0]["seen"] is True, "an event already taken is not shown as new work"
    text = cli("sensor", "run", "one", "--dry-run", config=rig.config.path).out
    assert "only → already seen: nothing to do" in text


def test_sensor_toml_problems_are_config_problems(sensors_dir: Path, tmp_path: Path, cli: Any) -> None:
    (sensors_dir / "broken").mkdir()
    (sensors_dir / "broken" / "sensor.toml").write_text('description = "x"\ninterval_seconds = 0\ncommand = ["./no"]\n')
    from support import agent_config

    path = agent_config(tmp_path, lambda raw: raw["paths"].update(sensors_dir=str(sensors_dir)))
    result = cli("config", "check", config=path)
    assert result.code == 2
    assert (
        f"{sensors_dir / 'broken' / 'sensor.toml'}: interval_seconds: Input should be greater than or equal to 1"
        in result.err
    )
