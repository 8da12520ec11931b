"""The shipped monitoring (monitoring/agentd.rules.yml, monitoring/agentd.dashboard.json) reads only
what agentd really exports, and its failure alert moves when an attempt really fails.

The names and labels come from agentd's own registries, exercised so every labelled series has a
sample, not from a list kept by hand: a renamed metric or label fails here. The PromQL is checked
at the level of regular expressions (selectors, `by (…)`, `on (…)`), which is what a typo or a
rename breaks; Prometheus itself is not needed.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from inprocess import in_process
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rig import Rig

from agentd.config.settings import BudgetSection
from agentd.outlook.metric_specs import CATALOGUE
from agentd.outlook.metrics import DispatchMetrics, SensorMetrics
from agentd.process import procs
from agentd.records import TASK_STATUSES
from agentd.services.dispatch import Dispatcher

MONITORING = Path(__file__).resolve().parent.parent / "monitoring"
RULES = MONITORING / "agentd.rules.yml"
RULE_TESTS = MONITORING / "tests" / "agentd.rules.test.yml"  # `promtool test rules` (tests/test_promtool.py)
DASHBOARD = MONITORING / "agentd.dashboard.json"

# Prometheus adds these to every series of the scrape job of docs/monitoring.md; agentd does not export them.
TARGET_LABELS = {"agent", "instance", "job"}
METRIC = re.compile(r"\bagentd_[a-z0-9_]+")
SELECTOR = re.compile(r"\b(agentd_[a-z0-9_]+)\s*\{([^}]*)\}")
MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")

ALERTS = {
    "AgentdServiceDown",
    "AgentdLockLost",
    "AgentdQueueStuck",
    "AgentdDispatchPausedLong",
    "AgentdApprovalWaiting",
    "AgentdToolCallWaiting",
    "AgentdMessagesFailed",
    "AgentdBackupOverdue",
    "AgentdAttemptsFailing",
    "AgentdPolicyViolation",
    "AgentdPermanentFailures",
    "AgentdAttemptRunningLong",
    "AgentdSensorFailing",
    "AgentdBootSweeps",
    "AgentdArchiveBehind",
    "AgentdFleetUnreachable",
    "AgentdFleetQueueDown",
    "AgentdFleetLeasesLost",
    "AgentdFleetClaimSlow",
    "AgentdFleetTasksRefused",
}
# alerts about the whole fleet: aggregated over every agent, so they have no `agent` label to name
FLEET_WIDE = {"AgentdFleetQueueDown"}
FAILING = ("retryable_failure", "permanent_failure", "crashed_runtime", "blocked", "policy_violation")
NOT_FAILING = ("completed", "interrupted", "rate_limited", "operator_canceled")
FLEET_REPORTED = ("completed", "failed", "refused")
# the values a selector may ask for, per metric and label (a typo in one matches nothing, silently)
VALUES = {
    ("agentd_attempts_total", "outcome"): {*FAILING, *NOT_FAILING},
    ("agentd_tasks", "status"): set(TASK_STATUSES),
    ("agentd_tasks_waiting", "reason"): {"claimable", "retry_waiting", "delayed", "approval", "budget"},
    ("agentd_service_live", "service"): {"dispatch", "sensors"},
    ("agentd_sensor_runs_total", "result"): {"ok", "failed", "timeout", "start_failed", "internal_error"},
    ("agentd_sensor_events_total", "result"): {"created", "recorded", "deduped", "stale", "rejected"},
    ("agentd_fleet_reported_total", "status"): set(FLEET_REPORTED),
}


# --- what agentd exports ----------------------------------------------------------------------


@dataclass(frozen=True)
class Exported:
    families: set[str]
    samples: dict[str, set[str]]  # sample name -> its label names
    by_family: dict[str, set[str]]  # family name -> its sample names


def _parse(text: str) -> tuple[set[str], dict[str, set[str]], dict[str, set[str]]]:
    families, samples, by_family = set(), {}, {}
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        for sample in family.samples:
            samples.setdefault(sample.name, set()).update(sample.labels)
            by_family.setdefault(family.name, set()).add(sample.name)
    return families, samples, by_family


@pytest.fixture
def exported(rig: Rig) -> Iterator[Exported]:
    """Both services' registries on a migrated database, every labelled series given a sample."""
    now = rig.clock.now()
    for service in ("dispatch", "sensors"):  # the liveness gauges have a series per status row
        rig.store.report_service_status(service, procs.this_process(), "idle", None, now, now)
    agent_id = rig.config.agent.agent_id
    budgeted = replace(rig.config, budget=BudgetSection(daily_usd=1))  # the budget gauges need a [budget]
    dispatch = DispatchMetrics(agent_id, rig.config.db_path, rig.clock, budgeted)
    sensors = SensorMetrics(agent_id, rig.config.db_path, rig.clock)
    try:
        usage = {
            "cost_usd": 0.1,
            "input_tokens": 3,
            "output_tokens": 1,
            "cache_read_tokens": 1,
            "cache_write_tokens": 1,
        }
        dispatch.attempt_finished("a", "completed", "ok", 1.0, "m", usage, 0.0)
        dispatch.schedule_created("x")
        dispatch.workflow_moved("w", "transition")
        dispatch.boot_swept()
        dispatch.lock_held(True)
        dispatch.message_counted("hook", "delivered")
        dispatch.fleet_claimed(1, 0.004)  # the fleet metrics exist once an intake has used them
        dispatch.fleet_leases(1)
        dispatch.fleet_lost()
        dispatch.fleet_reachable(True)
        for status in FLEET_REPORTED:
            dispatch.fleet_reported(status)
        sensors.sensor_run("s", "ok", {"created": 1, "recorded": 2, "deduped": 1, "rejected": 1, "stale": 0})
        families: set[str] = set()
        samples: dict[str, set[str]] = {}
        by_family: dict[str, set[str]] = {}
        for metrics in (dispatch, sensors):
            more_families, more_samples, more_by_family = _parse(generate_latest(metrics.registry).decode())
            families |= more_families
            for name, labels in more_samples.items():
                samples.setdefault(name, set()).update(labels)
            for name, names in more_by_family.items():
                by_family.setdefault(name, set()).update(names)
        yield Exported(families, samples, by_family)
    finally:
        dispatch.close()
        sensors.close()


