"""Imports point down (docs/design.md, "Module layout"). Every `import agentd…` in the package, function-local
ones included, must name a module at its own layer or below."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest
from support import REPO

# Lowest first. A module may import its own layer and the layers before it; nothing after. Each package's
# __init__ docstring says what it owns and which of these it may import (checked below).
BOTTOM = (
    "agentd",
    "agentd.errors",
    "agentd.clock",
    "agentd.vocabulary",
    "agentd.edge",
    "agentd.usage",
    "agentd.hashing",
    "agentd.schema_check",
    "agentd.resources",
    "agentd.faults",
    "agentd.redaction",
)
PACKAGES = (
    "agentd.records",
    "agentd.config",
    "agentd.gateway",
    "agentd.process",
    "agentd.store",
    "agentd.work",
    "agentd.evidence",
    "agentd.outlook",
    "agentd.adapters",
    "agentd.attempt",
    "agentd.control",
    "agentd.archive",
    "agentd.services",
    "agentd.web",
    "agentd.backup",
    "agentd.install",
    "agentd.cli",
)
LAYERS: tuple[tuple[str, ...], ...] = (
    BOTTOM,
    *((package,) for package in PACKAGES[:-2]),
    (*PACKAGES[-2:], "agentd.__main__"),
)
TOP_LEVEL_MAX = 12  # modules at the top of agentd/ besides its packages


def layer_of(module: str) -> int:
    best, found = -1, None
    for index, names in enumerate(LAYERS):
        for name in names:
            inside = module == name or (name != "agentd" and module.startswith(name + "."))  # the package: only itself
            if inside and len(name) > best:
                best, found = len(name), index
    assert found is not None, f"{module} is in no layer: add it to LAYERS"
    return found


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every agentd import anywhere in the tree."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("agentd")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agentd") and node.level == 0:
            for alias in node.names:  # `from agentd import procs` imports agentd.process.procs
                candidate = f"{node.module}.{alias.name}"
                is_module = (REPO / Path(*candidate.split(".")).with_suffix(".py")).exists() or (
                    REPO / Path(*candidate.split("."))
                ).is_dir()
                found.append((node.lineno, candidate if is_module else node.module))
    return found


def upward_imports(source: str, module: str) -> list[str]:
    mine = layer_of(module)
    return [
        f"{module}:{line} imports {target} (layer {layer_of(target)} above {mine})"
        for line, target in imported(ast.parse(source))
        if layer_of(target) > mine
    ]


def test_every_import_points_down() -> None:
    offenders = []
    for path in sorted((REPO / "agentd").rglob("*.py")):
        offenders += upward_imports(path.read_text(), module_name(path))
    assert offenders == []


def test_the_layer_check_catches_an_upward_import_even_inside_a_function() -> None:
    source = "def f():\n    from agentd.work.intake import admit_task\n    return admit_task\n"
    assert upward_imports(source, "agentd.store.tasks") == [
        "agentd.store.tasks:2 imports agentd.work.intake (layer 6 above 5)"
    ]
    assert upward_imports("from agentd.services import dispatch\n", "agentd.config")


def test_a_module_in_no_layer_is_named() -> None:
    with pytest.raises(AssertionError, match=r"agentd\.newcomer is in no layer"):
        layer_of("agentd.newcomer")


def test_the_top_of_the_package_holds_few_modules_and_no_module_is_long() -> None:
    top = sorted(p.name for p in (REPO / "agentd").glob("*.py"))
    assert len(top) <= TOP_LEVEL_MAX, top
    assert sorted(f"agentd.{name[:-3]}" for name in top if name != "__init__.py") == sorted(
        [*BOTTOM[1:], "agentd.__main__"]
    )
    packages = sorted(f"agentd.{p.parent.name}" for p in (REPO / "agentd").glob("*/__init__.py"))
    assert packages == sorted(PACKAGES)
    long = {
        str(p.relative_to(REPO)): n
        for p in (REPO / "agentd").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 500
    }
    assert long == {}


def test_each_package_says_what_it_owns_and_what_it_may_import() -> None:
    """The docstring's `May import:` line names exactly the packages below it (the bottom modules are
    always allowed and not named), so the layering is read where the code is."""
    for index, package in enumerate(PACKAGES):
        doc = ast.get_docstring(ast.parse((REPO / package.replace(".", "/") / "__init__.py").read_text())) or ""
        paragraphs = [" ".join(p.split()) for p in doc.split("\n\n")]  # a paragraph may wrap its lines
        [line] = [p for p in paragraphs if p.startswith("May import:")] or [""]
        named = {name.strip(" .`") for name in line.removeprefix("May import:").split(",") if name.strip(" .`")}
        below = {p.removeprefix("agentd.") for p in PACKAGES[: index if package not in PACKAGES[-2:] else -2]}
        assert named == (below or {"nothing but the bottom modules"}), f"{package}: {line!r}"
        assert len(doc.splitlines()[0]) > 20, f"{package}: say what it owns"


# --- who calls which Store verb (issue 53) -----------------------------------------------------------------

ABOVE_STORE = PACKAGES[PACKAGES.index("agentd.store") + 1 :]


def store_verbs() -> frozenset[str]:
    """Every public method of the Store (its verb groups and its base's `transaction`, `snapshot`,
    `require_present`), less `close`: every handle has one (a file, a socket, a queue), and it ends the Store
    rather than asking it anything. AsyncStore's `call` and `read` are the hop, not verbs: the verb is what
    they are handed."""
    from agentd.store import Store

    return frozenset(n for n, v in inspect.getmembers(Store) if not n.startswith("_") and callable(v)) - {"close"}


def bound_modules(tree: ast.AST) -> set[str]:
    """Names a module binds to a module it imports (`import os`, `from agentd import control`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agentd"):
            for alias in node.names:
                target = REPO / Path(*f"{node.module}.{alias.name}".split("."))
                if target.with_suffix(".py").exists() or target.is_dir():
                    names.add(alias.asname or alias.name)
    return names


def verb_calls(source: str, verbs: frozenset[str]) -> dict[str, int]:
    """The Store verbs a module calls, each with its first line: `.verb(` on anything but a module it imported
    (`store.x(`, `self.store.x(`, `lambda store: store.x(…)`, `s.x(` inside `with store.snapshot() as s`), and
    `Store.verb` handed to `AsyncStore.call` or `read`. Matched by name: a method of another class that shares
    a verb's name would count (none does today); a field read that shares one (`history.failed_calls`) does not."""
    tree = ast.parse(source)
    modules = bound_modules(tree)
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or node.attr not in verbs:
            continue
        on_name = node.value.id if isinstance(node.value, ast.Name) else None
        if on_name in modules or (id(node) not in called and on_name != "Store"):
            continue
        found[node.attr] = min(found.get(node.attr, node.lineno), node.lineno)
    return found


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])  # agentd.web.api -> agentd.web; a module at the top is its own


