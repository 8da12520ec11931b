"""Every `agentd …` the README, docs/ and agentd's own docstrings name is a command agentd has, with options
it takes (issue 40, finding 2): a fenced block's lines are parsed whole by tests/test_docs.py, an inline
mention (prose, a table's cell, a docstring) here, placeholders allowed; and every shell session a page
shows (a `console` block of `$ ` lines) is run as written, its output compared line by line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import REPO
from test_docs import BIN, DOCS, code_blocks, fenced_blocks, shown_commands

from agentd.cli import build_parser

# Words that stand for a command or a value in a mention (`agentd COMMAND --help`, `agentd …`).
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*|…|\.\.\.|<[^>]*>|\[.*")


def inline_mentions(text: str, *, wrapped: bool = True) -> list[list[str]]:
    """The arguments of each `agentd …` an inline code span names, outside fenced blocks: in prose, in a
    table's cell, in a list, in a docstring or comment. In Markdown a span may wrap onto the next line
    (`wrapped`); in source, whose strings hold stray backticks, a span is one line."""
    text = re.sub(r"^(`{3,})\w*\n.*?^\1$", "", text, flags=re.MULTILINE | re.DOTALL)
    found = []
    for span in re.findall(r"(?<!`)`([^`]+)`(?!`)" if wrapped else r"(?<!`)`([^`\n]+)`(?!`)", text):
        span = " ".join(span.split()) if "\n\n" not in span else ""  # a span may wrap; a paragraph ends it
        if re.search(r"(^|[\s(;|&])agentd(\s|$)", span):
            try:
                found += shown_commands(span)
            except ValueError:  # an unbalanced quote in a placeholder (`<the services' user>`)
                found += shown_commands(span.replace("'", ""))
    return found


def _global_options(parser: Any) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def mention_problem(argv: list[str]) -> str | None:
    """Why a mention of a command does not name one agentd has, or names an option it lacks; None when it
    does. A mention may use placeholders (ID, N, `COMMAND`, `…`, `[--reason R]`) and may stop at a group
    (`agentd fleet`); every word it gives as a command must be one, and every option one the command takes."""
    import argparse

    parser: Any = build_parser()
    words = list(argv)
    while words:
        word = words[0]
        if word in ("--config", "--agent") and len(words) > 1:
            words = words[2:]
            continue
        subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if word.startswith("-") or not subcommands:
            break
        if PLACEHOLDER.fullmatch(word):
            return None  # `agentd COMMAND --help`: any command
        choices = subcommands[0].choices
        unknown = [name for name in word.split("|") if name not in choices]  # `agentd dispatch pause|resume`
        if unknown:
            return f"no command {unknown[0]!r} (`{parser.prog} --help` lists them)"
        parser, words = choices[word.split("|")[0]], words[1:]
    flags = _global_options(parser)
    for word in words:
        for part in re.split(r"[\[\]|]", word):
            name = part.split("=", 1)[0]
            if name.startswith("-") and name not in (*flags, "-", "--") and not name.lstrip("-").isdigit():
                return f"no option {name} (`{parser.prog} --help` lists them)"
    return None


MENTIONING_TREES = ("agentd",)


def mentioning_files() -> list[Path]:
    """The README, docs/, and agentd's own source (its docstrings and comments name commands too)."""
    return [*DOCS, *(p for tree in MENTIONING_TREES for p in sorted((REPO / tree).rglob("*.py")))]


def test_every_agentd_command_mentioned_inline_is_one_agentd_has() -> None:
    """A command named in prose, a table or a docstring (`agentd task cancel ID`) is one agentd has, with
    options it takes: docs/web.md's API table once named five that did not exist (issue 40, finding 2)."""
    shown, refused = 0, []
    for path in mentioning_files():
        for argv in inline_mentions(path.read_text(encoding="utf-8"), wrapped=path.suffix == ".md"):
            shown += 1
            problem = mention_problem(argv)
            if problem:
                refused.append(f"{path.relative_to(REPO)}: agentd {' '.join(argv)}: {problem}")
    assert refused == []
    assert shown >= 200, "the docs mention far fewer commands than they did: is the span reader broken?"


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["task", "cancel", "ID"], False),
        (["COMMAND", "--help"], False),
        (["…"], False),
        (["fleet"], False),
        (["--config", "config/identity.example.toml"], False),
        (["dispatch", "pause", "[--reason", "R]"], False),
        (["outbox", "list", "[--state", "pending|failed]", "[--limit", "N]", "[--json]"], False),
        (["dispatch", "--until-idle"], False),
        (["cancel", "ID"], True),
        (["pause"], True),
        (["show", "--json"], True),
        (["fleet", "intake"], True),
        (["dispatch", "pause|resume"], False),
        (["dispatch", "pause|stop"], True),
        (["task", "add", "--batch", "-"], False),
        (["task", "show", "--all"], True),
        (["approvals", "[--all]"], True),
    ],
)
def test_the_mention_check_refuses_what_agentd_lacks(argv: list[str], refused: bool) -> None:
    assert (mention_problem(argv) is not None) is refused, mention_problem(argv)