def test_agentd_exports_the_names_the_monitoring_is_written_for(exported: Exported) -> None:
    """The metrics the README and monitoring/ name; a rename here is a rename there."""
    assert exported.families >= {
        "agentd_build_info",  # an Info: exported as a gauge of value 1
        "agentd_tasks",
        "agentd_tasks_waiting",
        "agentd_oldest_pending_task_age_seconds",
        "agentd_running_attempt_age_seconds",
        "agentd_service_live",
        "agentd_service_heartbeat_age_seconds",
        "agentd_event_chain_head_sequence",
        "agentd_attempts",
        "agentd_attempt_duration_seconds",
        "agentd_cost_usd",
        "agentd_tokens",
        "agentd_schedule_tasks_created",
        "agentd_workflow_transitions",
        "agentd_dispatch_lock_held",
        "agentd_last_successful_attempt_timestamp_seconds",
        "agentd_boot_sweep_reclaimed",
        "agentd_sensor_runs",
        "agentd_sensor_events",
        "agentd_fleet_leases_held",
        "agentd_fleet_claimed",
        "agentd_fleet_lease_lost",
        "agentd_fleet_reported",
        "agentd_fleet_claim_seconds",
        "agentd_fleet_reachable",
    }
    assert exported.samples["agentd_attempts_total"] == {"adapter", "outcome", "exit_status"}
    assert exported.samples["agentd_attempt_duration_seconds_bucket"] == {"adapter", "le"}
    assert exported.samples["agentd_build_info"] == {"version", "agent_id", "service"}
    assert exported.samples["agentd_service_live"] == {"service"}
    assert exported.samples["agentd_sensor_runs_total"] == {"sensor", "result"}
    assert exported.samples["agentd_fleet_reported_total"] == {"status"}
    # `_created` series are disabled: a rule reading one would read nothing
    assert not [name for name in exported.samples if name.endswith("_created")]


def test_no_metric_exports_a_label_the_scrape_job_sets(exported: Exported) -> None:
    """The scrape job names the agent (and job, instance) on every series. A metric exporting one of
    those labels itself collides: with Prometheus's default honor_labels: false its own label is renamed
    `exported_agent`, so one series carries two agent names and every `by (agent)` reads the target's.
    The target label is the one that names the agent; agentd_build_info{agent_id} maps it to the id."""
    clashing = {name: labels & TARGET_LABELS for name, labels in exported.samples.items()}
    assert {name: labels for name, labels in clashing.items() if labels} == {}
    assert [spec.name for spec in CATALOGUE if set(spec.labels) & TARGET_LABELS] == []