def may_call(package: str) -> set[str] | None:
    """The verbs a package's `May call:` paragraph names (`nothing` names none); None without one."""
    doc = ast.get_docstring(ast.parse((REPO / package.replace(".", "/") / "__init__.py").read_text())) or ""
    lines = [" ".join(p.split()) for p in doc.split("\n\n") if p.startswith("May call:")]
    if not lines:
        return None
    [line] = lines
    return {name.strip(" .`") for name in line.removeprefix("May call:").split(",")} - {"nothing", ""}


def verb_line_errors(package: str, calls: dict[str, str], named: set[str] | None) -> list[str]:
    """What is untrue of a package's `May call:` line, given the verbs it calls (verb -> where)."""
    if named is None:
        return [f"{package}: no `May call:` line (calls {sorted(calls) or 'nothing'})"]
    return [
        f"{package}: {where} calls {verb}, which its `May call:` line does not name"
        for verb, where in sorted(calls.items())
        if verb not in named
    ] + [
        f"{package}: its `May call:` line names {verb}, which it no longer calls" for verb in sorted(named - set(calls))
    ]


def calls_by_package() -> dict[str, dict[str, str]]:
    """Outside the store, each package's (or top module's) Store verbs, each with where it is first called."""
    verbs = store_verbs()
    found: dict[str, dict[str, str]] = {}
    for path in sorted((REPO / "agentd").rglob("*.py")):
        package = package_of(module_name(path))
        if package == "agentd.store":
            continue
        mine = found.setdefault(package, {})
        for verb, line in verb_calls(path.read_text(), verbs).items():
            mine.setdefault(verb, f"{path.relative_to(REPO)}:{line}")
    return found


def test_each_package_names_the_store_verbs_it_calls() -> None:
    """A package above the store says which Store verbs it may call (`May call:` beside `May import:`), and
    calls exactly those; nothing at or below the store's layer outside it calls one (docs/decisions.md,
    "The Store by who uses it (issue 53)")."""
    errors = []
    for package, calls in calls_by_package().items():
        if package in ABOVE_STORE:
            errors += verb_line_errors(package, calls, may_call(package))
        else:
            errors += [f"{package}: {where} calls {verb}, below the store" for verb, where in sorted(calls.items())]
            if package in PACKAGES and may_call(package) is not None:
                errors.append(f"{package}: a `May call:` line below the store")
    assert errors == []


