"""Conventions the project keeps: SQL only in the store, every command documented (README or
docs/operate.md) and helpful."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, plain_env

from agentd.cli import build_parser

SQL = re.compile(r"\b(SELECT\s|INSERT\s+INTO|UPDATE\s+[a-z_]+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX))")


def test_no_sql_outside_the_store_package() -> None:
    offenders = [
        str(path.relative_to(REPO))
        for path in (REPO / "agentd").rglob("*.py")
        if "store" not in path.relative_to(REPO / "agentd").parts and SQL.search(path.read_text())
    ]
    assert offenders == []


def test_the_sql_check_would_catch_a_stray_statement() -> None:
    assert SQL.search('conn.execute("SELECT id FROM tasks")')
    assert SQL.search("UPDATE tasks SET status = 'x'")


# A store's connection is its own: a verb of a Store class uses `self._conn`; everything else, helpers of
# the store package included, goes through the public handle (`store.tx`, `with store.transaction() as tx`).
REACHING_IN = re.compile(r"(?<!self)\._conn\b|\._append_event\(")


def reaching_into_the_connection(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if REACHING_IN.search(line.replace("self._store._", ""))]


def test_nothing_but_the_stores_own_verbs_touches_its_connection() -> None:
    offenders = [
        f"{path.relative_to(REPO)}: {line}"
        for path in sorted((REPO / "agentd").rglob("*.py"))
        if path.name != "fleet.py"  # the fleet's PostgreSQL connection is another store's
        for line in reaching_into_the_connection(path.read_text())
        if not line.startswith(("def ", "self._append_event("))
    ]
    assert offenders == []


def test_the_connection_check_would_catch_a_helper_reaching_in() -> None:
    assert reaching_into_the_connection("    row = store._conn.execute('x')")
    assert reaching_into_the_connection("    store._append_event('x', now)")
    assert not reaching_into_the_connection("    row = self._conn.execute('x')\n    tx.event('x', now)")


def test_the_fatal_pair_is_written_once() -> None:
    """A failure boundary (one tick's, one run's, one attempt's) is `errors.contained`; only it spells
    out "FATAL goes up, the rest is caught"."""
    offenders = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "agentd").rglob("*.py"))
        if path.name != "errors.py" and re.search(r"except\s*\(?\s*FATAL", path.read_text())
    ]
    assert offenders == []


@pytest.mark.parametrize("fatal", [False, True])
def test_contained_hands_back_a_failure_and_lets_fatal_end_the_service(
    fatal: bool, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from agentd.errors import StorageError, contained

    error = StorageError("agent.db", "the disk is full", "free some space") if fatal else ValueError("one tick's own")
    log = logging.getLogger("agentd.test")
    if fatal:
        with pytest.raises(StorageError), contained(log, "tick %d failed", 7):
            raise error
        return
    with contained(log, "tick %d failed", 7) as failed:
        raise error
    assert failed.error is error
    assert "tick 7 failed" in caplog.text and "one tick's own" in caplog.text  # with its traceback
    with contained(None) as quiet:
        pass
    assert quiet.error is None


def subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = (*prefix, name)
                nested = subcommands(sub, path)
                found += nested or [path]
    return found


ALL_COMMANDS = subcommands(build_parser())


def documented_commands() -> str:
    """Where a reader looks a command up: the README, and the commands table of docs/operate.md."""
    operate = (REPO / "docs" / "operate.md").read_text()
    table = operate.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    return (REPO / "README.md").read_text() + table


def test_every_subcommand_is_documented() -> None:
    documented = documented_commands()
    assert documented.count("\n| `agentd ") > 30, "the commands table of docs/operate.md"
    missing = [" ".join(c) for c in ALL_COMMANDS if f"agentd {' '.join(c)}" not in documented]
    assert missing == []


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=" ".join)
def test_every_subcommand_has_help(command: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*command, "--help"])
    assert exited.value.code == 0
    assert "usage: agentd " + " ".join(command) in capsys.readouterr().out


@pytest.mark.process
def test_the_console_script_runs_the_tour(tmp_path: Path) -> None:
    """The real executable, as a newcomer types it: init, add, list."""
    env = plain_env(tmp_path)
    config = str(REPO / "config" / "identity.example.toml")

    def agentd(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agentd", "--config", config, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )

    assert agentd("init").returncode == 0
    added = agentd("task", "add", "--type", "example", "--subject", "hi", "--payload", "{}")
    assert added.returncode == 0 and added.stdout.startswith("task 1 enqueued"), added.stderr
    listed = agentd("task", "list", "--json")
    assert '"subject": "hi"' in listed.stdout
    bad = agentd("task", "add", "--type", "example", "--priority", "0")
    assert bad.returncode == 2 and "--priority" in bad.stderr


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_no_tracked_file_holds_a_merge_conflict_marker() -> None:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no tracked files to look at")
    marker = re.compile(r"^(<{7} |>{7} |={7}$)", re.MULTILINE)
    found = []
    for name in listed.stdout.splitlines():
        path = REPO / name
        if path.is_file() and path.suffix not in (".png", ".jpg", ".db"):
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [f"{name}: {m.group(0)!r}" for m in marker.finditer(text)]
    assert found == []


# --- the suite's make targets name their slowest tests (docs/decisions.md, "The suite's time") ----------

SUITE_TARGETS = ("test", "test-fast", "test-slow")
MAKE_VARIABLE = re.compile(r"^([A-Z_]+)\s*:?=\s*(.*)$")


def pytest_runs(makefile: str) -> dict[str, list[str]]:
    """Each make target's recipe lines that run pytest, with the Makefile's own variables expanded."""
    variables: dict[str, str] = {}
    runs: dict[str, list[str]] = {}
    target = ""
    for line in makefile.splitlines():
        if defined := MAKE_VARIABLE.match(line):
            variables[defined[1]] = defined[2]
        elif rule := re.match(r"^([a-z][\w.-]*):", line):
            target = rule[1]
        elif line.startswith("\t") and "-m pytest" in line:
            expanded = re.sub(r"\$\((\w+)\)", lambda name: variables.get(name[1], name[0]), line)
            runs.setdefault(target, []).append(expanded)
    return runs


def without_durations(makefile: str) -> list[str]:
    runs = pytest_runs(makefile)
    return [name for name in SUITE_TARGETS if not runs.get(name) or "--durations=15" not in " ".join(runs[name])]


def test_each_run_of_the_suite_prints_its_15_slowest_tests() -> None:
    assert without_durations((REPO / "Makefile").read_text(encoding="utf-8")) == []


def test_the_durations_check_finds_a_target_that_prints_none() -> None:
    planted = (REPO / "Makefile").read_text(encoding="utf-8").replace("SLOWEST  := --durations=15", "SLOWEST  :=")
    assert without_durations(planted) == list(SUITE_TARGETS)
    assert without_durations("test:\n\techo no pytest here\n") == list(SUITE_TARGETS)