# --- reading PromQL at the level of regular expressions -----------------------------------------


def _matchers(body: str) -> list[tuple[str, str, str]]:
    """`a="x", b=~"y|z"` -> [(a, =, x), (b, =~, y|z)]; the whole body must be matchers."""
    found, at = [], 0
    while at < len(body.strip()):
        match = MATCHER.match(body, at)
        assert match, f"cannot read the label matchers {body!r} from position {at}"
        value = match.group(3).replace('\\"', '"').replace("\\\\", "\\")
        found.append((match.group(1), match.group(2), value))
        at = match.end()
    return found


def _matches(matchers: list[tuple[str, str, str]], labels: dict[str, str]) -> bool:
    """Prometheus's rule: a missing label is the empty string, regular expressions are fully anchored."""
    for name, op, value in matchers:
        have = labels.get(name, "")
        hit = re.fullmatch(f"(?:{value})", have) is not None if op in ("=~", "!~") else have == value
        if hit != (op in ("=", "=~")):
            return False
    return True


def _closing(expr: str, opening: int) -> int:
    depth = 0
    for at in range(opening, len(expr)):
        depth += {"(": 1, ")": -1}.get(expr[at], 0)
        if depth == 0:
            return at
    raise AssertionError(f"unbalanced parentheses in {expr!r}")


def _problems(expr: str, exported: Exported) -> list[str]:
    """Every agentd metric is a sample agentd exports; every label a selector or a grouping names is
    on the metrics it applies to; every value asked of an enumerated label is one agentd emits."""
    problems = []
    used = set(METRIC.findall(expr))
    problems += [f"{name} is not exported" for name in sorted(used - set(exported.samples))]
    known = set().union(*(exported.samples.get(name, set()) for name in used)) | TARGET_LABELS
    for name, body in SELECTOR.findall(expr):
        for label, _, value in _matchers(body):
            if label not in exported.samples.get(name, set()) | TARGET_LABELS:
                problems.append(f"{name} has no label {label!r}")
            allowed = VALUES.get((name, label))
            if allowed is not None and not set(re.split(r"\|", value)) <= allowed:
                problems.append(f"{name}{{{label}}} is never {value!r}")
    for grouping in GROUPING.finditer(expr):
        kind, labels = grouping.group(1), {x.strip() for x in grouping.group(2).split(",") if x.strip()}
        if kind not in ("by", "without"):
            problems += [f"{kind} ({label}) names a label no metric here has" for label in sorted(labels - known)]
            continue
        rest = expr[grouping.end() :]
        if not rest.lstrip().startswith("("):
            problems.append(f"write `{grouping.group(0)}` before the aggregation's argument in {expr!r}")
            continue
        opening = grouping.end() + len(rest) - len(rest.lstrip())
        inside = METRIC.findall(expr[opening : _closing(expr, opening) + 1])
        for name in inside:
            missing = labels - exported.samples.get(name, set()) - TARGET_LABELS
            problems += [f"{kind} ({label}) over {name}, which has no such label" for label in sorted(missing)]
    return problems


def test_the_promql_reader_catches_what_it_is_for(exported: Exported) -> None:
    """The checks below would catch a wrong name, label, value or grouping."""
    assert _problems('sum by (agent, outcome) (rate(agentd_attempts_total{outcome="blocked"}[5m]))', exported) == []
    assert _problems("rate(agentd_attempts[5m])", exported) == ["agentd_attempts is not exported"]
    assert _problems("agentd_tasks_created", exported) == ["agentd_tasks_created is not exported"]
    assert _problems('agentd_tasks{state="pending"}', exported) == ["agentd_tasks has no label 'state'"]
    assert _problems('agentd_tasks{status=~"pending|failed"}', exported) == [
        "agentd_tasks{status} is never 'pending|failed'"
    ]
    assert _problems("sum by (model) (rate(agentd_attempts_total[5m]))", exported) == [
        "by (model) over agentd_attempts_total, which has no such label"
    ]
    assert _matches([("outcome", "=~", "a|b")], {"outcome": "b"})
    assert not _matches([("outcome", "=~", "a|b")], {"outcome": "ab"})  # anchored
    assert not _matches([("exit_status", "!=", "ok")], {"exit_status": "ok"})
    assert _matches([("x", "!~", ".+")], {})


# --- the rule file ------------------------------------------------------------------------------


def _rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def _rule(name: str) -> dict[str, Any]:
    (rule,) = [rule for rule in _rules() if rule.get("alert") == name]
    return rule


