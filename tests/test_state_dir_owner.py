"""One agent per state dir (docs/operate.md, "One agent, one state dir"): a state dir names the agent
that made it, and another agent's config pointed at it is refused by every command before anything is
read or written, so two agents' queues, event chains and evidence never mix."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support import write_config

from agentd.cli import main
from agentd.errors import InputError, StorageError
from agentd.store import own_state_dir
from agentd.store.core import AGENT_FILE


def agent(tmp_path: Path, agent_id: str, state_dir: Path) -> Path:
    def named(raw: dict[str, Any]) -> None:
        raw["agent"].update(agent_id=agent_id, internal_name=agent_id)
        raw["paths"]["state_dir"] = str(state_dir)
        for wallet in raw.get("wallets", []):
            wallet.pop("agent_id", None)

    return write_config(tmp_path / agent_id, named)


def events(state_dir: Path) -> int:
    with sqlite3.connect(state_dir / "agentd.db") as conn:
        return int(conn.execute("SELECT COUNT(*) FROM events").fetchone()[0])


COMMANDS = [
    ["status"],
    ["task", "list"],
    ["task", "add", "--type", "example", "--subject", "s", "--payload", '{"note": "x"}'],
    ["init"],
    ["migrate"],
    ["config", "check"],
    ["evidence", "verify"],
    ["events"],
]


def two_agents_one_state_dir(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Agent `first` initialised its state dir; agent `second`'s TOML names the same one."""
    shared = tmp_path / "state"
    first, second = agent(tmp_path, "first", shared), agent(tmp_path, "second", shared)
    assert main(["init", "--config", str(first)]) == 0
    return shared, first, second


def test_another_agents_config_is_refused_by_every_command_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared, first, second = two_agents_one_state_dir(tmp_path)
    assert (shared / AGENT_FILE).read_text() == "first\n" and (shared / AGENT_FILE).stat().st_mode & 0o777 == 0o600
    before = events(shared)
    capsys.readouterr()
    for command in COMMANDS:
        assert main([*command, "--config", str(second)]) == 2, command
        [line] = capsys.readouterr().err.splitlines()
        assert line == (
            f"agentd: {shared} is the state dir of agent 'first' ({shared / AGENT_FILE}); this config is agent "
            "'second'. Give each agent its own [paths] state_dir"
        ), command
    assert events(shared) == before
    assert main(["status", "--config", str(first)]) == 0


def test_a_state_dir_from_before_the_file_is_bound_by_the_first_write_not_by_a_look(tmp_path: Path) -> None:
    shared, first, second = two_agents_one_state_dir(tmp_path)
    (shared / AGENT_FILE).unlink()  # as a state dir made before agentd named its agent
    assert main(["status", "--config", str(first)]) == 0 and not (shared / AGENT_FILE).exists()
    assert main(["task", "add", "--type", "example", "--subject", "s", "--config", str(first)]) == 0
    assert (shared / AGENT_FILE).read_text() == "first\n"
    assert main(["task", "list", "--config", str(second)]) == 2


def test_the_first_agent_to_bind_wins_and_a_planted_link_is_never_followed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    own_state_dir(state, "first", bind=True)
    own_state_dir(state, "first", bind=True)  # the same agent again: fine
    with pytest.raises(InputError, match="is the state dir of agent 'first'"):
        own_state_dir(state, "second", bind=True)
    assert (state / AGENT_FILE).read_text() == "first\n" and os.listdir(state) == [AGENT_FILE]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("second\n")
    (state / AGENT_FILE).unlink()
    (state / AGENT_FILE).symlink_to(elsewhere)
    with pytest.raises(StorageError, match=r"Too many levels of symbolic links"):
        own_state_dir(state, "second", bind=True)
