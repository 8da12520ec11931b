"""CLI manners (issue 21, finding 9): a closed stdout ends any command quietly, --help shows examples
that work, shell completion generated from the parser, `status --watch`. Real child processes and
real signals; nothing sleeps (waits are on output, with deadlines)."""

from __future__ import annotations

import argparse
import json
import os
import re
import selectors
import shlex
import shutil
import signal
import string
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import EXAMPLE_CONFIG, REPO, run_main, write_config

from agentd.cli import build_parser, main
from agentd.cli.examples import EXAMPLES

pytestmark = pytest.mark.process

SIGPIPE_STATUS = 128 + signal.SIGPIPE


@pytest.fixture
def agent_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> Iterator[dict[str, str]]:
    """An initialised example agent in tmp_path with one task: what the commands below read (made
    in-process, as the same commands would make it; the commands under test run as real processes)."""
    from agentd.cli import main

    overrides = {
        "AGENTD_CONFIG": str(EXAMPLE_CONFIG),
        "AGENTD_PATHS__STATE_DIR": str(tmp_path / "state"),
        "AGENTD_PATHS__WORKSPACE": str(tmp_path / "workspace"),
    }
    with monkeypatch.context() as patch:
        for name, value in overrides.items():
            patch.setenv(name, value)
        for argv in (["init"], ["task", "add", "--type", "example", "--subject", "hi"]):
            assert main(argv) == 0, capsys.readouterr()
    yield {**os.environ, **overrides}


def into_closed_pipe(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`agentd ARGV | head` whose reader is already gone: the first write meets a closed pipe."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "agentd", *argv],
            stdout=write,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)


READERS = [
    ["events"],
    ["events", "--json"],
    ["events", "--format", "agent-runtime"],
    ["task", "show", "1"],
    ["task", "list"],
    ["status"],
    ["status", "--json"],
    ["schedule", "list"],
    ["workflow", "list"],
    ["sensor", "list"],
    ["skills", "list"],
    ["identity", "show"],
    ["cost"],
    ["--help"],
    ["task", "add", "--help"],
    ["--version"],
    ["completion", "bash"],
]


@pytest.mark.parametrize("argv", READERS, ids=" ".join)
def test_a_closed_stdout_ends_any_command_quietly(agent_env: dict[str, str], argv: list[str]) -> None:
    done = into_closed_pipe(argv, agent_env)
    assert done.stderr == "", done.stderr
    argparse_own = argv[-1] in ("--help", "--version")  # argparse drops a failed write of these itself
    assert done.returncode == (0 if argparse_own else SIGPIPE_STATUS)


def test_events_follow_ends_quietly_when_its_reader_goes(agent_env: dict[str, str]) -> None:
    argv = [sys.executable, "-m", "agentd", "events", "--follow"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=agent_env, text=True) as follower:
        try:
            assert follower.stdout is not None and follower.stderr is not None
            assert "SEQ" in follower.stdout.readline()  # it follows from now: the header first
            follower.stdout.close()  # `| head -1` exits
            added = ["task", "add", "--type", "example", "--subject", "more"]
            subprocess.run([sys.executable, "-m", "agentd", *added], env=agent_env, check=True, timeout=60)
            assert follower.wait(timeout=30) == SIGPIPE_STATUS
            assert follower.stderr.read() == ""
        finally:
            follower.kill()


def test_only_a_stdout_whose_reader_is_gone_counts_as_closed() -> None:
    """Another broken pipe (a socket a command wrote to) is not mistaken for `| head`: it still fails."""
    from agentd.cli import stdout_reader_gone

    read, write = os.pipe()
    try:
        assert not stdout_reader_gone(write)
        os.close(read)
        read = -1
        assert stdout_reader_gone(write)
    finally:
        os.close(write)
        if read >= 0:
            os.close(read)


# --- status --watch ----------------------------------------------------------------------------


def read_lines_until(stream: object, count: int, marker: str, timeout: float) -> list[str]:
    """Lines from a child's stdout until `count` of them contain `marker` (a hard deadline)."""
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)  # type: ignore[arg-type]
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while sum(marker in line for line in lines) < count:
        left = deadline - time.monotonic()
        assert left > 0 and selector.select(left), f"timed out; got {lines!r}"
        line = stream.readline()  # type: ignore[attr-defined]
        assert line, f"the watcher ended early; got {lines!r}"
        lines.append(line)
    return lines


