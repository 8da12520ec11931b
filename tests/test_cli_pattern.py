"""The CLI's open-store / call / print pattern, written once (issue 24): agentd/cli/common.py
`store_command` prints JSON with --json and text otherwise, and closes the store whatever happens."""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentd.cli.common import store_command
from agentd.errors import InputError, StorageError


def namespace(config: Path, **given: Any) -> argparse.Namespace:
    return argparse.Namespace(config=str(config), **given)


def test_json_with_json_text_without(rig: Any, capsys: pytest.CaptureFixture[str]) -> None:
    def act(config: Any, store: Any) -> dict[str, Any]:
        return {"agent": config.agent.agent_id, "tasks": len(store.list_tasks())}

    assert store_command(namespace(rig.config.path, json=True), act, print, as_json=lambda r: [r["agent"]]) == 0
    assert capsys.readouterr().out == '[\n  "demo"\n]\n'
    assert store_command(namespace(rig.config.path), act, lambda r: print(f"{r['agent']} {r['tasks']}")) == 0
    assert capsys.readouterr().out == "demo 0\n"


def test_the_store_is_closed_when_the_call_refuses(rig: Any) -> None:
    opened: list[Any] = []

    def refuse(_: Any, store: Any) -> None:
        opened.append(store)
        raise InputError("no")

    with pytest.raises(InputError):
        store_command(namespace(rig.config.path), refuse, print)
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        opened[0].list_tasks()


def test_a_read_only_command_cannot_write(rig: Any) -> None:
    def write(_: Any, store: Any) -> None:
        store.pause_dispatch("me", None, rig.clock.now())

    with pytest.raises((sqlite3.Error, StorageError), match=r"readonly|read-only|query_only|attempt to write"):
        store_command(namespace(rig.config.path), write, print, readonly=True)
    assert rig.store.dispatch_pause() is None
