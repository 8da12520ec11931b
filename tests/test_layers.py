"""Imports point down (STYLE habit 4, DESIGN §10). Every `import agentd…` in the package, function-local
ones included, must name a module at its own layer or below."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support import REPO

# Lowest first. A module may import its own layer and the layers before it; nothing after.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "agentd",
        "agentd.errors",
        "agentd.clock",
        "agentd.task_statuses",
        "agentd.origins",  # seed 003's dispatch context words (data only)
        "agentd.edge",
        "agentd.usage",  # usage numbers judged: by the adapters, the judge, the store's readers, the metrics
        "agentd.hashing",
        "agentd.schema_check",
        "agentd.resources",
        "agentd.faults",
        "agentd.redaction",
        "agentd.procs",
        "agentd.wake",
        "agentd.privilege",  # who attempts run as; the capabilities a service keeps to itself
        "agentd.untrusted",  # reading what the run user wrote, never through a link
        "agentd.metric_specs",  # the table of every exported metric (data only)
    ),
    ("agentd.records",),
    (
        "agentd.config",
        "agentd.budget",
        "agentd.settings",
        "agentd.sensors",
        "agentd.skills",
        "agentd.schemas",
        "agentd.config_reference",
    ),
    ("agentd.store",),
    ("agentd.intake", "agentd.workflows", "agentd.bundle", "agentd.outcome", "agentd.validation", "agentd.intents"),
    (
        "agentd.containment",
        "agentd.runner",
        "agentd.handlers",  # sends one message through a handler: runner, config, records
        "agentd.evidence",
        "agentd.action_trace",  # evidence.py imports it; it imports only the bottom layer
        "agentd.adapters",
        "agentd.judge",
        "agentd.status",
        "agentd.metrics",
    ),
    (
        "agentd.attempt",
        "agentd.attempt_end",
        "agentd.running",
        "agentd.lock",
        "agentd.sweep",
        "agentd.outbox",
        "agentd.delivery",
        "agentd.sensor_runs",
        "agentd.retention",
        "agentd.audit",
        "agentd.export",
        "agentd.replay",
        "agentd.tracecore",
        "agentd.evidence_export",
        "agentd.readmodel",
        "agentd.control",
        "agentd.constitution",  # the operator's side of the proposal lane; imports control (operator())
        "agentd.rollback",  # a database older than what happened: found at start, accepted by the operator
        "agentd.service",
        "agentd.fleet",  # an agent's side of a fleet: intake and confirmation, inside the dispatcher
    ),
    ("agentd.dispatch", "agentd.sensor_service"),
    ("agentd.install", "agentd.agent_toml", "agentd.ports", "agentd.cli", "agentd.__main__"),
)


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
            for alias in node.names:  # `from agentd import procs` imports agentd.procs
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
    source = "def f():\n    from agentd.intake import admit_task\n    return admit_task\n"
    assert upward_imports(source, "agentd.store.tasks") == [
        "agentd.store.tasks:2 imports agentd.intake (layer 4 above 3)"
    ]
    assert upward_imports("from agentd import dispatch\n", "agentd.config")


def test_a_module_in_no_layer_is_named() -> None:
    with pytest.raises(AssertionError, match=r"agentd\.newcomer is in no layer"):
        layer_of("agentd.newcomer")