def ctrl_c_reaches() -> None:
    """In the child before exec: SIGINT at its default, as in a terminal's foreground job. A suite run as a
    background job (`make test &`) inherits SIGINT ignored, and Python keeps ignoring an ignored SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_status_watch_redraws_until_ctrl_c(agent_env: dict[str, str]) -> None:
    argv = [sys.executable, "-m", "agentd", "status", "--watch", "0.2"]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=agent_env, text=True, preexec_fn=ctrl_c_reaches
    ) as watcher:
        try:
            assert watcher.stdout is not None and watcher.stderr is not None
            lines = read_lines_until(watcher.stdout, 2, "tasks    ", timeout=30)
            assert sum("every 0.2s" in line for line in lines) >= 2, lines
            watcher.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal does
            assert watcher.wait(timeout=30) == 0
            assert watcher.stderr.read() == ""
        finally:
            watcher.kill()


def test_ctrl_c_in_the_middle_of_a_frame_finishes_it_then_ends_the_watch(agent_env: dict[str, str]) -> None:
    """Ctrl-C while a frame is drawn (here the first, on the full path: ~0.3 s of imports) ends the
    watch once that frame is whole: exit 0, nothing on stderr. A KeyboardInterrupt in the middle of an
    import or a read cut the frame short, and now and then ended the process by the signal itself
    (exit -2, no traceback) or was lost and the watch went on."""
    state = Path(agent_env["AGENTD_PATHS__STATE_DIR"])
    (state / "config-cache.json").unlink()  # the full path: a frame long enough to be interrupted
    argv = [sys.executable, "-m", "agentd", "status", "--watch", "30"]
    env = {**agent_env, "PYTHONUNBUFFERED": "1"}  # the header line comes out before the frame is drawn
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True, preexec_fn=ctrl_c_reaches
    ) as watcher:
        try:
            assert watcher.stdout is not None
            assert "every 30s" in watcher.stdout.readline()
            watcher.send_signal(signal.SIGINT)  # the frame is being drawn now
            out, err = watcher.communicate(timeout=30)
        finally:
            watcher.kill()
    assert (watcher.returncode, err) == (0, "")
    assert "tasks    pending 1" in out, out  # the frame was finished
    assert "every 30s" not in out  # and no other begun


def test_status_watch_refuses_a_bad_interval(agent_env: dict[str, str]) -> None:
    for bad in ("0", "-1", "soon", "nan"):
        done = subprocess.run(
            [sys.executable, "-m", "agentd", "status", "--watch", bad],
            env=agent_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"--watch: expected a number of seconds above 0, found {bad!r}" in done.stderr, done.stderr


# --- --help examples ---------------------------------------------------------------------------


def agentd_argv(line: str) -> list[str]:
    """The agentd arguments of an example line (`source <(agentd completion bash)` -> completion bash)."""
    inner = line.split("agentd ", 1)[1]
    return shlex.split(re.split(r"[)>]", inner, maxsplit=1)[0])


def command_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every command path with its parser, walked from argparse itself (not from agentd's walker)."""
    found = {path: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(command_paths(sub, (*path, name)))
    return found


# Examples parsed, never run here, each for its reason: they would run for good or wait for Ctrl-C, act on
# this machine or on another agent, need PostgreSQL (tests/test_fleet_*.py run those), write files
# outside the scratch agent, or act on a record the scratch agent never makes (an attempt id, a workflow
# still active or blocked, a second held task, a constitution proposal, a failed outbox entry).
NOT_RUN = ("--follow", "--watch", "install", "uninstall", "--agent", "--config", "fleet", "export")
SERVICES = (["dispatch"], ["sensors"], ["run"], ["web"])
NEEDS_A_RECORD = (
    ["replay"],
    ["workflow", "signal"],
    ["workflow", "unblock"],
    ["workflow", "cancel"],
    ["constitution"],
    ["deny"],
    ["outbox", "retry"],
    ["ask"],  # only inside an attempt, whose policy socket answers it
    ["task", "complete"],  # they close the tasks the examples after them use
    ["task", "fail"],
)


def harmless(argv: list[str]) -> bool:
    service = argv in SERVICES or (argv[:1] == ["web"] and argv[1:2] != ["token"]) or argv[:1] == ["demo-model"]
    needs = any(argv[: len(path)] == path for path in NEEDS_A_RECORD) and argv[:2] != ["constitution", "proposals"]
    return not service and not needs and not any(word in NOT_RUN for word in argv)


def test_help_ends_with_examples_for_the_main_commands(capsys: pytest.CaptureFixture[str]) -> None:
    for words in [(), ("task", "add"), ("events",), ("status",), ("completion",)]:
        with pytest.raises(SystemExit):
            build_parser().parse_args([*words, "--help"])
        help_text = capsys.readouterr().out
        assert "\nexamples:\n" in help_text, words
        for command, what in EXAMPLES[words]:
            assert f"  {command}\n      {what}\n" in help_text, "kept as written, not re-wrapped"


def commands_that_run(parser: argparse.ArgumentParser) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command path a person can run (it has a handler): each leaf, and a group that is a service of
    its own (`agentd dispatch`, `agentd web`)."""
    return {path: sub for path, sub in command_paths(parser).items() if path and sub.get_default("handler")}


def test_every_command_help_ends_with_examples(capsys: pytest.CaptureFixture[str]) -> None:
    """README: "`agentd COMMAND --help` ends with examples", held for every command there is (issue 40, 4)."""
    commands = commands_that_run(build_parser())
    assert len(commands) >= 50, "the walk found far fewer commands than agentd has"
    missing = []
    for path in commands:
        with pytest.raises(SystemExit):
            build_parser().parse_args([*path, "--help"])
        help_text = capsys.readouterr().out
        if path not in EXAMPLES or not help_text.rstrip().endswith(EXAMPLES[path][-1][1]):
            missing.append(" ".join(path))
    assert missing == []


def test_every_argument_of_every_command_says_what_it_is() -> None:
    """No bare `ID` in a usage: each positional and option of every command has its help line."""
    bare = []
    for path, sub in command_paths(build_parser()).items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction | argparse._VersionAction):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                named = "/".join(action.option_strings) or action.metavar or action.dest
                bare.append(f"agentd {' '.join(path)} {named}")
    assert bare == []


def test_every_help_example_names_a_command_and_parses() -> None:
    parser = build_parser()
    paths = command_paths(parser)
    assert set(EXAMPLES) <= set(paths), "an example for a command that does not exist"
    for path, examples in EXAMPLES.items():
        for line, _ in examples:
            argv = agentd_argv(line)
            args = parser.parse_args(argv)  # a usage error raises CommandError here
            if path and paths[path].get_default("handler") is not None:
                assert args.handler is paths[path].get_default("handler"), (line, path)
            elif path:  # a group's (`agentd task --help`): one of its own commands
                assert tuple(argv[: len(path)]) == path and args.handler is not None, (line, path)


def test_the_harmless_help_examples_run_against_a_scratch_agent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    ran = []
    for _, examples in EXAMPLES.items():
        for line, _ in examples:
            argv = agentd_argv(line)
            if harmless(argv):
                result = run_main(capsys, config, *argv)
                assert result.code == 0, (line, result.err)
                ran.append(line)
    assert len(ran) >= 20 and any("dispatch --until-idle" in line for line in ran)


# --- shell completion --------------------------------------------------------------------------


def completion_script(shell: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "agentd", "completion", shell], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


def bash_completes(script: str, lines: list[list[str]]) -> list[set[str]]:
    """What bash's own completion offers for each line (its last word the one being completed): the
    script sourced into a real `bash -c`, then _agentd called as `complete -F` would, with COMP_WORDS."""
    calls = "".join(
        f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); COMP_CWORD={len(words) - 1}; COMPREPLY=(); "
        '_agentd; printf "%s\\n" "${COMPREPLY[*]}"\n'
        for words in lines
    )
    return offered_by(["bash", "-c", 'source <(cat "$1")\n' + calls, "bash", "/dev/stdin"], script)


def offered_by(argv: list[str], script: str) -> list[set[str]]:
    """The words a shell run as `argv`, the completion script on its stdin, printed for each line."""
    done = subprocess.run(argv, input=script, capture_output=True, text=True, check=True, timeout=60)
    assert done.stderr == ""
    return [set(line.split()) for line in done.stdout.splitlines()]


def every_word(paths: dict[tuple[str, ...], Any]) -> list[tuple[list[str], set[str]]]:
    """(a line to complete, the words it must offer): for every command, its subcommands after a
    space, and after a dash all of its options."""
    cases = []
    for path, parser in paths.items():
        subcommands = set(command_paths(parser)) - {()}
        cases.append((["agentd", *path, ""], {words[0] for words in subcommands}))
        options = {o for action in parser._actions for o in action.option_strings}
        cases.append((["agentd", *path, "-"], options))
    return cases


def test_bash_completion_offers_every_subcommand_and_option() -> None:
    cases = every_word(command_paths(build_parser()))
    offered = bash_completes(completion_script("bash"), [line for line, _ in cases])
    missing = {
        " ".join(line): sorted(want - got) for (line, want), got in zip(cases, offered, strict=True) if want - got
    }
    assert missing == {}
    assert len(cases) > 100


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (["agentd", "ta"], {"task"}),
        (["agentd", "--config", "task", "ev"], {"events"}),  # an option's value is skipped, not a command
        (["agentd", "task", "list", "--status", ""], {"pending", "running", "completed", "blocked"}),
        (["agentd", "events", "--format", "a"], {"agent-runtime"}),
        (["agentd", "completion", ""], {"bash", "zsh"}),
        (["agentd", "status", "--w"], {"--watch"}),
        (["agentd", "task", "show", ""], set()),  # an id: nothing to offer (bash falls back to files)
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_bash_completion_follows_the_words_typed(line: list[str], expected: set[str]) -> None:
    [offered] = bash_completes(completion_script("bash"), [line])
    assert expected <= offered and (offered or not expected)
    if not expected:
        assert offered == set()


def zsh_completes(script: str, lines: list[list[str]]) -> list[set[str]]:
    """The zsh script's function called as the completion system would (words, CURRENT); compadd and
    _files, which only work inside a completion widget, print what they are given instead."""
    calls = "".join(
        f"words=({' '.join(shlex.quote(w) for w in words)}); CURRENT={len(words)}; _agentd; print\n" for words in lines
    )
    stubs = "compdef() { :; }; compadd() { print -rn -- ${@:2} ''; }; _files() { print -rn -- FILES ''; }\n"
    return offered_by(["zsh", "-f", "-c", stubs + 'source "$1"\n' + calls, "zsh", "/dev/stdin"], script)


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed on this machine")
def test_zsh_completion_offers_every_subcommand_and_option() -> None:
    cases = every_word(command_paths(build_parser()))
    cases.append((["agentd", "task", "list", "--status", ""], {"pending", "operator_canceled"}))
    cases.append((["agentd", "--config", ""], {"FILES"}))
    offered = zsh_completes(completion_script("zsh"), [line for line, _ in cases])
    missing = {
        " ".join(line): sorted(want - got) for (line, want), got in zip(cases, offered, strict=True) if want - got
    }
    assert missing == {}


def test_completion_is_generated_when_asked_and_costs_other_commands_nothing() -> None:
    """The script is built from the parser on demand: no file to keep in step, no import at start-up."""
    import agentd.cli.completion as completion

    assert "build_parser" not in dir(completion), "the tree is read only inside `agentd completion`"
    assert not list((REPO / "agentd").rglob("*complet*.sh")) and not list((REPO / "agentd").rglob("_agentd"))


HUGE = "9" * 100_000


@pytest.mark.parametrize(
    "argv",
    [
        ["task", "show", HUGE],
        ["events", "--limit", HUGE],
        ["events", "--since", HUGE],
        ["task", "add", "--type", "example", "--subject", "s", "--delay", HUGE],
        ["web", "token", "add", "n" * 100_000],
        ["evidence", "verify", "--expect-head", HUGE],
        ["status", "--watch", HUGE + "x"],
        ["task", "list", "--status", "s" * 100_000],
        ["task", "list", "--no-such-option", "x" * 100_000],
        ["workflow", "start", "goal-loop", "k" * 100_000],
        ["schedule", "rm", "k" * 100_000],
        ["schedule", "add", "k" * 100_000, "--every", "1d", "--type", "example", "--subject", "s"],
        ["sensor", "run", "s" * 100_000],
    ],
    ids=[
        *("an id", "a count", "a time", "a duration", "a token name", "a head", "an interval", "a choice"),
        *("unknown", "a workflow key", "a schedule to remove", "a schedule to add", "a sensor"),
    ],
)
def test_a_huge_bad_argument_is_named_in_one_short_line(
    capsys: pytest.CaptureFixture[str], state_dir: Path, argv: list[str]
) -> None:
    """What was wrong and what was expected, with the value cut in the middle: not 100 kB echoed back."""
    assert run_main(capsys, EXAMPLE_CONFIG, "init").code == 0
    refused = run_main(capsys, EXAMPLE_CONFIG, *argv)
    assert refused.code == 2, refused
    [line] = refused.err.splitlines()
    assert len(line) < 600 and ("(100,00" in line or "100000 characters, expected at most" in line), line


@pytest.mark.process
@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_an_output_encoding_that_cannot_hold_a_character_gets_escapes_and_json_stays_json(
    agent_env: dict[str, str], encoding: str
) -> None:
    """A Latin-1 locale or PYTHONIOENCODING=ascii: text shows \\u escapes, JSON keeps its values."""
    env = {**agent_env, "PYTHONIOENCODING": encoding}

    def agentd(*argv: str) -> tuple[int, str, str]:
        done = subprocess.run([sys.executable, "-m", "agentd", *argv], capture_output=True, env=env, timeout=60)
        return done.returncode, done.stdout.decode(encoding), done.stderr.decode(encoding)

    subject = "snow \u2603, smile \U0001f600"  # neither fits ascii or latin-1
    assert agentd("task", "add", "--type", "example", "--subject", subject)[0] == 0
    code, out, err = agentd("task", "list")
    assert code == 0 and "Traceback" not in err, err
    assert "snow \\u2603, smile \\ud83d\\ude00" in out
    code, out, _ = agentd("task", "show", "2", "--json")
    assert code == 0 and json.loads(out)["task"]["subject"] == subject
    code, out, _ = agentd("task", "list", "--json")
    assert code == 0 and subject in [task["subject"] for task in json.loads(out)]
    code, out, _ = agentd("events", "--json")
    assert code == 0 and [json.loads(line)["type"] for line in out.splitlines()][-1] == "task_enqueued"
    code, _, err = agentd("task", "add", "--type", "nope", "--subject", subject)
    assert code == 2 and "Traceback" not in err and "unknown task type 'nope'" in err


@pytest.mark.parametrize("how", ["moved away", "replaced"])
def test_events_follow_ends_with_one_line_when_its_database_goes(agent_env: dict[str, str], how: str) -> None:
    """A follower of a database that was moved away or replaced would print nothing new for ever and look
    like a quiet agent: it says what happened and stops instead."""
    follower = subprocess.Popen(
        [sys.executable, "-m", "agentd", "events", "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=agent_env,
        text=True,
    )
    try:
        assert follower.stdout is not None
        follower.stdout.readline()  # the header: it is following now
        db = Path(agent_env["AGENTD_PATHS__STATE_DIR"]) / "agentd.db"
        db.rename(db.with_name("moved.db"))
        if how == "replaced":
            shutil.copyfile(db.with_name("moved.db"), db)
        _, err = follower.communicate(timeout=20)
    finally:
        follower.kill()
    assert follower.returncode == 2, err
    [line] = err.splitlines()
    gone = "deleted (or moved away)" if how == "moved away" else "replaced by another file"
    assert gone in line and "this command stops rather than go on reading what no one writes any more" in line


# --- the groups' examples and "did you mean" (issue 52, finding 9) --------------------------------


@pytest.mark.parametrize("group", [("task",), ("evidence",), ("policy",), ("workflow",), ("fleet",), ("web", "token")])
def test_a_group_s_help_ends_with_examples_of_its_commands(group: tuple[str, ...], capsys: Any) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*group, "--help"])
    help_text = capsys.readouterr().out
    assert "\nexamples:\n" in help_text and len(EXAMPLES[group]) >= 2
    for command, what in EXAMPLES[group]:
        assert command.startswith(f"agentd {' '.join(group)} ") and f"  {command}\n      {what}\n" in help_text


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["stauts"], "agentd: unknown command 'stauts'; did you mean 'status'"),
        (["task", "lsit"], "agentd: task: unknown command 'lsit'; did you mean 'list'?; see `agentd task --help`"),
        (["web", "tokn", "list"], "agentd: web: unknown command 'tokn'; did you mean 'token'?"),
        (["evidence", "verfy"], "agentd: evidence: unknown command 'verfy'; did you mean 'verify'?"),
        (["dis"], "agentd: unknown command 'dis'; did you mean 'dispatch'?"),
        (["xyzzy"], "agentd: unknown command 'xyzzy' (the commands: init, migrate, config,"),
    ],
)
def test_a_mistyped_command_says_what_was_meant(argv: list[str], said: str, capsys: Any) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and len(err.splitlines()) == 1, err


@given(st.text(alphabet=string.ascii_lowercase + "-", min_size=1, max_size=12))
def test_did_you_mean_only_offers_commands_there_are(word: str) -> None:
    from agentd.cli.common import did_you_mean

    choices = ["status", "task", "events", "evidence"]
    message = f"argument COMMAND: invalid choice: '{word}' (choose from {', '.join(map(repr, choices))})"
    said = did_you_mean(message)
    if word in choices:
        return
    assert said.startswith(f"unknown command {word!r}")
    offered = re.findall(r"'([^']*)'", said.split(";", 1)[1]) if "did you mean" in said else []
    assert set(offered) <= set(choices) and len(offered) <= 3
    assert did_you_mean("the argument --limit: expected a number") == "the argument --limit: expected a number"
