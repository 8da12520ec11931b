"""What a dispatcher keeps of its configuration between attempts (agentd/attempt/manifest.py DescribedMemo):
it computes once what only the configuration decides, and never serves a script digest its file no
longer matches."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rig import Rig

from agentd.attempt.manifest import RACY_S, DescribedMemo, described_by
from agentd.attempt.prepare import agent_variant
from agentd.clock import FakeClock


def _settled_clock(path: Path) -> FakeClock:
    """A clock well past the file's last change: its digest may be kept."""
    info = path.stat()
    return FakeClock(datetime.fromtimestamp(max(info.st_mtime, info.st_ctime) + 10 * RACY_S, UTC))


def _script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tool.sh"
    path.write_text(text)
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_script_rewritten_in_place_is_hashed_again_even_with_its_old_size_and_mtime(rig: Rig, tmp_path: Path) -> None:
    script = _script(tmp_path, "#!/bin/sh\necho one\n")
    memo = DescribedMemo(rig.config, _settled_clock(script))
    first = memo.digest(script)
    assert first == sha(script)
    before = script.stat()
    with open(script, "r+b") as handle:  # same inode, same size
        handle.write(b"#!/bin/sh\necho two\n")
    os.utime(script, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime put back: only ctime says it changed
    assert memo.digest(script) == sha(script) != first


def test_a_script_replaced_by_another_file_is_hashed_again(rig: Rig, tmp_path: Path) -> None:
    script = _script(tmp_path, "#!/bin/sh\necho one\n")
    memo = DescribedMemo(rig.config, _settled_clock(script))
    first = memo.digest(script)
    other = tmp_path / "new.sh"
    other.write_text("#!/bin/sh\necho two\n")
    other.replace(script)
    assert memo.digest(script) == sha(script) != first


def test_a_script_changed_just_now_is_never_kept(rig: Rig, tmp_path: Path) -> None:
    """Within RACY_S of its last change a later write could leave every timestamp as it was: the digest
    is computed afresh each time until the file has settled."""
    script = _script(tmp_path, "#!/bin/sh\necho one\n")
    info = script.stat()
    memo = DescribedMemo(rig.config, FakeClock(datetime.fromtimestamp(info.st_ctime, UTC)))
    memo.digest(script)
    assert memo.kept_digests() == 0
    settled = DescribedMemo(rig.config, _settled_clock(script))
    settled.digest(script)
    assert settled.kept_digests() == 1


def test_the_variant_is_resolved_once_per_profile_and_skills(rig_factory: Callable[..., Rig]) -> None:
    def two_profiles(raw: dict[str, Any]) -> None:
        extra = dict(next(p for p in raw["profiles"] if p["profile_id"] == "operator"))
        raw["profiles"].append({**extra, "profile_id": "second", "skill_ids": []})

    rig = rig_factory(two_profiles)
    memo = DescribedMemo(rig.config, rig.clock)
    one, two = rig.add(), rig.add()
    assert memo.variant(one) is memo.variant(two)  # computed once, for both
    assert memo.variant(one) == agent_variant(rig.config, one)
    other = rig.add(requested_profile_id="second")
    assert memo.variant(other) is not memo.variant(one)
    assert memo.variant(other) == agent_variant(rig.config, other)


def test_what_the_memo_describes_is_what_the_configuration_describes(rig: Rig) -> None:
    task = rig.add("scripted")
    memo = DescribedMemo(rig.config, rig.clock)
    assert described_by(rig.config, task, "scripted", memo) == described_by(rig.config, task, "scripted")
