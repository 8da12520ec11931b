"""The docs stay true: the configuration reference is the code's, `config check` names every required
key at once, and the README's tour and its script-adapter example run as they are written."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from support import EXAMPLE_CONFIG, REPO, example_raw, run_main

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
def test_the_script_adapter_example_runs_as_written(tmp_path: Path) -> None:
    [(lang, script), (toml_lang, toml)] = code_blocks("Write your own script adapter")
    assert (lang, toml_lang) == ("python", "toml")
    config_dir = tmp_path / "config"
    shutil.copytree(REPO / "config", config_dir)
    (config_dir / "scripts" / "wordcount.py").write_text(script)
    (config_dir / "scripts" / "wordcount.py").chmod(0o755)
    config = config_dir / "identity.example.toml"
    config.write_text(config.read_text() + "\n" + toml)
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "AGENTD_CONFIG": str(config),
        "AGENTD_PATHS__STATE_DIR": str(tmp_path / "state"),
        "AGENTD_PATHS__WORKSPACE": str(tmp_path / "workspace"),
        "AGENTD_PATHS__SKILLS_DIR": str(REPO / "skills"),
        "AGENTD_PATHS__SENSORS_DIR": str(REPO / "sensors"),
    }

    def agentd(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["agentd", *args], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)
        return done

    agentd("config", "check")
    agentd("init")
    (tmp_path / "workspace" / "notes.txt").write_text("one two three four\n")
    agentd("task", "add", "--type", "wordcount", "--payload", '{"file": "notes.txt"}')
    agentd("dispatch", "--until-idle")
    shown = json.loads(agentd("task", "show", "1", "--json").stdout)
    assert shown["task"]["status"] == "completed", shown
    assert shown["task"]["outcome"]["operator_summary"] == "notes.txt: 4 words"
    assert (tmp_path / "workspace" / "reports" / "words-1.txt").read_text() == "4 words\n"
    assert shown["attempts"][0]["usage"]["cost_usd"] == 0.0


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
            metrics.fleet_leases(0)  # the fleet metrics are made by an intake's first call (README, "A fleet")
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
