"""The docs stay true: the configuration reference is the code's, `config check` names every required
key at once, the README's tour runs as it is written (the script-adapter example is a session:
tests/test_doc_commands.py), every command a
doc shows parses, every link resolves, and the README stays a short front door to docs/."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import EXAMPLE_CONFIG, REPO, example_raw, run_main

from agentd.cli import build_parser
from agentd.cli.common import CommandError
from agentd.config.reference import render
from agentd.config.settings import Settings

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent


def code_blocks(heading: str) -> list[tuple[str, str]]:
    """(language, text) of each fenced block in the section under `heading`, in whichever doc has it."""
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        found = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#+ |\Z)", text, re.MULTILINE | re.DOTALL)
        if found:
            return re.findall(r"^```(\w*)\n(.*?)^```", found.group(1), re.MULTILINE | re.DOTALL)
    raise AssertionError(f"no doc has a section {heading!r}")


# --- the configuration reference ---------------------------------------------------------------------


def test_the_configuration_reference_is_written_from_the_code(capsys: pytest.CaptureFixture[str]) -> None:
    printed = run_main(capsys, EXAMPLE_CONFIG, "config", "reference")
    assert printed.code == 0 and printed.out == render()
    committed = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == render(), "docs/configuration.md is stale: run `make docs-reference`"


def test_every_key_of_the_reference_says_what_it_means() -> None:
    rows = [line for line in render().splitlines() if line.startswith("| `")]
    assert len(rows) > 150
    unexplained = [row.split("|")[1].strip() for row in rows if not row.rstrip(" |").split("|")[-1].strip()]
    assert unexplained == []


def required_keys(schema: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    """Required keys of a table, from the JSON Schema (independent of agentd's own walk)."""
    keys = []
    for key in schema.get("required", []):
        prop = schema["properties"][key]
        nested = defs[prop["$ref"].rsplit("/", 1)[-1]] if "$ref" in prop else None
        keys += [f"{key}.{k}" for k in required_keys(nested, defs)] if nested else [key]
    return keys


REQUIRED_TABLES = ["agent", "constitution", "paths", "profiles", "task_types"]


@pytest.mark.parametrize("table", REQUIRED_TABLES)
def test_config_check_names_every_required_key_of_a_missing_table_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], table: str
) -> None:
    raw = example_raw()
    del raw[table]
    path = tmp_path / "agent.toml"
    shutil.copytree(REPO / "config", tmp_path, dirs_exist_ok=True)
    path.write_text(toml_dump(raw))
    checked = run_main(capsys, path, "config", "check")
    assert checked.code == 2
    schema = Settings.model_json_schema()
    prop = schema["properties"][table]
    model = schema["$defs"][(prop.get("items") or prop)["$ref"].rsplit("/", 1)[-1]]
    [line] = [line for line in checked.err.splitlines() if f": {table}: required" in line]
    missing = [key for key in required_keys(model, schema["$defs"]) if key not in line]
    assert missing == [], line


def test_an_entry_without_its_kind_is_told_the_kinds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = example_raw()
    del raw["adapters"][0]["kind"]
    shutil.copytree(REPO / "config", tmp_path, dirs_exist_ok=True)
    (tmp_path / "agent.toml").write_text(toml_dump(raw))
    checked = run_main(capsys, tmp_path / "agent.toml", "config", "check")
    assert checked.code == 2
    assert "adapters[0].kind: required, but missing: one of 'claude-code', 'codex'" in checked.err


def toml_dump(raw: dict[str, Any]) -> str:
    import tomli_w

    return tomli_w.dumps(raw)


# --- examples that run as written ----------------------------------------------------------------------