def test_the_rule_file_has_the_shape_prometheus_loads() -> None:
    loaded = yaml.safe_load(RULES.read_text())
    assert set(loaded) == {"groups"} and isinstance(loaded["groups"], list) and loaded["groups"]
    for group in loaded["groups"]:
        assert set(group) <= {"name", "interval", "rules", "labels", "limit", "query_offset"}
        assert isinstance(group["name"], str) and group["name"] and isinstance(group["rules"], list)
    names = [group["name"] for group in loaded["groups"]]
    assert len(names) == len(set(names))
    rules = _rules()
    alerts = [rule["alert"] for rule in rules]
    assert len(alerts) == len(set(alerts)), "alert names are unique"
    assert set(alerts) == ALERTS
    for rule in rules:
        name = rule["alert"]
        assert set(rule) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}, name
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]*", name)
        assert isinstance(rule["expr"], str) and rule["expr"].strip(), name
        assert re.fullmatch(r"([0-9]+(ms|s|m|h|d|w|y))+", str(rule["for"])), (name, rule["for"])
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), name
        assert all(isinstance(v, str) for v in rule["labels"].values()), name
        for key in ("summary", "description"):
            text = rule["annotations"][key]
            assert ("{{ $labels.agent }}" in text) is (name not in FLEET_WIDE), (name, key)
            assert text.count("{{") == text.count("}}"), (name, key)
        assert rule["expr"].count("(") == rule["expr"].count(")"), name


def test_every_rule_reads_only_what_agentd_exports(exported: Exported) -> None:
    for rule in _rules():
        assert METRIC.search(rule["expr"]), rule["alert"]
        assert _problems(rule["expr"], exported) == [], rule["alert"]


def test_no_rule_judges_failure_by_the_adapters_exit_status() -> None:
    """A failing adapter reports its failure in the result file and exits 0: the README's old
    `exit_status!="ok"` alert never fired. The rules count outcomes."""
    for rule in _rules():
        assert "exit_status" not in rule["expr"], rule["alert"]
    failing = _rule("AgentdAttemptsFailing")["expr"]
    assert "agentd_attempts_total" in failing and "outcome" in failing


def test_the_rule_unit_tests_feed_the_series_a_scrape_stores(exported: Exported) -> None:
    """The series monitoring/tests/agentd.rules.test.yml feeds promtool are what the scrape job of docs/monitoring.md
    stores: a sample agentd exports, with exactly its labels plus the target's (job, instance, agent). A unit test
    of a renamed metric, or of a label agentd does not export, would prove a rule against nothing."""
    loaded = yaml.safe_load(RULE_TESTS.read_text())
    fed = [series["series"] for test in loaded["tests"] for series in test["input_series"]]
    assert fed
    for series in fed:
        parts = re.fullmatch(r"([a-z_][a-z0-9_]*)\{(.*)\}", series)
        assert parts, series
        name, body = parts.groups()
        labels = {label for label, _, _ in _matchers(body)}
        if name == "up":  # Prometheus's own, per target
            assert labels == TARGET_LABELS, series
            continue
        assert name in exported.samples, series
        assert labels == exported.samples[name] | TARGET_LABELS, series
        assert _problems(series, exported) == [], series
        assert 'job="agentd"' in body, series


# --- the dashboard ------------------------------------------------------------------------------


def _walk(node: Any, key: str) -> Iterator[Any]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                yield v
            yield from _walk(v, key)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item, key)


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out += panel.get("panels", [])
    return out


def test_the_dashboard_reads_only_what_agentd_exports(exported: Exported) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = list(_walk(dashboard, "expr"))
    assert len(exprs) >= 13
    for expr in exprs:
        assert METRIC.search(expr), expr
        assert _problems(expr, exported) == [], expr
        for _, body in SELECTOR.findall(expr):  # every query follows the agent picker
            assert ("agent", "=~", "$agent") in _matchers(body), expr
    # every family agentd exports is on the dashboard
    shown = {name for expr in exprs for name in METRIC.findall(expr)}
    assert [family for family, names in exported.by_family.items() if not names & shown] == []


def test_the_dashboard_is_importable_and_picks_its_datasource_and_agent() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert 36 <= dashboard["schemaVersion"] <= 41
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource" and variables["DS_PROMETHEUS"]["query"] == "prometheus"
    agent = variables["agent"]
    assert agent["type"] == "query" and agent["definition"] == "label_values(agentd_build_info, agent)"
    assert agent["query"]["query"] == "label_values(agentd_build_info, agent)"
    panels = _panels(dashboard)
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel["targets"], panel["title"]
        for source in [panel["datasource"], *(t["datasource"] for t in panel["targets"])]:
            assert source == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


