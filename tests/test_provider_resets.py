"""A provider's rate limit holds its credential until its reset (docs/gateway.md, "Quotas and resets"): who
shares a credential, what the judge makes of a 429 the gateway read, and that the outcome commit records it."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from rig import Rig
from support import attempt_planner

from agentd.adapters.base import AdapterRun
from agentd.adapters.routes import attempt_environment, credential_group, through
from agentd.attempt.guards import provider_reset_of
from agentd.clock import format_ts
from agentd.config.gateway import upstream_of
from agentd.records import ClaudeCodeAdapterConfig, CodexAdapterConfig, CredentialGroup


def claude(adapter_id: str, env_file: str, base: str = "https://api.anthropic.com") -> dict[str, Any]:
    return {
        "adapter_id": adapter_id,
        "kind": "claude-code",
        "command": "claude",
        "timeout_ms": 60_000,
        "env_file": env_file,
        "env": {"ANTHROPIC_BASE_URL": base},
    }


def test_adapters_on_one_env_file_and_upstream_share_a_credential(rig: Rig) -> None:
    adapters = {
        "a": ClaudeCodeAdapterConfig.model_validate(claude("a", "/etc/agentd/keys.env")),
        "b": ClaudeCodeAdapterConfig.model_validate(claude("b", "/etc/agentd/keys.env")),
        "other-key": ClaudeCodeAdapterConfig.model_validate(claude("other-key", "/etc/agentd/other.env")),
        "other-host": ClaudeCodeAdapterConfig.model_validate(claude("other-host", "/etc/agentd/keys.env", "http://x")),
    }
    config = replace(rig.config, adapters={**rig.config.adapters, **adapters})
    group = credential_group(config, "a")
    assert group is not None and group.adapters == ("a", "b")
    assert credential_group(config, "other-key") != group and credential_group(config, "other-host") != group
    assert credential_group(config, "script") is None  # a script's calls are not routed


def test_a_rate_limited_run_with_a_reset_rests_its_credential_and_one_without_does_not(rig: Rig) -> None:
    group = CredentialGroup("c1", ("a",))
    at = rig.clock.now() + timedelta(seconds=40)
    said = {"rate_limit": {"reset_at": format_ts(at), "reason": "429 rate_limit_error", "credential": "d1"}}
    run = AdapterRun("error", False, "rate limited", None, rate_limited=True, diagnostics=said)
    reset = provider_reset_of(run, group, rate_limited=True)
    assert reset is not None and reset.until == at and reset.group == group and "429" in reset.reason
    assert reset.fleet_credential == "d1"  # what the fleet shares it by (docs/gateway.md, "Quotas and resets")
    assert provider_reset_of(run, group, rate_limited=False) is None
    assert provider_reset_of(run, None, rate_limited=True) is None
    bare = AdapterRun("error", False, "rate limited", None, rate_limited=True)
    assert provider_reset_of(bare, group, rate_limited=True) is None
    poisoned = AdapterRun(
        "error", False, "x", None, rate_limited=True, diagnostics={"rate_limit": {"reset_at": "soon"}}
    )
    assert provider_reset_of(poisoned, group, rate_limited=True) is None


@pytest.mark.parametrize(
    ("base", "gateway", "expected"),
    [
        ("https://api.openai.com/v1", "http://127.0.0.1:8517", "http://127.0.0.1:8517/v1"),
        ("https://api.anthropic.com", "http://127.0.0.1:8517", "http://127.0.0.1:8517"),
        ("http://10.0.0.5:11434/api/v1?x=1", "http://127.0.0.1:9", "http://127.0.0.1:9/api/v1?x=1"),
    ],
)
def test_the_attempt_reaches_the_same_path_at_the_gateway(base: str, gateway: str, expected: str) -> None:
    assert through(base, gateway) == expected


def test_under_the_gateway_the_attempt_holds_a_token_where_the_key_was() -> None:
    adapter = CodexAdapterConfig.model_validate(
        {
            "adapter_id": "c",
            "kind": "codex",
            "command": "codex",
            "timeout_ms": 60_000,
            "provider": {"id": "p", "base_url": "https://api.openai.com/v1", "env_key": "MY_KEY"},
        }
    )
    upstream = upstream_of(adapter, {"MY_KEY": "sk-real"})
    assert upstream is not None and upstream.key_var == "MY_KEY" and upstream.key_style == "bearer"
    env = attempt_environment({"MY_KEY": "sk-real", "PATH": "/bin"}, upstream, "http://127.0.0.1:1", "tok")
    assert env == {"MY_KEY": "tok", "PATH": "/bin"}
    keys = {"ANTHROPIC_API_KEY": "sk-ant", "ANTHROPIC_AUTH_TOKEN": "sk-2"}
    upstream = upstream_of(ClaudeCodeAdapterConfig.model_validate(claude("a", "/k.env")), keys)
    assert upstream is not None
    env = attempt_environment({**keys, "HOME": "/h"}, upstream, "http://127.0.0.1:7", "tok")
    assert env == {"ANTHROPIC_API_KEY": "tok", "HOME": "/h", "ANTHROPIC_BASE_URL": "http://127.0.0.1:7"}
    assert "sk-" not in repr(env)


def test_status_the_api_and_the_console_say_what_waits_for_a_providers_reset(rig: Rig) -> None:
    from test_web_console import logged_in
    from webrig import serving

    from agentd.outlook.status import snapshot
    from agentd.records import ProviderReset
    from agentd.store.resets import record_reset

    waiting = rig.add("example")  # on adapter `script`
    group = CredentialGroup("c1", ("script",), ("example",), (), ())
    now = rig.clock.now()
    with rig.store.transaction():
        record_reset(rig.store.tx, ProviderReset(group, now + timedelta(seconds=40), "429 from the provider"), now)
    shown = snapshot(rig.config, rig.store, now)
    assert shown["waiting"]["resting"] == 1 and shown["waiting"]["claimable"] == 0
    [reset] = shown["provider_resets"]
    assert reset["adapters"] == ["script"] and reset["in_s"] == 40.0 and reset["reason"] == "429 from the provider"
    with serving(rig) as web:
        page = logged_in(web)[0].get("/").text
        assert "provider&#39;s reset 1" in page or "provider's reset 1" in page
        assert "Waiting for the provider" in page and "429 from the provider" in page
        assert web.client().get("/api/status").json()["provider_resets"][0]["adapters"] == ["script"]
    assert waiting.task_id not in {
        t.task_id for t in [rig.store.claim_next_task(now, "t", attempt_planner(rig), _root(rig))] if t
    }
    later = now + timedelta(seconds=41)
    claim = rig.store.claim_next_task(later, "t", attempt_planner(rig), _root(rig))
    assert claim is not None and claim.task.task_id == waiting.task_id  # its reset came: it runs


def _root(rig: Rig) -> Any:
    return rig.config.paths.state_dir / "attempts"