@pytest.mark.process
def test_the_tour_runs_as_written_on_a_state_dir_of_its_own(tmp_path: Path) -> None:
    """Each line of the README's tour, in order, against a fresh state dir (make run's stays as it is)."""
    [(lang, tour)] = code_blocks("A five-minute tour")[:1]
    assert lang == "sh" and "var/tour" in tour
    lines = [line.split("  #")[0].strip() for line in tour.splitlines()]
    lines = [line for line in lines if line and not line.startswith((". ", "#"))]
    script = "\n".join(line.replace("var/tour", str(tmp_path / "tour")) for line in lines)
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], env=env, capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "task 1 enqueued" in done.stdout and "operator_canceled" in done.stdout
    assert "BUDGET   1 task(s) wait" in done.stdout
    assert not (REPO / "var" / "tour").exists() or os.environ.get("AGENTD_KEEP_TOUR")


def test_the_tour_and_the_example_config_agree() -> None:
    """The tour's commands name a task type and payload keys the embedded default accepts."""
    raw = tomllib.loads(EXAMPLE_CONFIG.read_text())
    [(_, tour)] = code_blocks("A five-minute tour")[:1]
    types = {t["task_type"] for t in raw["task_types"]}
    assert set(re.findall(r"--type (\S+)", tour)) <= types


# --- the metrics reference -----------------------------------------------------------------------------


def scraped(registry: Any) -> dict[str, tuple[str, str]]:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(registry).decode()
    return {family.name: (family.type, family.documentation) for family in text_string_to_metric_families(text)}


def test_the_metrics_page_is_what_the_services_serve(tmp_path: Path) -> None:
    """docs/metrics.md is written from the catalogue, and a real scrape of each service shows exactly the
    catalogue's metrics (name, type, help): a metric added without its entry, or an entry nothing serves,
    fails here."""
    from agentd.clock import FakeClock
    from agentd.outlook.metric_specs import CATALOGUE, reference
    from agentd.outlook.metrics import DispatchMetrics, SensorMetrics
    from agentd.store import migrate

    assert (REPO / "docs" / "metrics.md").read_text(encoding="utf-8") == reference(), "run `make docs-reference`"
    db = tmp_path / "agentd.db"
    migrate(db, FakeClock())
    served: dict[str, dict[str, tuple[str, str]]] = {}
    for service, kind in (("dispatch", DispatchMetrics), ("sensors", SensorMetrics)):
        metrics = kind("demo", db, FakeClock())
        if isinstance(metrics, DispatchMetrics):
            metrics.fleet_leases(0)  # the fleet metrics are made by an intake's first call (docs/fleet.md)
        try:
            served[service] = scraped(metrics.registry)
        finally:
            metrics.close()
    for service, families in served.items():
        expected = {  # an info metric is served as a gauge of 1 named …_info
            spec.exposed if spec.kind == "info" else spec.name: (
                "gauge" if spec.kind == "info" else spec.kind,
                spec.help,
            )
            for spec in CATALOGUE
            if spec.served_by in ("both", service)
        }
        assert families == expected, service


# --- the README and docs/ as a whole ---------------------------------------------------------------------

README_LIMIT_BYTES = 10_240
SHELL_LANGUAGES = ("sh", "console", "bash", "shell")
PUNCTUATION = set("();<>|&")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, text) of every fenced block of a Markdown text, in order."""
    return [(lang, body) for _, lang, body in re.findall(r"^(`{3,})(\w*)\n(.*?)^\1$", text, re.MULTILINE | re.DOTALL)]


def prose(text: str) -> str:
    """The text without its fenced blocks and inline code: what Markdown renders as links and headings."""
    text = re.sub(r"^(`{3,})\w*\n.*?^\1$", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"(`+).+?\1", "", text, flags=re.DOTALL)


def shown_commands(block: str) -> list[list[str]]:
    """The arguments of each `agentd …` a shell block shows (after `sudo …`, `VAR=… `, `$(`/`<(`, up to a
    pipe or redirection). In a block with `$ ` prompts only the prompted lines are commands."""
    lines = block.replace("\\\n", " ").splitlines()
    prompted = [line[2:] for line in lines if line.startswith("$ ")]
    found = []
    for line in prompted or lines:
        if not re.search(r"(^|[\s(;|&])agentd(\s|$)", line):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
        for start in [i for i, word in enumerate(words) if word == "agentd" and _runs(words[:i])]:
            argv = []
            for word in words[start + 1 :]:
                if set(word) <= PUNCTUATION:
                    break
                argv.append(word)
            found.append(argv)
    return found


def _runs(before: list[str]) -> bool:
    """Whether a word after these is a command (`agentd` run, not `pip install agentd`): it starts the line or
    follows a pipe, `;`, `&&`, `$(` or `<(`, after any `sudo` with its options and `VAR=value` words."""
    prefix: list[str] = []
    for word in reversed(before):
        if set(word) <= PUNCTUATION or word in ("$(", "<("):
            break
        prefix.insert(0, word)
    expects_value = False
    for word in prefix:
        if expects_value:
            expects_value = False
        elif word in ("-u", "--user", "-g", "--group"):
            expects_value = True
        elif not (word == "sudo" or word.startswith("-") or re.fullmatch(r"[A-Za-z_]\w*=.*", word)):
            return False
    return True


def parse_problem(argv: list[str]) -> str | None:
    """Why agentd's own parser refuses these arguments, or None when it takes them."""
    try:
        args = build_parser().parse_args(argv)
    except CommandError as exc:
        return str(exc)
    except SystemExit as exc:  # --help, --version
        return None if exc.code == 0 else f"exit {exc.code}"
    return None if callable(getattr(args, "handler", None)) else "no command"


