"""The shipped rules under Prometheus's own tool: `promtool check rules` loads monitoring/agentd.rules.yml
as Prometheus would, and `promtool test rules` runs monitoring/tests/agentd.rules.test.yml, which feeds
series to every alert and says when each fires and when it stays quiet.

promtool comes with Debian's `prometheus` package (.ci/run installs it); without it these skip by name,
unless AGENTD_REQUIRE_PROMTOOL=1 makes that a failure. No Prometheus server is started.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import REPO, missing

MONITORING = REPO / "monitoring"
RULES = MONITORING / "agentd.rules.yml"
RULE_TESTS = MONITORING / "tests" / "agentd.rules.test.yml"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        missing("PROMTOOL", "promtool is not installed on this machine (apt-get install prometheus; .ci/run does)")
    return found


def run(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *argv], capture_output=True, text=True, timeout=120, cwd=cwd)


def alerts() -> list[str]:
    loaded = yaml.safe_load(RULES.read_text())
    return [rule["alert"] for group in loaded["groups"] for rule in group["rules"] if "alert" in rule]


def cases() -> list[dict[str, Any]]:
    """Every alert_rule_test of the unit-test file."""
    loaded = yaml.safe_load(RULE_TESTS.read_text())
    return [case for test in loaded["tests"] for case in test["alert_rule_test"]]


@pytest.mark.process
def test_promtool_loads_the_rules() -> None:
    result = run("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    loaded = yaml.safe_load(RULES.read_text())
    count = sum(len(group["rules"]) for group in loaded["groups"])
    assert f"SUCCESS: {count} rules found" in result.stdout, result.stdout


@pytest.mark.process
def test_the_alerts_fire_when_they_should_and_only_then() -> None:
    result = run("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout, result.stdout


def test_every_alert_is_tested_firing_and_quiet() -> None:
    """Each alert of the rule file fires in some test (with the labels and text it renders) and is
    expected silent in another, so a rule that never fires, or always does, fails the unit tests."""
    firing = {case["alertname"] for case in cases() if case.get("exp_alerts")}
    quiet = {case["alertname"] for case in cases() if not case.get("exp_alerts")}
    assert set(alerts()) - firing == set(), "no test where it fires"
    assert set(alerts()) - quiet == set(), "no test where it stays quiet"
    assert {case["alertname"] for case in cases()} <= set(alerts()), "a test of an alert that does not exist"
    for case in cases():
        for alert in case.get("exp_alerts") or []:
            assert set(alert) == {"exp_labels", "exp_annotations"}, case["alertname"]
            assert set(alert["exp_annotations"]) == {"summary", "description"}, case["alertname"]


# --- the two commands catch what they are for -----------------------------------------------------


def _copy(tmp_path: Path, rules: str, *, only: set[str] | None = None) -> Path:
    """The rules (as given) and the unit tests, laid out as in monitoring/ under tmp_path; with `only`,
    just the unit tests of those alerts (promtool spends about a second of CPU per full file)."""
    (tmp_path / "tests").mkdir(parents=True)
    (tmp_path / "agentd.rules.yml").write_text(rules)
    target = tmp_path / "tests" / RULE_TESTS.name
    if only is None:
        shutil.copy(RULE_TESTS, target)
        return target
    loaded = yaml.safe_load(RULE_TESTS.read_text())
    kept = []
    for test in loaded["tests"]:
        mine = [case for case in test.get("alert_rule_test", []) if case["alertname"] in only]
        if mine:
            kept.append({**{k: v for k, v in test.items() if k != "promql_expr_test"}, "alert_rule_test": mine})
    assert kept, f"no unit test of {sorted(only)}"
    target.write_text(yaml.safe_dump({**loaded, "tests": kept}, sort_keys=False))
    return target


def changed_alerts(before: str, after: str) -> set[str]:
    """The alerts whose rule differs between two versions of the rule file."""

    def rules(text: str) -> dict[str, Any]:
        loaded = yaml.safe_load(text)
        return {rule["alert"]: rule for group in loaded["groups"] for rule in group["rules"] if "alert" in rule}

    old, new = rules(before), rules(after)
    return {name for name in old.keys() | new.keys() if old.get(name) != new.get(name)}


@pytest.mark.process
def test_a_rule_prometheus_cannot_load_fails_the_check(tmp_path: Path) -> None:
    rules = RULES.read_text()
    broken = rules.replace("(agentd_fleet_reachable) == 0", "(agentd_fleet_reachable == 0", 1)  # unbalanced
    assert broken != rules
    _copy(tmp_path, broken)
    result = run("check", "rules", str(tmp_path / "agentd.rules.yml"))
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr


# a rule changed so it fires when it should not, or not when it should: (what, pattern, replacement)
MUTATIONS = [
    ("claims-slow-only-over-5s", r"(agentd_fleet_claim_seconds_bucket\[10m\]\)\)\)) > 1\b", r"\1 > 5"),
    ("one-lost-lease-fires", r"lease_lost_total\[10m\]", "lease_lost_total[1h]"),
    ("half-the-fleet-is-down", r"\(agentd_fleet_reachable\)\) < 0\.5", "(agentd_fleet_reachable)) <= 0.5"),
    ("failed-reports-read-as-refused", r'status="refused"', 'status=~"refused|failed"'),
    ("one-restart-is-a-crash-loop", r'changes\(up\{job="agentd"\}\[1h\]\) >= 4', 'changes(up{job="agentd"}[1h]) >= 2'),
    ("lock-lost-without-for", r"(AgentdLockLost\n(?:.*\n){4})        for: 5m", r"\1        for: 1m"),
]


@pytest.mark.process
@pytest.mark.parametrize(("what", "pattern", "replacement"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_rule_that_fires_wrongly_fails_the_unit_tests(
    tmp_path: Path, what: str, pattern: str, replacement: str
) -> None:
    rules = RULES.read_text()
    mutated, count = re.subn(pattern, replacement, rules)
    assert count == 1, f"{what}: the pattern no longer matches the rule file"
    changed = changed_alerts(rules, mutated)
    assert len(changed) == 1, f"{what}: changes {sorted(changed)}"
    # The unit tests of the changed alert pass against the shipped rules and fail against the mutation.
    assert run("test", "rules", str(_copy(tmp_path / "shipped", rules, only=changed))).returncode == 0, what
    result = run("test", "rules", str(_copy(tmp_path / "mutated", mutated, only=changed)))
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr, what
