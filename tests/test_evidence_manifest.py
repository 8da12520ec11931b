"""What an attempt's sealed evidence holds beyond its files: the variant lineage (seed 000 §3), the
model pin, each artifact's real role, the action trace; the manifest pinned by the event chain; and
strict_evidence, which will not let a task be completed on evidence that does not verify."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from support import ok

from agentd.evidence import MANIFEST, artifact_hash
from agentd.evidence.verify import verify
from agentd.records import TaskAttempt

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.asyncio


async def run(rig: Rig, task_type: str = "scripted", *, processes: bool = False, **fields: Any) -> TaskAttempt:
    task = rig.add(task_type, **fields)
    dispatcher = rig.dispatcher(processes=processes)
    await dispatcher.start()
    await dispatcher.run_until_idle()
    await dispatcher.stop()
    return rig.store.attempts_of(task.task_id)[0]


def manifest_of(attempt: TaskAttempt) -> dict[str, Any]:
    return json.loads((Path(attempt.evidence_dir or "") / MANIFEST).read_text())


@pytest.fixture
def own_skills(rig_factory: Callable[..., Rig], tmp_path: Path) -> tuple[Callable[[], Rig], Path]:
    """Rigs reading a copy of the repository's skills, so a test can change one."""
    skills = tmp_path / "skills"
    shutil.copytree(REPO / "skills", skills)
    return (lambda: rig_factory(lambda raw: raw["paths"].update(skills_dir=str(skills)))), skills


async def test_the_variant_names_each_skill_version_and_the_profile_and_changes_with_them(
    own_skills: tuple[Callable[[], Rig], Path],
) -> None:
    make, skills = own_skills
    first = manifest_of(await run(make(), payload={"outcome": ok()}))["agent_ref"]
    assert first["agent"] and first["profile"] == "operator"
    assert [s["skill_id"] for s in first["variant"]["skills"]] == ["example"]
    assert len(first["variant"]["agent_def_version"]) == 16 and len(first["variant_id"]) == 16
    (skills / "example" / "SKILL.md").write_text("# A new way of doing it\n")
    second = manifest_of(await run(make(), payload={"outcome": ok()}))["agent_ref"]
    assert second["variant"]["skills"][0]["version"] != first["variant"]["skills"][0]["version"]
    assert second["variant_id"] != first["variant_id"]
    assert second["variant"]["agent_def_version"] == first["variant"]["agent_def_version"]


async def test_a_script_attempt_records_its_argv_and_executable_and_no_model_pin(rig: Rig) -> None:
    manifest = manifest_of(await run(rig, payload={"outcome": ok()}))
    command = next(a for a in rig.config.adapters.values() if a.adapter_id == "scripted")
    assert manifest["adapter"]["argv"] == [command.command]  # type: ignore[union-attr]
    executable = Path(command.command)  # type: ignore[union-attr]
    assert manifest["adapter"]["command_sha256"] == hashlib.sha256(executable.read_bytes()).hexdigest()
    assert manifest["model_pin"] is None


@pytest.fixture
def roles_rig(rig_factory: Callable[..., Rig]) -> Rig:
    def add(raw: dict[str, Any]) -> None:
        raw["task_types"].append(
            {
                "task_type": "reported",
                "payload_schema_id": "agent-runtime/payload.any-object/v1",
                "default_profile_id": "operator",
                "default_adapter_id": "scripted",
                "artifact_roles": ["plan", "verify-report"],
            }
        )

    return rig_factory(add)


async def test_an_artifact_gets_the_role_its_outcome_names(roles_rig: Rig) -> None:
    files = {"plan.md": "the plan", "check.md": "it holds", "other.txt": "x"}
    outcome = ok(
        artifact_paths=["plan.md", "check.md", "other.txt"],
        artifact_roles={"plan.md": "plan", "check.md": "verify-report"},
    )
    attempt = await run(roles_rig, "reported", payload={"files": files, "outcome": outcome})
    rows = {a["path"]: a["role"] for a in manifest_of(attempt)["artifacts"]}
    assert rows == {"plan.md": "plan", "check.md": "verify-report", "other.txt": "output"}
    with sqlite3.connect(roles_rig.config.db_path) as conn:
        stored = dict(conn.execute("SELECT relative_path, role FROM artifacts WHERE task_id = ?", (attempt.task_id,)))
    assert stored == rows


async def test_a_role_the_task_type_does_not_allow_downgrades_the_completion(roles_rig: Rig) -> None:
    outcome = ok(artifact_paths=["a.md"], artifact_roles={"a.md": "snapshot"})
    attempt = await run(roles_rig, "reported", payload={"files": {"a.md": "x"}, "outcome": outcome})
    task = roles_rig.store.get_task_or_raise(attempt.task_id)
    assert task.status == "retryable_failure"
    assert "role 'snapshot' is not one this task type allows (plan, verify-report)" in (task.last_error or "")


