"""docs/troubleshooting.md quotes the messages agentd really prints (issue 40, finding 8): each quoted
message (a `text` block's line, `…` for what differs from one agent to another) is printed by a real
`agentd` run of the failure it describes, or, where producing the failure needs what a test machine may
lack (a second dispatcher, PostgreSQL, a failed harness), is a string of agentd's source whose fixed
parts match."""

from __future__ import annotations

import ast
import json
import os
import re
import socket
import subprocess
from functools import cache
from pathlib import Path

import pytest
from support import EXAMPLE_CONFIG, REPO
from test_docs import BIN, fenced_blocks

PAGE = REPO / "docs" / "troubleshooting.md"
# The messages no run below produces, each with why: they are looked up in agentd's source instead.
SOURCE_ONLY = {
    "no structured outcome": "needs an attempt that ran and reported nothing",
    "boundary: attempts run as": "printed by `agentd status` only when the agent runs as root without run_as",
    "dispatch_locked:": "needs a second dispatcher holding the lock",
    "agentd: the fleet's database has no schema yet": "needs a PostgreSQL without the fleet's tables",
    "not started, as its tool calls could not be judged": "needs a run user that cannot start the hook's Python",
}
# What a location may put before a message: `agentd: `, `FILE: KEY: `, `boundary: ` (docs/design.md, "Errors").
LOCATION = r"(?:\S+: )*"
FIXED_CHARS = 20  # of a source string's own words, for it to count as a message


def quoted_messages(text: str) -> list[str]:
    """Every line of every `text` block of the page: one message each."""
    return [line for lang, body in fenced_blocks(text) if lang == "text" for line in body.splitlines() if line.strip()]


def shown(message: str) -> re.Pattern[str]:
    """A quoted message as a pattern for a printed line: `…` stands for any text."""
    return re.compile(".*?".join(re.escape(piece) for piece in message.split("…")))


def source_pattern(node: ast.Constant | ast.JoinedStr) -> re.Pattern[str] | None:
    """A string of agentd's source as a pattern for a message: an f-string's fields stand for any text,
    and so may a `%s` of a log line."""
    if isinstance(node, ast.Constant):
        parts = [node.value] if isinstance(node.value, str) else [None]
    else:
        parts = [v.value if isinstance(v, ast.Constant) else None for v in node.values]
    if sum(len(p) for p in parts if p is not None) < FIXED_CHARS:
        return None  # a word, a key or a bare `{a}: {b}`: it would match any message
    pieces = [".+?" if p is None else ".+?".join(re.escape(s) for s in str(p).split("%s")) for p in parts]
    return re.compile(LOCATION + "".join(pieces))


@cache
def source_patterns() -> tuple[re.Pattern[str], ...]:
    found = []
    for path in sorted((REPO / "agentd").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr | ast.Constant):
                pattern = source_pattern(node)
                if pattern is not None:
                    found.append(pattern)
    return tuple(found)


def in_source(message: str) -> bool:
    return any(p.fullmatch(message) for p in source_patterns())


def run(*args: str, env: dict[str, str], config: bool = True) -> str:
    """What `agentd ARGS` prints to stderr; it must fail (a failure is what the page describes)."""
    argv = [str(BIN / "agentd"), *(["--config", str(EXAMPLE_CONFIG)] if config else []), *args]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, f"{args} succeeded:\n{done.stdout}"
    return done.stderr


def printed_failures(tmp_path: Path) -> list[str]:
    """The lines agentd prints for the failures the page describes, made for real: no database, no
    config, a missing folder, an unknown type, a refused payload, a missing task, a fleet without a DSN, a port
    in use."""
    env = {k: v for k, v in os.environ.items() if k != "AGENTD_CONFIG" and not k.startswith("AGENTD_PATHS__")}
    env |= {"AGENTD_PATHS__STATE_DIR": str(tmp_path / "state"), "AGENTD_PATHS__WORKSPACE": str(tmp_path / "ws")}
    out = run("task", "list", env=env, config=False)
    subprocess.run(
        [str(BIN / "agentd"), "--config", str(EXAMPLE_CONFIG), "init"], env=env, check=True, capture_output=True
    )
    out += run("config", "check", env=env | {"AGENTD_PATHS__SKILLS_DIR": str(tmp_path / "nothing")})
    out += run("task", "add", "--type", "nope", "--subject", "x", env=env)
    out += run("task", "add", "--type", "example", "--subject", "x", "--payload", json.dumps({"bogus": 1}), env=env)
    out += run("task", "show", "99", env=env)
    out += run("fleet", "status", env=env)
    with socket.socket() as busy:  # a port something else listens on
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        out += run("dispatch", env=env | {"AGENTD_METRICS__DISPATCH_LISTEN": f"127.0.0.1:{busy.getsockname()[1]}"})
    return out.splitlines()


def test_the_page_quotes_messages_to_check() -> None:
    messages = quoted_messages(PAGE.read_text(encoding="utf-8"))
    assert len(messages) >= 10, messages
    assert all(not m.startswith("$ ") for m in messages), "a quoted message is a message, not a command"


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_each_quoted_message_is_one_agentd_prints(tmp_path: Path) -> None:
    printed = printed_failures(tmp_path)
    wrong = []
    for message in quoted_messages(PAGE.read_text(encoding="utf-8")):
        if any(message.startswith(start) for start in SOURCE_ONLY):
            if not in_source(message):
                wrong.append(f"not in agentd's source: {message}")
        elif not any(shown(message).fullmatch(line) for line in printed):
            wrong.append(f"no run printed: {message}")
    assert not wrong, "\n".join(wrong) + "\n--- the runs printed:\n" + "\n".join(printed)


def test_a_message_agentd_does_not_print_is_caught(tmp_path: Path) -> None:
    """The checks can fail: a changed word is neither printed nor in the source."""
    assert not in_source("dispatch_locked: another dispatcher has the lock (pid 1 on h, heartbeat 3s ago)")
    assert in_source(
        "dispatch_locked: another dispatcher holds the lock (pid … on …, heartbeat …s ago); only one runs per agent"
    )
    assert not shown("agentd: task 99 is missing").fullmatch(
        "agentd: task 99 does not exist; `agentd task list` shows the queue"
    )