def test_every_agentd_command_a_doc_shows_is_one_agentd_parses(capsys: pytest.CaptureFixture[str]) -> None:
    """A renamed command or option fails here, wherever a shell block of the README or docs/ shows it."""
    shown, refused = 0, []
    for doc in DOCS:
        for lang, block in fenced_blocks(doc.read_text(encoding="utf-8")):
            for argv in shown_commands(block) if lang in SHELL_LANGUAGES else []:
                shown += 1
                problem = parse_problem(argv)
                if problem:
                    refused.append(f"{doc.relative_to(REPO)}: agentd {shlex.join(argv)}: {problem}")
    capsys.readouterr()
    assert refused == []
    assert shown >= 25, "the docs show far fewer commands than they did: is the block reader broken?"


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("agentd task list                 # newest first\n", [["task", "list"]]),
        ("$ agentd task add --priority 0\nagentd: --priority: expected 1\n", [["task", "add", "--priority", "0"]]),
        ("sudo -u agentd-arc agentd --agent arc status\n", [["--agent", "arc", "status"]]),
        ("source <(agentd completion bash)\n", [["completion", "bash"]]),
        ("agentd events | head\nln -s /opt/agentd/bin/agentd /usr/local/bin/agentd\n", [["events"]]),
        ("/opt/agentd/bin/pip install --no-index --find-links wheelhouse agentd\n", []),
        (
            "agentd fleet submit --type review \\\n    --key pr-42\n",
            [["fleet", "submit", "--type", "review", "--key", "pr-42"]],
        ),
        ('AGENTD_X=1 agentd task add --payload \'{"a": "b|c"}\'\n', [["task", "add", "--payload", '{"a": "b|c"}']]),
    ],
)
def test_the_block_reader_finds_each_command_as_a_shell_would(block: str, expected: list[list[str]]) -> None:
    assert shown_commands(block) == expected


def test_the_parse_check_refuses_a_renamed_option_or_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_problem(["task", "add", "--type", "example"]) is None
    assert parse_problem(["task", "add", "--kind", "example"]) is not None
    assert parse_problem(["task", "show", "ID"]) is not None  # a placeholder is no id: show a real one
    assert parse_problem(["tasks", "list"]) is not None
    capsys.readouterr()


def slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) and GitHub give a heading of plain words and code."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(doc: Path) -> set[str]:
    text = re.sub(r"^(`{3,})\w*\n.*?^\1$", "", doc.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    return {slug(heading) for heading in re.findall(r"^#+ (.+?)\s*$", text, re.MULTILINE)}


def broken_links(doc: Path, root: Path = REPO) -> list[str]:
    """Each relative link of `doc` whose file, or whose anchor in that file, does not exist (named from
    `root`)."""
    broken = []
    for target in re.findall(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)", prose(doc.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        if not linked.is_file():
            broken.append(f"{doc.relative_to(root)}: {target}: no such file")
        elif anchor and (linked.suffix != ".md" or anchor not in anchors(linked)):
            broken.append(f"{doc.relative_to(root)}: {target}: no heading makes #{anchor}")
    return broken


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    assert [problem for doc in DOCS for problem in broken_links(doc)] == []
    readme = prose((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(re.findall(r"\]\(docs/[\w-]+\.md", readme)) >= 10, "the README links into docs/"


def test_the_link_check_catches_a_missing_page_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A page\n\n## The `[budget]` table\n\n```sh\n# not a heading\n```\n")
    doc = tmp_path / "b.md"
    doc.write_text(
        "[ok](a.md#the-budget-table) [gone](c.md) [nope](a.md#not-a-heading) [web](https://x.org/y.md)\n"
        "`[code](c.md)` [self](#here)\n\n# Here\n"
    )
    assert broken_links(doc, tmp_path) == [
        "b.md: c.md: no such file",
        "b.md: a.md#not-a-heading: no heading makes #not-a-heading",
    ]


def test_every_toml_block_of_the_docs_parses() -> None:
    blocks = [
        (doc, body) for doc in DOCS for lang, body in fenced_blocks(doc.read_text(encoding="utf-8")) if lang == "toml"
    ]
    assert len(blocks) >= 4
    for doc, body in blocks:
        try:
            tomllib.loads(body)
        except tomllib.TOMLDecodeError as exc:
            pytest.fail(f"{doc.relative_to(REPO)}: {exc}\n{body}")


def test_the_readme_is_a_short_front_door() -> None:
    readme = (REPO / "README.md").read_bytes()
    assert len(readme) <= README_LIMIT_BYTES, f"README.md is {len(readme):,} bytes: move detail into docs/"
    assert readme.decode().index("make run") < readme.decode().index("## A five-minute tour")


def pages_of(entry: dict[str, Any]) -> list[str]:
    """The pages of one nav entry: a page, or a section's pages, however deep."""
    found: list[str] = []
    for under in entry.values():
        found += [under] if isinstance(under, str) else [page for inner in under for page in pages_of(inner)]
    return found


def test_the_site_is_built_strict_from_every_page() -> None:
    """mkdocs.yml: strict, every link and anchor check a warning (so a failure), every page in the nav,
    and no theme feature that needs a CDN (the site is read offline)."""
    site = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert site["strict"] is True and site["docs_dir"] == "docs"
    checks = site["validation"]
    assert set(checks["links"].values()) == {"warn"} and set(checks["nav"].values()) == {"warn"}
    assert {"not_found", "anchors", "absolute_links", "unrecognized_links"} <= set(checks["links"])
    nav = {page for entry in site["nav"] for page in pages_of(entry)}
    assert nav == {path.name for path in (REPO / "docs").glob("*.md")}
    sections = [title for entry in site["nav"] for title, under in entry.items() if isinstance(under, list)]
    assert sections == ["Getting started", "Operate", "Deploy", "Reference", "Internals"], "sectioned, not one bar"
    [getting_started] = [entry["Getting started"] for entry in site["nav"] if "Getting started" in entry]
    assert next(page for entry in getting_started for page in pages_of(entry)) == "quickstart.md"
    assert site["theme"].get("highlightjs") is False


def goals(text: str) -> list[str]:
    """The date line and the goals table of a benchmarks page."""
    kept = [line for line in text.splitlines() if line.startswith("- date:")]
    section = text.split("## Goals", 1)[-1] if "## Goals" in text else text.split("## The latest results", 1)[-1]
    return kept + [line for line in section.split("\n## ", 1)[0].splitlines() if line.startswith("| ")]


def test_the_benchmarks_page_shows_what_make_bench_last_wrote() -> None:
    written = goals((REPO / "bench" / "BENCHMARKS.md").read_text(encoding="utf-8"))
    shown = goals((REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8"))
    assert len(written) > 10 and shown == written, "copy the goals table of bench/BENCHMARKS.md into docs/benchmarks.md"


# Built from parts, so this file does not name them itself.
OUTSIDE = ("../" + "shared", "DESIGN" + " §", "DESIGN" + ".md", "STYLE" + ".md", "harness" + "-clis.md")
CITING_TREES = ("agentd", "tests", "bench", "docs")


def citations_outside_the_repo() -> list[str]:
    paths = [REPO / "README.md", *(p for tree in CITING_TREES for p in sorted((REPO / tree).rglob("*")))]
    found = []
    for path in paths:
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{path.relative_to(REPO)}: {what}" for what in OUTSIDE if what in text]
    return found


def test_nothing_cites_a_document_outside_the_repo() -> None:
    """Code comments and docs cite docs/ (e.g. `docs/design.md, "Storage"`), never a file a clone lacks."""
    assert citations_outside_the_repo() == []


def _operator_docs() -> Any:
    """tests/system/operator_docs.py, which the system test runs the docs' blocks through."""
    sys.path.insert(0, str(REPO / "tests" / "system"))
    try:
        import operator_docs
    finally:
        sys.path.remove(str(REPO / "tests" / "system"))
    return operator_docs


def test_every_block_the_system_test_runs_is_marked_on_its_page_and_read_as_a_shell_would() -> None:
    """docs/install-and-deploy.md's install, start, upgrade and uninstall blocks and docs/monitoring.md's
    Prometheus blocks are what `make test-system` runs (tests/system/test_deployed.py and
    test_upgrade.py): each is marked on its page, each shell line is either run word for word or one of the
    two the test runs otherwise (an `$EDITOR` line is the test's own edit; `journalctl -f` runs once)."""
    docs = _operator_docs()
    marked = {**docs.blocks(docs.DEPLOY), **docs.blocks(docs.MONITORING)}
    assert set(marked) == set(docs.BLOCKS)
    for name in ("install", "start", "upgrade", "uninstall"):
        for command in docs.commands(name):
            assert command.split()[0] in (
                "apt-get",
                "python3",
                "/opt/agentd/bin/pip",
                "ln",
                "agentd",
                "sudo",
                "systemctl",
                "journalctl",
                "userdel",
                "$EDITOR",
            ), command
    start = docs.commands("start")
    assert (
        start[0] == "$EDITOR /etc/agentd/arc.toml"
        and docs.as_run(start[4]) == "journalctl -u agentd-dispatch@arc --no-pager"
    )
    enable = next(line for line in start if line.startswith("systemctl enable"))
    from agentd.install import enable_command

    sockets = [f"agentd-{service}@arc.socket" for service in ("web", "dispatch", "sensors")]  # as install orders them
    assert enable == enable_command("arc", sockets), "the docs' enable line is not the one `agentd install` prints"
    assert docs.commands("build") == ["python3 -m pip wheel --wheel-dir wheelhouse ./agentd"]
    for name in ("scrape", "rules"):
        assert isinstance(yaml.safe_load(marked[name]), dict), name


def test_every_screenshot_of_the_docs_is_one_a_browser_test_takes() -> None:
    """docs/img holds the console as the browser tests saw it (AGENTD_SCREENSHOTS, docs/web.md): an image no
    test takes again would drift from the console unseen, and one the docs do not show is dead weight."""
    taking = re.compile(r'screenshot\(page, "([a-z-]+)"\)')
    tests = (REPO / "tests").glob("test_web*browser*.py")  # test_web_browser.py and its siblings
    taken = {name for test in tests for name in taking.findall(test.read_text())}
    images = {path.stem for path in (REPO / "docs" / "img").glob("*.png")}
    shown = {Path(name).stem for page in DOCS for name in re.findall(r"\]\((img/[^)]+\.png)\)", page.read_text())}
    assert images == taken, f"taken by no test: {sorted(images - taken)}; taken but not kept: {sorted(taken - images)}"
    assert shown == images, f"not shown: {sorted(images - shown)}; shown but missing: {sorted(shown - images)}"
