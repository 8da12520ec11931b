"""Issue 41, finding 4 (seed 000 §3: a declared field is "enforced or removed"): a skill's subagent_path,
input_schema_id and output_schema_id did nothing, and an adapter's autonomy.required_settings_files was
never looked at. `config check` now refuses the skill fields agentd does not use and requires each settings
file to exist; an attempt's exit_status is one of seed 000 §8's three (the boot sweep's unseen exit is
`error`, its diagnostics saying exit_seen false)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import write_config
from test_config import own_folders, problems_of, problems_with_own_folders

from agentd.vocabulary import ExitStatus
from agentd.work.validation import load_config


@pytest.mark.parametrize("field", ["subagent_path", "input_schema_id", "output_schema_id"])
def test_a_skill_field_agentd_does_not_enforce_is_refused_by_config_check(tmp_path: Path, field: str) -> None:
    skills, _ = own_folders(tmp_path)
    manifest = skills / "example" / "skill.toml"
    (skills / "example" / "agent.md").write_text("a subagent\n")
    value = "agent.md" if field == "subagent_path" else "agent-runtime/payload.any-object/v1"
    manifest.write_text(
        manifest.read_text().replace(
            'instruction_path = "SKILL.md"', f'instruction_path = "SKILL.md"\n{field} = "{value}"'
        )
    )
    found = problems_with_own_folders(tmp_path)
    assert any(line.startswith(f"{manifest}: {field}: ") and "does not enforce" in line for line in found), found


def claude(files: list[str]) -> Any:
    def mutate(raw: dict[str, Any]) -> None:
        raw["adapters"].append(
            {
                "adapter_id": "claude",
                "kind": "claude-code",
                "command": "/bin/true",
                "timeout_ms": 1000,
                "autonomy": {"profile": "restricted", "required_settings_files": files},
            }
        )

    return mutate


def test_a_required_settings_file_must_exist(tmp_path: Path) -> None:
    there = tmp_path / "settings.json"
    there.write_text("{}")
    assert load_config(write_config(tmp_path, claude([str(there)]))).adapters["claude"].kind == "claude-code"
    gone = tmp_path / "gone.json"
    found = problems_of(write_config(tmp_path, claude([str(there), str(gone)])))
    assert any("autonomy.required_settings_files[1]" in p and str(gone) in p for p in found), found


@settings(max_examples=30, deadline=None)
@given(name=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"), min_size=1, max_size=40))
def test_a_relative_or_missing_settings_file_is_a_problem_never_a_crash(tmp_path_factory: Any, name: str) -> None:
    folder = tmp_path_factory.mktemp("c")
    found = problems_of(write_config(folder, claude([name])))
    assert any("autonomy.required_settings_files[0]" in p for p in found), found


def test_exit_status_is_seed_000_s_three() -> None:
    from typing import get_args

    assert set(get_args(ExitStatus)) == {"ok", "error", "timeout"}


def test_a_settings_file_gone_since_the_config_loaded_stops_the_attempt_before_it_starts(
    rig_factory: Any, tmp_path: Path
) -> None:
    """Issue 41: the files were judged when the config loaded and never again before a claim."""
    import anyio

    there = tmp_path / "settings.json"
    there.write_text("{}")

    def mutate(raw: dict[str, Any]) -> None:
        claude([str(there)])(raw)
        raw["dispatch"]["boundary"] = "advisory"  # the in-process rig: no run user to give attempts

    rig = rig_factory(mutate)
    task = rig.add(requested_adapter_id="claude")
    there.unlink()
    anyio.run(rig.drain)
    [attempt] = rig.store.attempts_of(task.task_id)
    assert attempt.termination_reason == "internal_error", attempt
    assert "autonomy.required_settings_files[0]" in (rig.store.get_task_or_raise(task.task_id).last_error or "")
    assert not any(e.type == "task_started" and e.task_id == task.task_id for e in rig.events())
