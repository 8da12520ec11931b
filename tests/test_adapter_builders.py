"""What each harness adapter would run: argv, environment and files, inspected before any run."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter
from test_outcome import task as make_task

from agentd.adapters.base import AttemptContext, HarnessSession, Invocation, PolicyHook
from agentd.adapters.claude import ClaudeCodeAdapter
from agentd.adapters.codex import CodexAdapter
from agentd.adapters.hermes import HermesAgentAdapter
from agentd.evidence import AttemptPaths, make_attempt_dir
from agentd.records import AdapterConfig, TaskRecord

BYPASS = ("--dangerously-skip-permissions", "bypassPermissions", "--dangerously-bypass-approvals-and-sandbox")


def ctx(
    tmp_path: Path,
    adapter: dict[str, Any],
    model: str | None = "m-1",
    env: dict[str, str] | None = None,
    task: TaskRecord | None = None,
) -> AttemptContext:
    paths = AttemptPaths(tmp_path / "attempt")
    make_attempt_dir(paths)
    config = TypeAdapter(AdapterConfig).validate_python(
        {"adapter_id": "a", "command": "cli", "timeout_ms": 60_000, **adapter}
    )
    return AttemptContext(
        task=task or make_task(),
        attempt_id="01ATTEMPT",
        adapter=config,
        model=model,
        paths=paths,
        workspace=tmp_path,
        cwd=tmp_path,
        env={"PATH": "/usr/bin", "HOME": "/scratch/home", **(env or {})},
        bundle_text="THE BUNDLE",
        timeout_s=60,
        kill_grace_s=1,
        output_cap_bytes=1 << 20,
    )


def test_claude_restricted_never_bypasses_permissions(tmp_path: Path) -> None:
    built = ClaudeCodeAdapter().build(
        ctx(tmp_path, {"kind": "claude-code", "allowed_tools": ["Bash", "Read"], "max_turns": 6})
    )
    assert built.argv[:2] == ["cli", "-p"] and built.stdin == b"THE BUNDLE"
    assert "--output-format" in built.argv and "stream-json" in built.argv and "--verbose" in built.argv
    assert built.argv[built.argv.index("--model") + 1] == "m-1"
    assert built.argv[built.argv.index("--allowedTools") + 1] == "Bash,Read"
    assert built.argv[built.argv.index("--max-turns") + 1] == "6"
    assert not any(flag in arg for arg in built.argv for flag in BYPASS)
    assert "IS_SANDBOX" not in built.env
    assert built.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and built.env["DISABLE_AUTOUPDATER"] == "1"
    assert built.env["API_TIMEOUT_MS"] == "20000" and built.env["CLAUDE_CODE_MAX_RETRIES"] == "1"


def test_claude_trusted_vm_sets_the_flag_and_is_sandbox_only_when_declared(tmp_path: Path) -> None:
    built = ClaudeCodeAdapter().build(ctx(tmp_path, {"kind": "claude-code", "autonomy": {"profile": "trusted-vm"}}))
    assert "--dangerously-skip-permissions" in built.argv and built.env["IS_SANDBOX"] == "1"


def test_claude_sandbox_maps_to_a_permission_mode(tmp_path: Path) -> None:
    built = ClaudeCodeAdapter().build(ctx(tmp_path, {"kind": "claude-code", "sandbox": "read-only"}))
    assert built.argv[built.argv.index("--permission-mode") + 1] == "plan"


def test_codex_writes_a_quiet_per_attempt_home(tmp_path: Path) -> None:
    provider = {"id": "fake", "base_url": "http://127.0.0.1:9/v1", "env_key": "FAKE_KEY"}
    context = ctx(tmp_path, {"kind": "codex", "sandbox": "workspace-write", "provider": provider})
    built = CodexAdapter().build(context)
    assert built.argv[:3] == ["cli", "exec", "--json"] and built.argv[-1] == "-" and built.stdin == b"THE BUNDLE"
    assert built.argv[built.argv.index("-s") + 1] == "workspace-write"
    assert built.env["CODEX_HOME"] == str(context.paths.scratch / "codex")
    [(path, text)] = built.files.items()
    settings = tomllib.loads(text)
    assert path == context.paths.scratch / "codex" / "config.toml"
    assert settings["check_for_update_on_startup"] is False and settings["analytics"] == {"enabled": False}
    assert settings["features"] == {"plugins": False, "remote_plugin": False, "apps": False}
    assert settings["model"] == "m-1" and settings["model_provider"] == "fake"
    fake = settings["model_providers"]["fake"]
    assert fake["base_url"] == "http://127.0.0.1:9/v1" and fake["env_key"] == "FAKE_KEY"
    assert fake["wire_api"] == "responses" and fake["request_max_retries"] == 1


def test_codex_without_a_sandbox_is_read_only(tmp_path: Path) -> None:
    built = CodexAdapter().build(ctx(tmp_path, {"kind": "codex"}))
    assert built.argv[built.argv.index("-s") + 1] == "read-only"
    assert not any(flag in arg for arg in built.argv for flag in BYPASS)


def test_hermes_gets_its_key_only_through_its_config_file(tmp_path: Path) -> None:
    context = ctx(
        tmp_path,
        {"kind": "hermes-agent", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "KEY", "context_length": 131072},
        env={"KEY": "sk-secret-value"},
    )
    built: Invocation = HermesAgentAdapter().build(context)
    assert built.argv[:3] == ["cli", "-z", "THE BUNDLE"] and "--usage-file" in built.argv
    assert built.env["HERMES_HOME"] == str(context.paths.scratch / "hermes")
    assert built.env["HERMES_DISABLE_LAZY_INSTALLS"] == "1" and built.env["HERMES_STREAM_STALE_GIVEUP"] == "1"
    [text] = built.files.values()
    settings = json.loads(text)  # JSON is YAML
    assert settings["model"] == {
        "provider": "custom",
        "default": "m-1",
        "context_length": 131072,
        "base_url": "http://127.0.0.1:9/v1",
        "api_key": "sk-secret-value",
    }
    assert settings["security"] == {"allow_lazy_installs": False} and settings["agent"] == {"api_max_retries": 1}
    assert not any("sk-secret-value" in arg for arg in built.argv)


@pytest.mark.parametrize(
    "adapter",
    [
        {"kind": "claude-code", "extra_args": ["--dangerously-skip-permissions"]},
        {"kind": "codex", "extra_args": ["--dangerously-bypass-approvals-and-sandbox"]},
        {"kind": "codex", "sandbox": "danger-full-access"},
    ],
)
def test_config_check_refuses_a_bypass_without_the_trusted_posture(tmp_path: Path, adapter: dict[str, Any]) -> None:
    from support import write_config

    from agentd.errors import ConfigError
    from agentd.work.validation import load_config

    entry = {"adapter_id": "harness", "command": "cli", "timeout_ms": 1000, **adapter}
    path = write_config(tmp_path, lambda raw: raw["adapters"].append(entry))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert any("trusted-vm" in str(p) for p in caught.value.problems)


def test_the_trusted_posture_makes_the_same_flags_acceptable(tmp_path: Path) -> None:
    from support import write_config

    from agentd.work.validation import load_config

    entry = {
        "adapter_id": "harness",
        "kind": "codex",
        "command": "cli",
        "timeout_ms": 1000,
        "sandbox": "danger-full-access",
        "autonomy": {"profile": "trusted-vm"},
    }
    assert load_config(write_config(tmp_path, lambda raw: raw["adapters"].append(entry))).adapters["harness"]


def test_no_builder_passes_the_service_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVICE_SECRET", "x")
    for adapter, kind in (
        (ClaudeCodeAdapter(), "claude-code"),
        (CodexAdapter(), "codex"),
        (HermesAgentAdapter(), "hermes-agent"),
    ):
        built = adapter.build(ctx(tmp_path / kind, {"kind": kind}))  # type: ignore[attr-defined]
        assert "SERVICE_SECRET" not in built.env, kind


def governed(context: AttemptContext) -> AttemptContext:
    """The context of an attempt whose tool calls a policy judges (docs/policy.md)."""
    return replace(context, hook=PolicyHook.of(context.paths.run, 30))


@pytest.mark.parametrize(
    "adapter",
    [
        {"allowed_tools": ["Bash", "Read"]},
        {"sandbox": "workspace-write"},
        {"autonomy": {"profile": "trusted-vm"}, "sandbox": "danger-full-access"},
    ],
    ids=["allowed-tools", "workspace-write", "trusted-vm"],
)
def test_claude_under_a_policy_allows_nothing_of_its_own(tmp_path: Path, adapter: dict[str, Any]) -> None:
    """Its hook's `allow` is the only way a call runs: a hook that dies leaves the call denied (agentd judges what
    these settings would have allowed instead: agentd/adapters/posture.py)."""
    built = ClaudeCodeAdapter().build(governed(ctx(tmp_path, {"kind": "claude-code", **adapter})))
    assert built.argv[built.argv.index("--permission-mode") + 1] == "dontAsk"
    assert built.argv.count("--permission-mode") == 1 and "--allowedTools" not in built.argv
    assert not any(flag in arg for arg in built.argv for flag in BYPASS) and "IS_SANDBOX" not in built.env
    assert built.argv[built.argv.index("--setting-sources") + 1] == ""


@pytest.mark.parametrize("resumed", [False, True], ids=["new", "resumed"])
def test_codex_under_a_policy_always_runs_its_tools_in_its_sandbox(tmp_path: Path, resumed: bool) -> None:
    """Outside it a tool could see, stop and kill the hook beside it (measured on 0.169.0): full access becomes
    workspace-write, with the network it was given."""
    adapter = {"kind": "codex", "autonomy": {"profile": "trusted-vm"}, "sandbox": "danger-full-access"}
    context = ctx(tmp_path, adapter)
    assert (
        CodexAdapter().build(context).argv[CodexAdapter().build(context).argv.index("-s") + 1] == "danger-full-access"
    )
    if resumed:
        context = replace(context, session=HarnessSession("0199aaaa-0000-7000-8000-000000000000", "01EARLIER"))
    built = CodexAdapter().build(governed(context))
    said = " ".join(built.argv)
    assert "danger-full-access" not in said and not any(flag in arg for arg in built.argv for flag in BYPASS)
    assert ('sandbox_mode="workspace-write"' in said) if resumed else ("-s workspace-write" in said)
    assert "sandbox_workspace_write.network_access=true" in said
