"""Signs that tell the truth (docs/decisions.md, "Signs that tell the truth (issue 53)"): every pointer agentd's
code makes in its docstrings, comments and strings — to a docs page and its section, to another module and a
name in it — leads to something that exists. A renamed heading, a moved function or a deleted module fails
here, in the fast tier, instead of sending the next reader somewhere that is not there."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from support import REPO
from test_docs import anchors, slug

# docs/<page>.md, then the section as the tree writes it: `docs/web.md, "A task's page"`, `docs/policy.md "Two
# layers"` or `docs/web.md#a-tasks-page`.
DOCS_CITATION = re.compile(r"(?<![\w/.-])docs/([\w-]+(?:/[\w-]+)*\.md)(?:#([\w-]+)|,? [\"“]([^\"”]+)[\"”])?")
# agentd/<module path>, then perhaps a name in it: `agentd/edge.py `loads``, `agentd/clock.py format_ts`,
# `agentd/config/environment.py, `environment_overrides``, `agentd/web/svg.py's `name``.
CODE_POINTER = re.compile(
    r"(?<![\w/.-])(agentd(?:/\w+)+(?:\.py|/)?)(?![\w.-]*\w)"
    r"(?:(?:'s|,)? (?:`([A-Za-z_][\w.]*)`|([a-z]\w*_\w*|[A-Z][A-Z0-9_]+\b|[A-Z][a-z0-9]+[A-Z]\w*)))?"
)


WHOLE_FILES = {".html", ".js", ".css"}  # the console's templates and static files: signs in them too


@dataclass(frozen=True)
class Sign:
    where: str  # path:line
    text: str  # the sign, whitespace collapsed


def signs(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment block and every string of a module, each as one line of prose: a
    comment's lines joined, a docstring's whitespace collapsed, so a citation broken over lines is read whole."""
    found: list[tuple[int, str]] = []
    block: list[str] = []
    start = last = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row = token.start[0]
            if block and row != last + 1:
                found.append((start, " ".join(block)))
                block = []
            if not block:
                start = row
            block.append(token.string.lstrip("#").strip())
            last = row
    if block:
        found.append((start, " ".join(block)))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append((node.lineno, node.value))
    return [(line, re.sub(r"\s+", " ", text)) for line, text in found]


@cache
def all_signs(root: Path = REPO) -> list[Sign]:
    """The signs of every module of agentd, and of its templates, scripts and styles (each read whole), read
    once for the tests that check them (about 2 s of CPU)."""
    found = [
        Sign(f"{path.relative_to(root)}:{line}", text)
        for path in sorted((root / "agentd").rglob("*.py"))
        for line, text in signs(path.read_text(encoding="utf-8"))
    ]
    for path in sorted(p for p in (root / "agentd").rglob("*") if p.suffix in WHOLE_FILES):
        found.append(Sign(str(path.relative_to(root)), re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))))
    return found


