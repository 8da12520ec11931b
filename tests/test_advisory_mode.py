"""Issue 41, finding 5: without `[dispatch] run_as` an attempt runs as the services' own user and can approve
its own held task (`env -u AGENTD_ATTEMPT_ID agentd approve N`). A dispatcher whose agent runs a model refuses
that unless the operator says so (`--no-boundary`, or `[dispatch] boundary = "advisory"`), records who said it
and shows it in status (docs/install-and-deploy.md, "The advisory mode")."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from rig import Rig
from support import wait_until

from agentd.process.advisory import MODEL_BACKED, advisory_refusal

pytestmark = pytest.mark.timeout(60)


def with_adapter(kind: str) -> Callable[[dict[str, Any]], None]:
    def add(raw: dict[str, Any]) -> None:
        if kind == "ollama-generate":
            adapter = {"adapter_id": "model", "kind": kind, "endpoint": "http://127.0.0.1:9", "model": "m"}
        else:
            adapter = {"adapter_id": "model", "kind": kind, "command": "/bin/false"}
        raw["adapters"].append({**adapter, "timeout_ms": 1000})

    return add


@pytest.mark.parametrize("kind", sorted(MODEL_BACKED))
def test_a_dispatcher_with_a_model_backed_adapter_and_no_run_user_refuses_to_start(
    rig_factory: Callable[..., Rig], rig_cli: Any, kind: str
) -> None:
    rig = rig_factory(with_adapter(kind))
    before = len(rig.events())
    for service in ("dispatch", "run"):
        args = (service, "--until-idle") if service == "dispatch" else (service,)
        refused = rig_cli(rig, *args)
        assert refused.code == 2, refused
        assert "adapter model" in refused.err and "[dispatch] run_as" in refused.err
        assert "--no-boundary" in refused.err and 'boundary = "advisory"' in refused.err
    assert len(rig.events()) == before, "a refused start writes nothing"


def test_a_script_only_agent_still_starts_without_a_run_user(rig: Rig, rig_cli: Any) -> None:
    assert rig_cli(rig, "dispatch", "--until-idle").code == 0
    assert not [e for e in rig.events() if e.type == "dispatch_boundary_waived"]


@pytest.mark.parametrize(
    ("how", "by"),
    [((), '[dispatch] boundary = "advisory"'), (("--no-boundary",), "--no-boundary")],
)
@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_the_advisory_mode_said_on_purpose_starts_is_recorded_and_shown_in_status(
    rig_factory: Callable[..., Rig], rig_cli: Any, how: tuple[str, ...], by: str
) -> None:
    def mutate(raw: dict[str, Any]) -> None:
        with_adapter("claude-code")(raw)
        if not how:
            raw["dispatch"]["boundary"] = "advisory"

    rig = rig_factory(mutate)
    argv = [sys.executable, "-m", "agentd", "--config", str(rig.config.path), "dispatch", *how]
    dispatcher = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        shown = wait_until(
            lambda: rig_cli(rig, "status", "--json").json()["boundary"]["waived"], 30, "the waiver shown"
        )
        assert shown["by"] == by and shown["adapters"] == ["model"]
        assert f"ADVISORY by {by}" in rig_cli(rig, "status").out
        waived = [e for e in rig.events() if e.type == "dispatch_boundary_waived"]
        assert [(e.payload["by"], e.payload["pid"]) for e in waived] == [(by, dispatcher.pid)]
    finally:
        dispatcher.send_signal(signal.SIGTERM)
        _, err = dispatcher.communicate(timeout=30)
    assert f"ADVISORY by {by}" in err
    assert rig_cli(rig, "status", "--json").json()["boundary"]["waived"] is None, "a stopped dispatcher waives nothing"


def test_as_root_the_refusal_offers_the_line_that_makes_a_run_user(rig_factory: Callable[..., Rig]) -> None:
    rig = rig_factory(with_adapter("hermes-agent"))
    said = advisory_refusal(rig.config, ["model"], root=True)
    name = f"agentd-{rig.config.agent.agent_id}-run"
    assert f"useradd --system --user-group --no-create-home --shell /usr/sbin/nologin {name}" in said
    assert f'run_as = "{name}"' in said
    assert "useradd" not in advisory_refusal(rig.config, ["model"], root=False)


def test_the_boundary_setting_takes_only_its_two_values(rig_factory: Callable[..., Rig]) -> None:
    from agentd.errors import ConfigError

    with pytest.raises(ConfigError, match="boundary"):
        rig_factory(lambda raw: raw["dispatch"].update(boundary="off"))


@pytest.mark.parametrize("stored", ["{not json", "[]", '{"by": 3, "pid": 1}', '{"by": "--no-boundary"}', "null"])
def test_a_waiver_edited_into_something_else_leaves_status_answering(rig: Rig, rig_cli: Any, stored: str) -> None:
    """A dispatch_boundary_waived whose payload is no waiver (an edit of the database) made `agentd status`
    end in a traceback: it now answers, without a waiver, and `evidence verify` names the edit."""
    rig.store.record_event("dispatch_boundary_waived", rig.clock.now(), {"by": "--no-boundary", "pid": 1})
    with sqlite3.connect(rig.config.db_path) as conn:
        conn.execute("UPDATE events SET payload = ? WHERE type = 'dispatch_boundary_waived'", (stored,))
    for args in (("status",), ("status", "--json")):
        shown = rig_cli(rig, *args)
        assert shown.code == 0 and "Traceback" not in shown.err, shown
    assert rig_cli(rig, "status", "--json").json()["boundary"]["waived"] is None
    verified = rig_cli(rig, "evidence", "verify")
    assert verified.code == 1 and "hash does not match" in verified.out + verified.err, verified


@pytest.mark.parametrize(
    ("run_as", "gateway", "own", "said"),
    [
        (None, {}, False, "share the host's network: no network of their own in the advisory mode"),
        ("nobody", {}, True, "each attempt in a network of its own"),
        ("nobody", {"network": False}, False, "share the host's network ([gateway] network = false)"),
        (None, {"enabled": False}, False, "straight to the provider, the key in the attempt's environment"),
    ],
)
def test_status_says_where_model_calls_go_and_whose_network_the_attempt_has(
    rig_factory: Callable[..., Rig], rig_cli: Any, run_as: str | None, gateway: dict[str, Any], own: bool, said: str
) -> None:
    """docs/gateway.md: the gateway is on in the advisory mode too; the attempt's own network needs a run user,
    and without one status says the attempt shares the host's (both of status's paths, the fast and the full)."""

    def mutate(raw: dict[str, Any]) -> None:
        with_adapter("claude-code")(raw)
        if run_as:
            raw["dispatch"]["run_as"] = run_as
            raw["paths"]["run_dir"] = "runs"  # outside the state dir, as run_as needs
        raw["gateway"] = gateway

    rig = rig_factory(mutate)
    for _ in range(2):  # the first builds the fast path's cached view; the second reads it
        shown = rig_cli(rig, "status", "--json").json()["network"]
        assert shown["routed"] == ["model"] and shown["own_network"] is own and said in shown["line"], shown
        assert shown["gateway"] is ("enabled" not in gateway)
        assert "network  adapter model: model calls" in rig_cli(rig, "status").out


def test_a_network_of_its_own_without_the_gateway_is_refused_as_a_setting(rig_factory: Callable[..., Rig]) -> None:
    from agentd.errors import ConfigError

    with pytest.raises(ConfigError, match="network = true needs enabled = true"):
        rig_factory(lambda raw: raw.update(gateway={"enabled": False, "network": True}))


def test_an_agent_with_no_harness_adapter_is_told_the_gateway_carries_nothing(rig: Rig, rig_cli: Any) -> None:
    shown = rig_cli(rig, "status", "--json").json()["network"]
    assert shown["routed"] == [] and "carries none" in shown["line"]