# what the dashboard must show: a metric, and the label it is broken down by (if any)
WANTED = [
    ("queue by status", "agentd_tasks", "status"),
    ("waiting by reason", "agentd_tasks_waiting", "reason"),
    ("oldest pending age", "agentd_oldest_pending_task_age_seconds", None),
    ("attempts by outcome", "agentd_attempts_total", "outcome"),
    ("attempt duration", "agentd_attempt_duration_seconds_bucket", "le"),
    ("cost by model", "agentd_cost_usd_total", "model"),
    ("tokens by model", "agentd_tokens_total", "model"),
    ("tokens by kind", "agentd_tokens_total", "kind"),
    ("sensor runs by result", "agentd_sensor_runs_total", "result"),
    ("sensor events by result", "agentd_sensor_events_total", "result"),
    ("dispatch lock held", "agentd_dispatch_lock_held", None),
    ("service liveness", "agentd_service_live", "service"),
    ("running attempt age", "agentd_running_attempt_age_seconds", None),
    ("boot-sweep reclaims", "agentd_boot_sweep_reclaimed_total", None),
    ("event chain head", "agentd_event_chain_head_sequence", None),
    ("messages failed for good", "agentd_messages_failed", None),
    ("fleet reachable by agent", "agentd_fleet_reachable", "agent"),
    ("fleet leases held by agent", "agentd_fleet_leases_held", "agent"),
    ("fleet claims by agent", "agentd_fleet_claimed_total", "agent"),
    ("fleet leases lost by agent", "agentd_fleet_lease_lost_total", "agent"),
    ("fleet results by status", "agentd_fleet_reported_total", "status"),
    ("fleet claim latency", "agentd_fleet_claim_seconds_bucket", "le"),
]


@pytest.mark.parametrize(("what", "metric", "label"), WANTED, ids=[w[0] for w in WANTED])
def test_the_dashboard_has_a_panel_for(what: str, metric: str, label: str | None) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    hits = []
    for panel in _panels(dashboard):
        for target in panel.get("targets") or []:
            expr = target["expr"]
            if metric not in METRIC.findall(expr):
                continue
            grouped = {x.strip() for m in re.finditer(r"\bby\s*\(([^)]*)\)", expr) for x in m.group(1).split(",")}
            if label is None or label in grouped:
                hits.append((panel["title"], expr))
    assert hits, what
    if metric.endswith("_bucket"):  # a histogram is shown as quantiles or a heatmap
        assert any("histogram_quantile(" in expr for _, expr in hits)
        assert any(p["type"] == "heatmap" for p in _panels(dashboard) if p["title"] in {t for t, _ in hits})


# --- a failing attempt moves the counter the alert reads ------------------------------------------


def _attempts(metrics: DispatchMetrics) -> list[tuple[dict[str, str], float]]:
    text = generate_latest(metrics.registry).decode()
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "agentd_attempts_total"
    ]


def _gauge(metrics: DispatchMetrics, name: str, **labels: str) -> float:
    text = generate_latest(metrics.registry).decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def _numerator(expr: str) -> list[tuple[str, str, str]]:
    """The label matchers of the one agentd_attempts_total selector that picks some attempts out."""
    picked = [m for name, body in SELECTOR.findall(expr) if name == "agentd_attempts_total" if (m := _matchers(body))]
    assert len(picked) == 1, f"one selector of agentd_attempts_total with matchers, found {picked}"
    assert re.search(r"\bagentd_attempts_total\s*\[", expr), "and one of every attempt (the denominator)"
    return picked[0]


@pytest.fixture
def metered(rig: Rig) -> Iterator[tuple[Dispatcher, DispatchMetrics]]:
    metrics = DispatchMetrics(rig.config.agent.agent_id, rig.config.db_path, rig.clock)
    dispatcher = Dispatcher(
        rig.config, rig.db, clock=rig.clock, rng=random.Random(7), adapters=in_process, metrics=metrics
    )
    yield dispatcher, metrics
    metrics.close()


