"""Removing what an attempt (or a command) left (agentd/process/runner.py `remove_tree`): any depth,
never raising, since an attempt's end and the boot sweep after a crash both rely on it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentd.process import runner


@pytest.mark.parametrize("depth", [0, 5, 3000])
def test_remove_tree_removes_any_depth_and_never_raises(tmp_path: Path, depth: int) -> None:
    """shutil.rmtree recurses once per level: 3,000 folders one in another raised RecursionError."""
    root = tmp_path / "run"
    root.mkdir()
    folder = os.open(root, os.O_RDONLY)
    for _ in range(depth):  # relative to the last one: past what one path may name
        os.mkdir("d", dir_fd=folder)
        inner = os.open("d", os.O_RDONLY, dir_fd=folder)
        os.close(folder)
        folder = inner
    (Path(f"/proc/self/fd/{folder}") / "file").write_text("the attempt's")
    os.close(folder)
    runner.remove_tree(root)
    assert not root.exists()
    runner.remove_tree(root)  # gone already: nothing to do, nothing raised