# --- sessions: the `console` blocks, run as written -----------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One `$ ` line of a session and the output the page shows under it."""

    command: str
    shown: tuple[str, ...]


def session_steps(block: str) -> list[Step]:
    """The steps of a `console` block: each `$ ` line (a trailing `\\` joins the next), then its output."""
    steps: list[Step] = []
    lines = block.splitlines()
    while lines:
        line = lines.pop(0)
        if not line.startswith("$ "):
            raise AssertionError(f"a session's output comes after a `$ ` line: {line!r}")
        command = line[2:]
        while command.endswith("\\") and lines:
            command = command[:-1] + lines.pop(0)
        shown = []
        while lines and not lines[0].startswith("$ "):
            shown.append(lines.pop(0).rstrip())
        steps.append(Step(command, tuple(shown)))
    return steps


def page_sessions(doc: Path) -> list[Step]:
    """Every step of every `console` block of a page, in order: a reader follows a page top to bottom."""
    blocks = [body for lang, body in fenced_blocks(doc.read_text(encoding="utf-8")) if lang == "console"]
    return [step for block in blocks for step in session_steps(block)]


def output_pattern(shown: tuple[str, ...]) -> re.Pattern[str]:
    """What a step's output must be: its lines as shown, where a line `…` stands for any lines (or none)
    and a `…` within a line for any text."""
    parts = []
    for line in shown:
        if line == "…":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(piece) for piece in line.split("…")) + r"[ \t]*\n")
    return re.compile("".join(parts))


def differs(step: Step, output: str) -> str | None:
    """How a step's real output differs from what the page shows; None when it matches."""
    text = "".join(line.rstrip() + "\n" for line in output.splitlines())
    if output_pattern(step.shown).fullmatch(text):
        return None
    return f"$ {step.command}\n--- the page shows:\n" + "\n".join(step.shown) + "\n--- it printed:\n" + text


def run_session(steps: list[Step], cwd: Path, env: dict[str, str]) -> list[str]:
    """Run the steps in one bash, in order (an `export` or `cd` holds for the steps after it, as in a
    reader's terminal), stderr with stdout; what differs from the page, step by step."""
    marker = f"@@step-{os.getpid()}@@"
    script = "exec 2>&1\n" + "".join(f"echo {marker}\n{step.command}\n" for step in steps)
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    outputs = done.stdout.split(marker + "\n")[1:]
    assert len(outputs) == len(steps), done.stdout[-3000:]
    return [problem for step, out in zip(steps, outputs, strict=True) if (problem := differs(step, out))]


