"""A reader never fails on a stored row (issue 23, findings 1 and 2): rows written before usage was
judged at the edge, or edited since, may hold Infinity, NaN, negative or absurd usage and cost. Every
reader still answers, shows no `$inf`, and the day's spend counts only finite costs of at least 0."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from rig import Rig
from support import CliResult, sql

from agentd.outlook.metrics import DispatchMetrics
from agentd.outlook.status import snapshot

# What a stored attempt may hold in its usage columns: SQLite keeps Infinity as a REAL (NaN binds as
# NULL), a REAL or text in an INTEGER column, anything at all in cost_estimated.
PLANTED = [
    {"cost_usd": "9e999", "input_tokens": "9e999"},  # Infinity, as SQL spells it
    {"cost_usd": "-9e999", "output_tokens": "-5"},
    {"cost_usd": "-1000", "cache_read_tokens": "1e30"},
    {"cost_usd": "1e300", "cache_write_tokens": "'lots'"},
    {"cost_usd": "'abc'", "input_tokens": "9223372036854775807", "output_tokens": "9223372036854775807"},
    {"cost_usd": "X'00ff'", "input_tokens": "1.5"},
]
# What a stored JSON column may hold that SQLite calls valid JSON and no record may: numbers json.loads
# reads as Infinity, a number beyond int64, nesting deeper than Python's parser goes.
POISON_JSON = '{"cost_usd": 1e999, "n": -1e999, "huge": 123456789012345678901234567890, "deep": %s}' % (
    "[" * 1500 + "]" * 1500
)


async def filled(rig: Rig) -> Rig:
    for _ in PLANTED:
        rig.add("example", subject="done")
    await rig.drain()
    return rig


def plant(rig: Rig) -> None:
    attempts = [a.attempt_id for a in rig.store.all_attempts()]
    assert len(attempts) == len(PLANTED)
    for attempt_id, columns in zip(attempts, PLANTED, strict=True):
        assigned = ", ".join(f"{name} = {value}" for name, value in columns.items())
        sql(rig, f"UPDATE task_attempts SET {assigned} WHERE attempt_id = ?", attempt_id)
    sql(rig, "UPDATE task_attempts SET diagnostics = ? WHERE attempt_id = ?", POISON_JSON, attempts[0])
    sql(rig, "UPDATE events SET payload = ? WHERE type = 'task_attempt_finished'", POISON_JSON)


@pytest.fixture
def budgeted_rig(rig_factory: Callable[..., Rig]) -> Rig:
    return rig_factory(lambda raw: raw.update(budget={"daily_usd": 5, "adapter_daily_usd": {"script": 5}}))


READERS = [
    ("evidence", "verify", "--all"),
    ("evidence", "verify", "--all", "--json"),
    ("task", "show", "1"),
    ("task", "show", "1", "--json"),
    ("task", "list"),
    ("events", "--json"),
    ("cost",),
    ("cost", "--json"),
    ("status",),
    ("status", "--json"),
    ("status", "--format", "agent-runtime"),
]


@pytest.mark.asyncio
async def test_every_reader_reads_poisoned_usage_rows(
    budgeted_rig: Rig, rig_cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = plant_after(await filled(budgeted_rig))
    for args in READERS:
        result = rig_cli(rig, *args)
        allowed = (0, 1) if args[0] == "evidence" else (0,)  # verify names the edited events: exit 1
        assert result.code in allowed and "Traceback" not in result.err, (args, result.code, result.err[-2000:])
        assert "inf" not in result.out.lower().replace("info", ""), (args, result.out[-2000:])
        assert "nan" not in result.out.lower().split(), (args, result.out[-2000:])
    monkeypatch.chdir(tmp_path)
    for fmt, out in (("bundle", tmp_path / "all.tar.gz"), ("tracecore", tmp_path / "tracecore")):
        result = rig_cli(rig, "evidence", "export", "--format", fmt, "--all", "--out", str(out))
        assert result.code in (0, 1) and "Traceback" not in result.err, (fmt, result.err[-2000:])
        assert out.exists(), (fmt, result.err)


def plant_after(rig: Rig) -> Rig:
    plant(rig)
    return rig


@pytest.mark.asyncio
async def test_the_days_spend_counts_only_finite_costs_of_at_least_zero(budgeted_rig: Rig) -> None:
    rig = await filled(budgeted_rig)
    attempts = [a.attempt_id for a in rig.store.all_attempts()]
    sql(rig, "UPDATE task_attempts SET cost_usd = 1.25 WHERE attempt_id = ?", attempts[0])
    plant(rig)
    sql(rig, "UPDATE task_attempts SET cost_usd = 1.25 WHERE attempt_id = ?", attempts[1])  # over -9e999
    spend = rig.store.spend_since(rig.clock.now().replace(hour=0, minute=0, second=0, microsecond=0))
    assert spend.total_usd == 1.25 and spend.dearest_usd == 1.25, spend
    shown = snapshot(rig.config, rig.store, rig.clock.now())["budget"]
    assert shown["spent_usd"] == 1.25 and all(math.isfinite(a["spent_usd"]) for a in shown["adapters"].values())
    assert json.dumps(shown, allow_nan=False)


@pytest.mark.asyncio
async def test_the_metrics_read_poisoned_rows_and_count_only_what_they_may(budgeted_rig: Rig) -> None:
    rig = plant_after(await filled(budgeted_rig))
    metrics = DispatchMetrics("agent", rig.config.db_path, rig.clock, rig.config)
    try:
        for cost in (-1000.0, math.inf, -math.inf, math.nan, 2.5, 10.0**300):
            usage = {"cost_usd": cost, "input_tokens": -3, "output_tokens": math.inf, "cache_read_tokens": 4}
            metrics.attempt_finished("script", "completed", "ok", 1.0, None, usage, None)
        text = generate_latest(metrics.registry).decode()
    finally:
        metrics.close()
    costs = [line for line in text.splitlines() if line.startswith("agentd_cost_usd_total{")]
    assert costs and all(float(line.rsplit(" ", 1)[1]) == 2.5 for line in costs), costs
    tokens = [line for line in text.splitlines() if line.startswith("agentd_tokens_total{")]
    assert tokens and all(float(line.rsplit(" ", 1)[1]) == 4 * 6 for line in tokens), tokens
    spent = [line for line in text.splitlines() if line.startswith("agentd_budget_spent_usd{")]
    assert spent and all(math.isfinite(float(line.rsplit(" ", 1)[1])) for line in spent), spent
