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


# --- an operator's commands as root (issue 38, finding 7) ------------------------------------------


def not_the_owners(state_dir: Path) -> list[str]:
    """Every entry of the state dir whose owner is not the state dir's: what its services may not open."""
    owner = state_dir.stat().st_uid
    return sorted(
        f"{os.path.relpath(os.path.join(folder, name), state_dir)} (uid {os.lstat(os.path.join(folder, name)).st_uid})"
        for folder, folders, files in os.walk(state_dir)
        for name in folders + files
        if os.lstat(os.path.join(folder, name)).st_uid != owner
    )


def ok(done: Any) -> str:
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


AS_ROOT = [
    ["migrate"],  # the first write on a state dir from before AGENT_FILE binds it
    ["init"],
    ["task", "add", "--type", "example", "--subject", "one"],
    ["task", "add", "--type", "example", "--require-approval"],
    ["approve", "2"],
    ["task", "cancel", "1"],
    ["task", "retry", "1"],
    ["dispatch", "pause", "--reason", "looking"],
    ["status"],
    ["task", "list"],
    ["sensor", "run", "simple"],
    ["prune"],
]
SENSOR = """#!/usr/bin/env python3
import json
print(json.dumps({"event_id": "e1", "observed_at": "2026-11-25T00:00:00Z", "source_ref": "x", "dedupe_key": "k1"}))
"""


def add_sensor(folder: Path) -> None:
    folder.mkdir(mode=0o755)
    (folder / "sense.py").write_text(SENSOR)
    (folder / "sense.py").chmod(0o755)
    (folder / "sensor.toml").write_text('description = "simple"\ninterval_seconds = 60\ncommand = ["./sense.py"]\n')


@pytest.mark.deep
@pytest.mark.process
def test_an_operators_commands_as_root_leave_nothing_the_services_cannot_open() -> None:
    """Was: a root-owned 0600 config-cache.json after `task add` or `status` as root (and a root-owned
    AGENT_FILE on a state dir from before it, and a sensor's logs after `sensor run`), which the services'
    user cannot open. The view is written by the state dir's owner only; a file root must make there is
    handed to that owner."""
    import privsep

    privsep.require()
    with privsep.priv_agent() as agent:
        add_sensor(agent.sensors_dir / "simple")
        ok(agent.as_service("init"))
        (agent.state_dir / AGENT_FILE).unlink()  # as a state dir made before agentd named its agent
        for command in AS_ROOT:
            done = agent.as_operator(*command)
            assert done.returncode == 0, (command, done.stderr)
            assert not_the_owners(agent.state_dir) == [], command
        ok(agent.as_service("dispatch", "resume"))
        ok(agent.as_service("sensor", "run", "simple"))  # its logs, where root's run left them
        ok(agent.as_service("task", "add", "--type", "example"))  # the service's own view, and its AGENT_FILE
        view = (agent.state_dir / "config-cache.json").read_bytes()
        for command in (["task", "add", "--type", "example"], ["status"]):
            ok(agent.as_operator(*command))
        assert (agent.state_dir / "config-cache.json").read_bytes() == view, "root leaves the services' view be"
        assert not_the_owners(agent.state_dir) == []
        assert "pending" in ok(agent.as_service("status"))


@pytest.mark.deep
@pytest.mark.process
def test_init_as_root_in_a_state_dir_install_made_leaves_the_database_to_the_services() -> None:
    """`agentd install` makes the state dir, the services' and empty; `agentd init` as root made the
    database (and attempts/) root's 0600, and no service could start."""
    import privsep

    privsep.require()
    with privsep.priv_agent() as agent:
        ok(agent.as_operator("init"))
        assert {"agent_id", "agentd.db", "attempts"} <= set(os.listdir(agent.state_dir))
        assert not_the_owners(agent.state_dir) == []
        ok(agent.as_service("dispatch", "--until-idle"))


@pytest.mark.deep
@pytest.mark.process
def test_a_rollback_accepted_as_root_leaves_the_head_and_the_set_aside_folders_to_the_services() -> None:
    """`evidence accept-rollback` as root publishes the chain head and moves folders aside: both are the
    services' afterwards, so the next start checks the head instead of finding it unreadable."""
    import shutil
    from contextlib import closing

    import privsep

    privsep.require()
    with privsep.priv_agent() as agent:
        ok(agent.as_service("init"))
        db, older = agent.state_dir / "agentd.db", agent.base / "older.db"
        with closing(sqlite3.connect(db)) as source, closing(sqlite3.connect(older)) as target:
            source.backup(target)
        ok(agent.as_operator("task", "add", "--type", "example"))
        ok(agent.as_service("dispatch", "--until-idle"))
        for stale in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            stale.unlink(missing_ok=True)
        shutil.copyfile(older, db)  # the backup put back, as root would
        os.chown(db, agent.uid(agent.service), agent.state_dir.stat().st_gid)
        refused = agent.as_service("dispatch", "--until-idle")
        assert refused.returncode != 0 and "accept-rollback" in refused.stderr
        ok(agent.as_operator("evidence", "accept-rollback", "--reason", "restored the backup"))
        assert not_the_owners(agent.state_dir) == []
        ran = agent.as_service("dispatch", "--until-idle")
        assert ran.returncode == 0 and "chain head is not checked" not in ran.stderr, ran.stderr