def test_the_verb_check_sees_a_call_by_every_road_and_not_a_module_function() -> None:
    source = (
        "from agentd import control\n"
        "from agentd.store import Store\n"
        "async def f(web, db, store, history):\n"
        "    web.db.call(lambda store: store.claim_next_task(now))\n"
        "    await db.call(Store.tick_intents, now)\n"
        "    with store.snapshot() as s:\n"
        "        s.read_events(1)\n"
        "    self.store.get_task(1)\n"
        "    control.cancel_task(config, store, 1)\n"
        "    return history.failed_calls\n"
    )
    assert verb_calls(source, store_verbs()) == {
        "claim_next_task": 4,
        "tick_intents": 5,
        "snapshot": 6,
        "read_events": 7,
        "get_task": 8,
    }


def test_the_verb_line_check_fails_on_a_call_it_does_not_name_and_on_a_name_no_longer_called() -> None:
    calls = {"claim_next_task": "agentd/web/api.py:9", "get_task": "agentd/web/api.py:3"}
    assert verb_line_errors("agentd.web", calls, {"get_task", "list_tasks"}) == [
        "agentd.web: agentd/web/api.py:9 calls claim_next_task, which its `May call:` line does not name",
        "agentd.web: its `May call:` line names list_tasks, which it no longer calls",
    ]
    assert verb_line_errors("agentd.web", {}, None) == ["agentd.web: no `May call:` line (calls nothing)"]
    assert verb_line_errors("agentd.web", calls, set(calls)) == []


def types_past_the_face(source: str) -> list[str]:
    """Types (records, their aliases, the store's errors) imported from a module inside agentd/store/ rather
    than from `agentd.store`: a CamelCase name; functions and CONSTANTS are not types."""
    return [
        f"{node.lineno}: {alias.name} from {node.module}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agentd.store.")
        for alias in node.names
        if alias.name[0].isupper() and not alias.name.isupper()
    ]


def test_record_types_are_imported_from_the_store_face() -> None:
    """Outside agentd/store/ a record type comes from `agentd.store`, which takes it from its own module alone
    (its HOMES), so the face costs no more at start-up than reaching past it did."""
    import agentd.store

    found = {
        str(path.relative_to(REPO)): names
        for path in sorted((REPO / "agentd").rglob("*.py"))
        if "store" not in path.relative_to(REPO / "agentd").parts[:1]
        and (names := types_past_the_face(path.read_text()))
    }
    assert found == {}
    for name, home in agentd.store.HOMES.items():
        assert getattr(agentd.store, name) is getattr(importlib.import_module(f"agentd.store.{home}"), name), name
    assert types_past_the_face("def f():\n    from agentd.store.calls import EVENT_OF, HeldCall, record_call\n") == [
        "2: HeldCall from agentd.store.calls"
    ]


def module_graph() -> dict[str, set[str]]:
    """Every agentd module and the agentd modules it imports, function-local imports included."""
    graph: dict[str, set[str]] = {}
    for path in sorted((REPO / "agentd").rglob("*.py")):
        name = module_name(path)
        graph[name] = {target for _, target in imported(ast.parse(path.read_text())) if target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_circle_among_modules() -> None:
    assert cycles(module_graph()) == []


def test_the_circle_check_finds_one_behind_a_function_local_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


# --- one idiom per act (issue #39) ----------------------------------------------------------------------

RAW = ("self._conn", "._append_event(", "._rows_in(")
FMT_SKIP_ALLOWANCE = 5  # each with its reason on the line: a module is split when it is full, never packed
CLASS_MAX = {("agentd/services/dispatch.py", "Dispatcher"): 250, ("agentd/services/sensing.py", "SensorService"): 150}


def raw_uses(source: str) -> list[str]:
    return [f"{n}: {line.strip()}" for n, line in enumerate(source.splitlines(), 1) if any(r in line for r in RAW)]


def test_store_verbs_use_the_transaction_handle_never_the_raw_connection() -> None:
    """The connection and the event appender are the store's base's own (agentd/store/base.py): every verb
    writes and reads through its `Tx` (`with self.transaction() as tx:`, or `self.tx` for a read)."""
    found = {
        str(path.relative_to(REPO)): uses
        for path in sorted((REPO / "agentd" / "store").glob("*.py"))
        if path.name != "base.py" and (uses := raw_uses(path.read_text()))
    }
    assert found == {}


def test_the_raw_connection_check_finds_a_verb_that_uses_it() -> None:
    assert raw_uses("def v(self):\n    self._conn.execute('SELECT 1')\n") == ["2: self._conn.execute('SELECT 1')"]
    assert raw_uses("def v(self):\n    self.tx.execute('SELECT 1')\n") == []


def test_no_module_is_packed_to_fit_and_the_services_stay_small() -> None:
    skips = [
        f"{path.relative_to(REPO)}:{n}"
        for path in (REPO / "agentd").rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "fmt: skip" in line
    ]
    assert len(skips) <= FMT_SKIP_ALLOWANCE, skips
    for (relative, name), most in CLASS_MAX.items():
        tree = ast.parse((REPO / relative).read_text())
        [node] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
        assert node.end_lineno is not None and node.end_lineno - node.lineno + 1 <= most, (name, most)