async def test_a_single_role_type_gives_its_role(rig: Rig) -> None:
    attempt = await run(rig, payload={"files": {"r.txt": "x"}, "outcome": ok(artifact_paths=["r.txt"])})
    assert [a["role"] for a in manifest_of(attempt)["artifacts"]] == ["output"]


@pytest.mark.process
async def test_the_action_trace_is_sealed_and_counted(rig: Rig) -> None:
    attempt = await run(rig, processes=True, payload={"stdout": "hi", "outcome": ok()})
    root = Path(attempt.evidence_dir or "")
    [step] = [json.loads(line) for line in (root / "action_trace.jsonl").read_text().splitlines()]
    assert (step["kind"], step["tool"], step["is_error"]) == ("command", "script", False)
    manifest = manifest_of(attempt)
    assert manifest["action_trace"]["steps"] == 1 and "action_trace.jsonl" in manifest["files"]
    (root / "action_trace.jsonl").write_text("")
    findings = [str(f) for f in verify(rig.store, rig.config.paths.state_dir).findings]
    assert f"{root / 'action_trace.jsonl'}: sha256 differs from the manifest (edited after the attempt)" in findings


async def test_a_manifest_resealed_with_true_hashes_is_still_caught_by_the_chain(rig: Rig) -> None:
    attempt = await run(rig, payload={"outcome": ok()})
    path = Path(attempt.evidence_dir or "") / MANIFEST
    manifest = json.loads(path.read_text())
    manifest["outcome"]["operator_summary"] = "something else"  # a schema-valid, self-consistent lie
    manifest["artifact_hash"] = artifact_hash(manifest)
    os.chmod(path, 0o600)
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    findings = verify(rig.store, rig.config.paths.state_dir).findings
    assert [(f.where, f.what.split(" differs")[0][:6]) for f in findings] == [(str(path), "sha256")]
    assert "differs from the one event" in findings[0].what


@pytest.fixture
def strict_rig(rig_factory: Callable[..., Rig]) -> Callable[[bool | None, bool], Rig]:
    def make(type_setting: bool | None, dispatch_setting: bool) -> Rig:
        def add(raw: dict[str, Any]) -> None:
            raw["dispatch"]["strict_evidence"] = dispatch_setting
            spec = next(t for t in raw["task_types"] if t["task_type"] == "scripted")
            if type_setting is not None:
                spec["strict_evidence"] = type_setting

        return rig_factory(add)

    return make


# A file that is not evidence appears in the attempt's evidence folder (the attempt cannot reach it: the
# in-process adapter writes it with the service's rights, as tampering would): only strict_evidence
# notices before the task is completed (`evidence verify` would later).
STRAY = {"files": {"${AGENTD_EVIDENCE_DIR}/result.json.stray": "left behind"}, "outcome": ok()}


@pytest.mark.parametrize(
    ("type_setting", "dispatch_setting", "completed"),
    [(None, False, True), (None, True, False), (True, False, False), (False, True, True)],
)
async def test_strict_evidence_refuses_a_completion_its_evidence_does_not_back(
    strict_rig: Callable[[bool | None, bool], Rig], type_setting: bool | None, dispatch_setting: bool, completed: bool
) -> None:
    rig = strict_rig(type_setting, dispatch_setting)
    attempt = await run(rig, payload=STRAY)
    task = rig.store.get_task_or_raise(attempt.task_id)
    assert (task.status == "completed") is completed
    if not completed:
        assert task.status == "retryable_failure"
        assert "its evidence did not verify" in (task.last_error or "") and "result.json.stray" in (
            task.last_error or ""
        )
        manifest = manifest_of(attempt)
        assert manifest["failure_type"] == "evidence_unverified"
        assert manifest["outcome"]["next_status"] == "retryable_failure"  # sealed again to say so
        assert rig.store.sealed_manifests(attempt.attempt_id)  # and the chain holds the second seal
        assert [str(f) for f in verify(rig.store, rig.config.paths.state_dir).findings] == [
            f"{Path(attempt.evidence_dir or '') / 'result.json.stray'}: present but not part of the evidence"
        ]


async def test_strict_evidence_passes_clean_evidence(strict_rig: Callable[[bool | None, bool], Rig]) -> None:
    rig = strict_rig(None, True)
    attempt = await run(rig, payload={"outcome": ok()})
    assert rig.store.get_task_or_raise(attempt.task_id).status == "completed"