@cache
def headings(page: Path) -> tuple[frozenset[str], frozenset[str]]:
    """A page's headings as text (case-folded, code marks dropped) and as the anchors MkDocs gives them."""
    text = re.sub(r"^(`{3,})\w*\n.*?^\1$", "", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    found = re.findall(r"^#+ (.+?)\s*$", text, re.MULTILINE)
    # A heading may be cited by its words before a colon: "The boundary" names "The boundary: the agent cannot
    # act as its operator".
    titles = frozenset(_plain(short) for heading in found for short in {heading, heading.split(":")[0]})
    return titles, frozenset(anchors(page))


def _plain(heading: str) -> str:
    return heading.replace("`", "").replace("’", "'").casefold().strip()


def stale_citations(found: list[Sign], root: Path = REPO) -> list[str]:
    """Each docs citation whose page does not exist, or whose section is no heading of that page."""
    stale = []
    for sign in found:
        for match in DOCS_CITATION.finditer(sign.text):
            page, anchor, section = match.groups()
            path = root / "docs" / page
            if not path.is_file():
                stale.append(f"{sign.where}: docs/{page}: no such page")
                continue
            titles, slugs = headings(path)
            if anchor is not None and anchor not in slugs:
                stale.append(f"{sign.where}: docs/{page}#{anchor}: no heading makes that anchor")
            elif section is not None and _plain(section) not in titles and slug(section) not in slugs:
                stale.append(f'{sign.where}: docs/{page}, "{section}": no such heading')
    return stale


@cache
def defined_names(module: Path) -> dict[str, frozenset[str]]:
    """What a module defines at its top level (functions, classes, assignments, also under if/try), each
    with the names its class body defines; read with ast, never imported."""
    names: dict[str, frozenset[str]] = {}

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names[node.name] = frozenset()
            elif isinstance(node, ast.ClassDef):
                members = {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
                members |= {t.id for n in node.body for t in _targets(n)}
                names[node.name] = frozenset(members)
            elif isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            else:
                names.update((target.id, frozenset()) for target in _targets(node))

    visit(ast.parse(module.read_text(encoding="utf-8")).body)
    return names


def _targets(node: ast.stmt) -> list[ast.Name]:
    if isinstance(node, ast.Assign):
        return [t for target in node.targets for t in ast.walk(target) if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target]
    return []


def stale_pointers(found: list[Sign], root: Path = REPO) -> list[str]:
    """Each pointer to a module or package of agentd that does not exist, or to a name its module does not
    define (`Class.method` too)."""
    stale = []
    for sign in found:
        for match in CODE_POINTER.finditer(sign.text):
            pointed, ticked, bare = match.groups()
            name = ticked or bare
            path = root / pointed.rstrip("/")
            if not (path.is_file() or path.is_dir() or path.with_suffix(".py").is_file()):
                stale.append(f"{sign.where}: {pointed}: no such module or package")
                continue
            if name is None:
                continue
            head, _, member = name.partition(".")
            module = path if path.is_file() else path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
            if path.is_dir() and not member and ((path / head).is_dir() or (path / f"{head}.py").is_file()):
                continue  # a package and one of its modules
            defined = defined_names(module) if module.is_file() else {}
            if head not in defined:
                stale.append(f"{sign.where}: {pointed} `{name}`: not defined there")
            elif member and member.split(".")[0] not in defined[head]:
                stale.append(f"{sign.where}: {pointed} `{name}`: {head} has no {member}")
    return stale


def test_every_docs_citation_of_the_code_names_a_page_and_a_heading_that_exist() -> None:
    found = all_signs()
    assert sum(len(DOCS_CITATION.findall(sign.text)) for sign in found) > 300, "the reader finds the citations"
    assert stale_citations(found) == []


def test_every_pointer_of_the_code_names_a_module_and_a_name_that_exist() -> None:
    found = all_signs()
    assert sum(len(CODE_POINTER.findall(sign.text)) for sign in found) > 200, "the reader finds the pointers"
    assert stale_pointers(found) == []


def test_the_reader_catches_a_stale_page_section_module_and_name(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    page = "# A\n\n## The boundary: its rule\n\n## A task's page\n\n```sh\n# no\n```\n"
    (tmp_path / "docs" / "a.md").write_text(page)
    (tmp_path / "agentd" / "pkg").mkdir(parents=True)
    (tmp_path / "agentd" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "agentd" / "pkg" / "m.py").write_text(
        "from os import path as path\n\n\ndef verb():\n    pass\n\n\nclass Held:\n    when: int\n\n    def go(self):\n"
        "        pass\n\n\nif True:\n    LIMIT = 3\n"
    )
    source = (
        '"""Cites docs/a.md, "The boundary", docs/a.md "a task\'s page", docs/a.md#a-tasks-page, docs/b.md,\n'
        'docs/a.md, "No such", docs/a.md#nope and docs/a.md "A\n task\'s page"."""\n'
        "# agentd/pkg/m.py `verb`, agentd/pkg/m.py's `Held.go`, agentd/pkg/m.py, `Held.when`, agentd/pkg/m.py LIMIT,\n"
        "# agentd/pkg/ `m`, agentd/pkg/m.py `path`, agentd/pkg/m.py `gone`, agentd/pkg/m.py `Held.gone`,\n"
        "# agentd/pkg/n.py and agentd/pkg/m.py old_name; agentd/message-handler.webhook/v1 is no path.\n"
    )
    found = [Sign(f"x.py:{line}", text) for line, text in signs(source)]
    assert stale_citations(found, tmp_path) == [
        "x.py:1: docs/b.md: no such page",
        'x.py:1: docs/a.md, "No such": no such heading',
        "x.py:1: docs/a.md#nope: no heading makes that anchor",
    ]
    assert stale_pointers(found, tmp_path) == [
        "x.py:4: agentd/pkg/m.py `path`: not defined there",
        "x.py:4: agentd/pkg/m.py `gone`: not defined there",
        "x.py:4: agentd/pkg/m.py `Held.gone`: Held has no gone",
        "x.py:4: agentd/pkg/n.py: no such module or package",
        "x.py:4: agentd/pkg/m.py `old_name`: not defined there",
    ]
