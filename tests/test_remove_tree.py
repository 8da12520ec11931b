"""Removing what an attempt (or a command) left (agentd/process/files.py `remove_tree`): any depth,
never raising, since an attempt's end and the boot sweep after a crash both rely on it."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import nest

from agentd.process import files


@pytest.mark.parametrize("depth", [0, 5, 3000])
@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_remove_tree_removes_any_depth_and_never_raises(tmp_path: Path, depth: int) -> None:
    """shutil.rmtree recurses once per level: 3,000 folders one in another raised RecursionError."""
    root = tmp_path / "run"
    root.mkdir()
    nest(root, depth, leaf="file")
    files.remove_tree(root)
    assert not root.exists()
    files.remove_tree(root)  # gone already: nothing to do, nothing raised