@pytest.mark.asyncio
async def test_a_failing_attempt_moves_the_counter_the_failure_alert_reads(
    rig: Rig, metered: tuple[Dispatcher, DispatchMetrics]
) -> None:
    dispatcher, metrics = metered
    await dispatcher.start()
    rig.add("flaky")  # adapter `fails`: writes a retryable_failure result and exits 0
    rig.add("flaky")
    rig.add()  # adapter `script`: completes
    assert await dispatcher.run_until_idle() == 3
    samples = _attempts(metrics)
    failed = {"adapter": "fails", "outcome": "retryable_failure", "exit_status": "ok"}
    completed = {"adapter": "script", "outcome": "completed", "exit_status": "ok"}
    assert sorted((labels["adapter"], value) for labels, value in samples) == [("fails", 2.0), ("script", 1.0)]
    assert (failed, 2.0) in samples and (completed, 1.0) in samples

    numerator = _numerator(_rule("AgentdAttemptsFailing")["expr"])
    assert _matches(numerator, failed), numerator
    assert not _matches(numerator, completed), numerator
    for outcome in FAILING:
        assert _matches(numerator, {**completed, "outcome": outcome}), outcome
    for outcome in NOT_FAILING:
        assert not _matches(numerator, {**failed, "outcome": outcome}), outcome
    # the share the alert compares with 0.5, from these counters: two of three attempts failed
    share = sum(v for labels, v in samples if _matches(numerator, labels)) / sum(v for _, v in samples)
    assert share == pytest.approx(2 / 3) and share > 0.5
    # the README's old alert would have counted none of them: the failing adapter exited 0
    old = _matchers('exit_status!="ok"')
    assert sum(v for labels, v in samples if _matches(old, labels)) == 0


@pytest.mark.asyncio
async def test_a_task_out_of_attempts_is_seen_by_the_permanent_failure_alert(
    rig: Rig, metered: tuple[Dispatcher, DispatchMetrics]
) -> None:
    """A task that runs out of attempts fails for good, but each attempt's outcome was
    retryable_failure: only the queue gauge shows it, so the alert reads that too."""
    dispatcher, metrics = metered
    await dispatcher.start()
    task = rig.add("flaky")
    assert _gauge(metrics, "agentd_tasks", status="permanent_failure") == 0
    for _ in range(task.max_attempts):
        assert await dispatcher.run_until_idle() == 1
        rig.clock.advance(3600)
    assert rig.store.get_task_or_raise(task.task_id).status == "permanent_failure"
    assert {labels["outcome"] for labels, _ in _attempts(metrics)} == {"retryable_failure"}
    assert _gauge(metrics, "agentd_tasks", status="permanent_failure") == 1
    selectors = [(n, _matchers(b)) for n, b in SELECTOR.findall(_rule("AgentdPermanentFailures")["expr"])]
    assert ("agentd_tasks", [("status", "=", "permanent_failure")]) in selectors
    assert ("agentd_attempts_total", [("outcome", "=", "permanent_failure")]) in selectors


# --- a task held for a person waits for its own alert, not the stuck-queue one --------------------


def _threshold(expr: str, metric: str) -> float:
    """The number `max by (agent) (METRIC) > N` compares with."""
    found = re.search(rf"\(\s*{metric}\s*\)\s*>\s*([0-9.]+)", expr)
    assert found, f"no `({metric}) > N` in {expr!r}"
    return float(found.group(1))


def test_a_task_held_for_approval_fires_the_approval_alert_never_the_stuck_queue_alert(
    rig: Rig, metered: tuple[Dispatcher, DispatchMetrics]
) -> None:
    from test_status_truth import add_held

    _, metrics = metered
    add_held(rig)
    stuck = _threshold(_rule("AgentdQueueStuck")["expr"], "agentd_oldest_pending_task_age_seconds")
    waiting = _threshold(_rule("AgentdApprovalWaiting")["expr"], "agentd_approval_oldest_age_seconds")
    assert waiting == 4 * 3600, "the documented default (monitoring/README.md, README)"
    rig.clock.advance(waiting + 60)
    assert _gauge(metrics, "agentd_oldest_pending_task_age_seconds") == 0 < stuck
    assert _gauge(metrics, "agentd_approval_oldest_age_seconds") > waiting
    assert _gauge(metrics, "agentd_tasks_waiting", reason="approval") == 1
    assert _gauge(metrics, "agentd_tasks_waiting", reason="claimable") == 0


def test_the_failed_message_alert_reads_the_gauge_status_reads() -> None:
    assert _threshold(_rule("AgentdMessagesFailed")["expr"], "agentd_messages_failed") == 0
