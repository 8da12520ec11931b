"""What a dispatcher keeps of its configuration between attempts (agentd/attempt/manifest.py DescribedMemo):
it computes once what only the configuration decides, and reads again what a file says."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rig import Rig

from agentd.attempt.manifest import DescribedMemo, described_by
from agentd.attempt.terms import agent_variant


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_script_edited_between_attempts_is_described_by_its_new_bytes(
    rig_factory: Callable[..., Rig], tmp_path: Path
) -> None:
    """The memo keeps what the configuration decides, never what a file says: a script rewritten in
    place (same inode, same size, its mtime put back) is hashed again for the next attempt."""
    script = tmp_path / "tool.sh"
    script.write_text("#!/bin/sh\necho one\n")
    script.chmod(0o755)

    def scripted(raw: dict[str, Any]) -> None:
        raw["adapters"].append({"adapter_id": "tool", "kind": "script", "command": str(script), "timeout_ms": 10_000})

    rig = rig_factory(scripted)
    memo = DescribedMemo(rig.config)
    task = rig.add("scripted")
    first = described_by(rig.config, task, "tool", memo)["script"]["command_sha256"]
    assert first == sha(script)
    before = script.stat()
    with open(script, "r+b") as handle:
        handle.write(b"#!/bin/sh\necho two\n")
    os.utime(script, ns=(before.st_atime_ns, before.st_mtime_ns))
    again = described_by(rig.config, task, "tool", memo)["script"]["command_sha256"]
    assert again == sha(script) != first


def test_the_variant_is_resolved_once_per_profile_and_skills(rig_factory: Callable[..., Rig]) -> None:
    def two_profiles(raw: dict[str, Any]) -> None:
        extra = dict(next(p for p in raw["profiles"] if p["profile_id"] == "operator"))
        raw["profiles"].append({**extra, "profile_id": "second", "skill_ids": []})

    rig = rig_factory(two_profiles)
    memo = DescribedMemo(rig.config)
    one, two = rig.add(), rig.add()
    assert memo.variant(one) is memo.variant(two)  # computed once, for both
    assert memo.variant(one) == agent_variant(rig.config, one)
    other = rig.add(requested_profile_id="second")
    assert memo.variant(other) is not memo.variant(one)
    assert memo.variant(other) == agent_variant(rig.config, other)


def test_what_the_memo_describes_is_what_the_configuration_describes(rig: Rig) -> None:
    task = rig.add("scripted")
    memo = DescribedMemo(rig.config)
    assert described_by(rig.config, task, "scripted", memo) == described_by(rig.config, task, "scripted")


def test_an_attempts_paths_are_built_once(tmp_path: Path) -> None:
    """An attempt asks for its paths ~30 times (prepare, the adapter, conclude, the seal)."""
    from agentd.evidence import attempt_paths

    paths = attempt_paths(tmp_path, 7, "01ATTEMPT", tmp_path / "runs")
    assert paths.stdout is paths.stdout and paths.bundle_copy is paths.bundle_copy
    assert paths.stdout == tmp_path / "attempts" / "7" / "01ATTEMPT" / "stdout.log"
    assert paths.bundle_copy == tmp_path / "runs" / "01ATTEMPT" / "prompt.md"