def fresh_clone(root: Path) -> Path:
    """What a reader has after `git clone` and the README's first step: the repository's config, skills,
    sensors and Makefile, and its .venv (linked: the one this suite runs in)."""
    clone = root / "agentd"
    clone.mkdir()
    for folder in ("config", "skills", "sensors"):
        shutil.copytree(REPO / folder, clone / folder)
    for name in ("Makefile", "pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, clone / name)  # its time kept: make finds .venv up to date
    (clone / ".venv").symlink_to(REPO / ".venv")
    return clone


def reader_env(home: Path) -> dict[str, str]:
    """A reader's terminal after the README's first lines: the venv on PATH, the example config chosen."""
    return {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "AGENTD_CONFIG": "config/identity.example.toml",
    }


SESSION_PAGES = [doc for doc in DOCS if page_sessions(doc)]


def test_a_block_of_prompted_lines_is_a_session_block() -> None:
    """A block showing `$ ` lines is marked `console`, so the session test runs it: none is shown unrun."""
    unmarked = [
        f"{doc.relative_to(REPO)}: a ```{lang} block with `$ ` lines"
        for doc in DOCS
        for lang, body in fenced_blocks(doc.read_text(encoding="utf-8"))
        if lang != "console" and any(line.startswith("$ ") for line in body.splitlines())
    ]
    assert unmarked == []
    assert len(SESSION_PAGES) >= 1


@pytest.mark.process
@pytest.mark.parametrize("doc", SESSION_PAGES, ids=lambda doc: doc.name)
def test_every_session_a_page_shows_runs_as_shown(doc: Path, tmp_path: Path) -> None:
    """Each page's sessions, in order, in a fresh clone of its own: every output as the page shows it."""
    clone = fresh_clone(tmp_path)
    with SETUP.get(doc.name, no_setup)(clone) as extra:
        problems = run_session(page_sessions(doc), clone, {**reader_env(tmp_path), **extra})
    assert problems == [], "\n\n".join(problems)


@contextmanager
def no_setup(clone: Path) -> Iterator[dict[str, str]]:
    yield {}


@contextmanager
def after_the_tour(clone: Path) -> Iterator[dict[str, str]]:
    """The README's session follows its tour, whose first step made the database."""
    env = reader_env(clone.parent)
    subprocess.run([BIN / "agentd", "init"], cwd=clone, env=env, check=True, capture_output=True, timeout=60)
    yield {}


@contextmanager
def script_adapter_saved(clone: Path) -> Iterator[dict[str, str]]:
    """What docs/adapters.md says to do with its two blocks before its session: save the script as
    `scripts/wordcount.py` beside the identity TOML, `chmod +x` it, and add the TOML to that file."""
    [(lang, script), (toml_lang, toml)] = code_blocks("Write your own script adapter")[:2]
    assert (lang, toml_lang) == ("python", "toml")
    saved = clone / "config" / "scripts" / "wordcount.py"
    saved.write_text(script)
    saved.chmod(0o755)
    config = clone / "config" / "identity.example.toml"
    config.write_text(config.read_text() + "\n" + toml)
    yield {}


@contextmanager
def a_model_connected(clone: Path) -> Iterator[dict[str, str]]:
    """docs/connect-a-model.md's ollama TOML added to the identity TOML, the fake model server (tests/fakemodel)
    standing in for ollama at the address it names: the one change is the port, which the OS picks."""
    from fakemodel import FakeModelServer, Reply

    [(lang, toml)] = [block for block in code_blocks("ollama") if block[0] == "toml"]
    model = re.search(r'^model = "([^"]+)"', toml, re.MULTILINE)
    assert lang == "toml" and model is not None and 'endpoint = "http://127.0.0.1:11434"' in toml
    outcome = {"status": "completed", "machine_status": "ok", "operator_summary": "hello"}
    answer = Reply("Hello.\n```json\n" + json.dumps(outcome) + "\n```\n")
    with FakeModelServer([answer], models=[model.group(1)]) as fake:
        config = clone / "config" / "identity.example.toml"
        config.write_text(config.read_text() + "\n" + toml.replace("http://127.0.0.1:11434", fake.url))
        yield {}
        assert fake.turns_left == 0, "the task went to the model"


SETUP: dict[str, Callable[[Path], AbstractContextManager[dict[str, str]]]] = {
    "connect-a-model.md": a_model_connected,
    "README.md": after_the_tour,
    "adapters.md": script_adapter_saved,
}


@pytest.mark.parametrize(
    ("shown", "printed", "same"),
    [
        (("a", "b"), "a\nb\n", True),
        (("a", "b"), "a\nc\n", False),
        (("a",), "a\nb\n", False),
        (("a", "…"), "a\nb\nc\n", True),
        (("…", "c"), "a\nb\nc\n", True),
        (("task … enqueued",), "task 12 enqueued\n", True),
        (("task … enqueued",), "task 12 refused\n", False),
        ((), "", True),
        ((), "noise\n", False),
    ],
)
def test_a_step_matches_its_output_line_by_line(shown: tuple[str, ...], printed: str, same: bool) -> None:
    assert (differs(Step("x", shown), printed) is None) is same


# --- numbers: what the suite takes is measured, not remembered --------------------------------------------

# The suite's own targets, and the words the docs use for a whole run of one.
SUITE = re.compile(
    r"make (?:test|test-fast|test-slow|test-harness|test-system)\b|[Tt]he (?:whole )?suite|[Tt]he whole run"
)
# A measured duration or count of tests; a goal is written with ≤ (`make test` ≤ 90 s) and is not one.
MEASURED = re.compile(
    r"(?<!≤ )(?<![\d,.])(?:~|about )?\d[\d,.]*\s*(?:s|min|minutes?|seconds?|hours?)\b|½ min|\d[\d,]* tests\b"
)
# Pages whose numbers a build writes: make bench's goals table (tests/test_docs.py holds it to bench/).
WRITTEN_BY_A_BUILD = ("benchmarks.md",)


def remembered_numbers(text: str) -> list[str]:
    """Each sentence (or table row, or line of a block) that says how long the suite or one of its targets
    takes, or how many tests it has: numbers that go stale the day a test is added (issue 40, finding 1)."""
    found = []
    for para in re.split(r"\n\s*\n|\n(?=```)", text):
        lined = para.startswith(("```", "|"))
        units = para.splitlines() if lined else re.split(r"(?<=[.;])\s+", " ".join(para.split()))
        found += [" ".join(unit.split())[:200] for unit in units if SUITE.search(unit) and MEASURED.search(unit)]
    return found


def test_the_docs_give_no_remembered_time_or_count_of_the_suite() -> None:
    """`make test` prints what it took (tests/conftest.py); the docs do not repeat a number that was true
    once. A goal (≤ 90 s) may be stated."""
    stale = [
        f"{doc.relative_to(REPO)}: {found}"
        for doc in DOCS
        if doc.name not in WRITTEN_BY_A_BUILD
        for found in remembered_numbers(doc.read_text(encoding="utf-8"))
    ]
    assert stale == []


@pytest.mark.parametrize(
    ("text", "stale"),
    [
        ("make test   # runs the whole suite (~1½ min on 2 cores)\n", True),
        ("docs/testing.md says about 1,360 tests, 80–100 s for `make test`.", True),
        ("`make test-harness` installs the CLIs (~870 MB, ~35 s).", True),
        ("The whole run takes about 8 minutes.", True),
        ("The target is `make test` ≤ 90 s.", False),
        ("`make test` runs the fast and process tiers.", False),
        ("The dispatcher drains 200 tasks in 12 s.", False),
    ],
)
def test_the_number_check_finds_a_remembered_time(text: str, stale: bool) -> None:
    assert bool(remembered_numbers(text)) is stale


# --- metrics: a doc says of a metric only what it is ------------------------------------------------------


def metric_claims(text: str) -> list[tuple[str, set[str], str]]:
    """(metric, labels claimed, where) for each `name{labels}` a doc writes, and for each metric named in a
    sentence that says its metrics carry a `label` ("each with an `agent` label")."""
    claims = []
    for name, labels in re.findall(r"(agentd_\w+)\{([^}]*)\}", text):
        claimed = {part.split("=")[0].strip() for part in labels.split(",") if part.strip()}
        claims.append((name, claimed, f"{name}{{{labels}}}"))
    for sentence in re.split(r"(?<=[.;])\s+", " ".join(text.split())):
        said = set(re.findall(r"`(\w+)` label", sentence))
        if said and not re.search(r"\bno `\w+` label", sentence):
            claims += [(name, said, sentence[:120]) for name in re.findall(r"`(agentd_\w+)`", sentence)]
    return claims


def test_what_the_docs_say_of_a_metrics_labels_is_what_it_has() -> None:
    """docs/fleet.md once said every fleet metric carries an `agent` label; none does (the scrape target
    names the agent: monitoring/README.md)."""
    from agentd.outlook.metric_specs import CATALOGUE

    labels = {spec.exposed: set(spec.labels) for spec in CATALOGUE}
    labels |= {spec.exposed.removesuffix("_total"): set(spec.labels) for spec in CATALOGUE}
    wrong = [
        f"{doc.relative_to(REPO)}: {where}: {name} has {sorted(labels[name]) or 'no labels'}"
        for doc in DOCS
        for name, claimed, where in metric_claims(doc.read_text(encoding="utf-8"))
        if name in labels and not claimed <= labels[name]
    ]
    assert wrong == []


def test_the_label_check_reads_both_forms() -> None:
    text = "The dispatcher serves (each with an `agent` label): `agentd_fleet_reachable`. `agentd_tasks{status}`"
    assert metric_claims(text) == [
        ("agentd_tasks", {"status"}, "agentd_tasks{status}"),
        ("agentd_fleet_reachable", {"agent"}, text.split(". ")[0] + "."),
    ]
