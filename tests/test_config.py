"""The identity TOML: the example is valid, every bad input is named, nothing is written."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
from support import EXAMPLE_CONFIG, REPO, write_config

from agentd.cli import main
from agentd.config.environment import environment_overrides
from agentd.errors import ConfigError
from agentd.work.validation import load_config


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return [str(p) for p in caught.value.problems]


def test_example_config_is_valid_and_hashes_the_constitution(config: Any) -> None:
    assert config.agent.internal_name == "demo"
    assert "example" in config.task_types and "example" in config.skills
    assert len(config.constitution.soul_hash) == 64
    assert config.identity.soul_ref == config.constitution.soul_path


def test_relative_paths_resolve_against_the_toml_not_the_cwd(tmp_path: Path) -> None:
    os.chdir(tmp_path)
    config = load_config(EXAMPLE_CONFIG)
    assert config.paths.skills_dir == EXAMPLE_CONFIG.parent.parent / "skills"
    assert Path(config.adapters["script"].command).is_file()


def test_environment_overrides_a_scalar(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    monkeypatch.setenv("AGENTD_DISPATCH__POLL_CEILING_S", "7.5")
    config = load_config(EXAMPLE_CONFIG)
    assert config.dispatch.poll_ceiling_s == 7.5
    assert config.paths.state_dir == state_dir


def test_malformed_toml_names_line_and_column(tmp_path: Path) -> None:
    path = write_config(tmp_path, text='[agent]\nagent_id = "demo\n')
    [problem] = problems_of(path)
    assert problem.startswith(f"{path}: not valid TOML")
    assert "line 2, column 17" in problem


def test_unknown_key_is_named(tmp_path: Path) -> None:
    path = write_config(tmp_path, lambda raw: raw["dispatch"].update(poll_ceilng_s=3))
    assert problems_of(path) == [
        f"{path}: dispatch.poll_ceilng_s: unknown key (check its spelling against `agentd config reference`)"
    ]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (
            date(2026, 1, 1),
            "a timestamp needs a time and a time zone, found the date 2026-01-01; write 2026-01-01T00:00:00Z",
        ),
        (
            datetime(2026, 1, 1, 12),
            "a timestamp needs a time zone, found 2026-01-01T12:00:00; write it in UTC with a trailing Z",
        ),
    ],
    ids=["a TOML local date", "a TOML local date-time"],
)
def test_a_timestamp_without_a_time_zone_is_named_not_a_traceback(tmp_path: Path, value: Any, said: str) -> None:
    path = write_config(tmp_path, lambda raw: raw["constitution"].update(revised_at=value))
    assert problems_of(path) == [f"{path}: constitution.revised_at: {said}"]


def test_a_record_stricter_than_its_section_is_still_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sections are checked first; a record built from them that refuses what its section let
    through is the file's problem too, never a traceback (the date above was one)."""
    import agentd.config as config_module
    from agentd.records import AgentConstitution

    def stricter(source: str, settings: Any) -> Any:
        AgentConstitution.model_validate({"agent_id": settings.agent.agent_id})  # refuses: fields missing
        raise AssertionError("unreachable")

    monkeypatch.setattr(config_module, "_constitution", stricter)
    path = write_config(tmp_path)
    found = problems_of(path)
    assert found and all(problem.startswith(f"{path}: ") for problem in found), found
    assert any("required, but missing" in problem for problem in found), found


def test_duplicate_adapter_id_is_refused(tmp_path: Path) -> None:
    path = write_config(tmp_path, lambda raw: raw["adapters"].append(dict(raw["adapters"][0])))
    assert problems_of(path) == [f"{path}: adapters[1].adapter_id: duplicate id 'script' (already adapters[0])"]


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    def break_many(raw: dict[str, Any]) -> None:
        raw["profiles"][0]["default_adapter_id"] = "missing-adapter"
        raw["profiles"][0]["skill_ids"] = ["missing-skill"]
        raw["task_types"][0]["default_profile_id"] = "missing-profile"
        raw["task_types"][0]["payload_schema_id"] = "missing/schema"
        raw["workflows"][0]["states"][0]["task_type"] = "missing-type"
        raw["workflows"][0]["states"][0]["transitions"][0]["next_state"] = "nowhere"

    path = write_config(tmp_path, break_many)
    found = problems_of(path)
    for key in (
        "profiles[0].default_adapter_id",
        "profiles[0].skill_ids[0]",
        "task_types[0].default_profile_id",
        "task_types[0].payload_schema_id",
        "workflows[0].states[0].task_type",
        "workflows[0].states[0].transitions[0].next_state",
    ):
        assert any(p.startswith(f"{path}: {key}: expected a known") for p in found), (key, found)


def test_wallet_contract_must_match_the_onchain_identity(tmp_path: Path) -> None:
    def conflict(raw: dict[str, Any]) -> None:
        raw["agent"]["onchain_identity"] = {"contract": "SP000.identity-registry"}
        raw["wallets"][0]["onchain_identity_contract"] = "SP999.other-registry"

    [problem] = problems_of(write_config(tmp_path, conflict))
    assert "wallets[0].onchain_identity_contract: must match agent.onchain_identity.contract" in problem


def test_agent_id_must_be_the_internal_name(tmp_path: Path) -> None:
    [problem] = problems_of(write_config(tmp_path, lambda raw: raw["agent"].update(agent_id="other")))
    assert "agent.agent_id: expected 'demo' (the internal_name), found 'other'" in problem


def test_internal_name_cannot_be_overridden(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    monkeypatch.setenv("AGENTD_AGENT__INTERNAL_NAME", "impostor")
    assert problems_of(EXAMPLE_CONFIG) == [
        "AGENTD_AGENT__INTERNAL_NAME: agent.internal_name and agent_id are load-bearing and cannot be overridden"
    ]


def the_problem_with(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> str:
    """The one problem the example config has with the environment variable `name` set to `value`."""
    monkeypatch.setenv(name, value)
    [problem] = problems_of(EXAMPLE_CONFIG)
    return problem


def test_a_bad_environment_override_names_the_variable(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    problem = the_problem_with(monkeypatch, "AGENTD_DISPATCH__GRACE_S", "soon")
    assert problem.startswith("AGENTD_DISPATCH__GRACE_S: dispatch.grace_s: input should be a valid number")


def test_a_whole_table_is_json_and_its_keys_win_whatever_their_case(
    monkeypatch: pytest.MonkeyPatch, state_dir: Path
) -> None:
    monkeypatch.setenv("AGENTD_DISPATCH", '{"grace_s": 1, "poll_ceiling_s": 2}')
    monkeypatch.setenv("agentd_dispatch__grace_s", "3")
    config = load_config(EXAMPLE_CONFIG)
    assert (config.dispatch.grace_s, config.dispatch.poll_ceiling_s) == (3, 2)
    assert config.paths.state_dir == state_dir  # a table the environment only adds keys to keeps the file's


def test_a_key_that_holds_a_dict_takes_json(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    monkeypatch.setenv("AGENTD_BUDGET__ADAPTER_DAILY_USD", '{"script": 5}')
    assert load_config(EXAMPLE_CONFIG).budget.adapter_daily_usd == {"script": 5.0}


def test_text_where_json_belongs_is_refused_by_its_variable(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    monkeypatch.setenv("AGENTD_BUDGET__ADAPTER_DAILY_USD", "five")
    monkeypatch.setenv("AGENTD_DISPATCH", "fast")
    assert sorted(problems_of(EXAMPLE_CONFIG)) == [
        "AGENTD_BUDGET__ADAPTER_DAILY_USD: budget.adapter_daily_usd: expected JSON, found 'five'",
        "AGENTD_DISPATCH: dispatch: expected JSON, found 'fast'",
    ]


def test_an_optional_table_keeps_text_that_is_not_json_for_validation_to_refuse(
    monkeypatch: pytest.MonkeyPatch, state_dir: Path
) -> None:
    problem = the_problem_with(monkeypatch, "AGENTD_AGENT__ONCHAIN_IDENTITY", "none")
    assert problem.startswith("AGENTD_AGENT__ONCHAIN_IDENTITY: agent.onchain_identity: input should be a valid dict")


def test_the_identity_cannot_be_overridden_in_lower_case_either(
    monkeypatch: pytest.MonkeyPatch, state_dir: Path
) -> None:
    monkeypatch.setenv("agentd_agent__internal_name", "impostor")
    monkeypatch.setenv("agentd_agent__agent_id", "impostor")
    assert problems_of(EXAMPLE_CONFIG) == [
        f"{name}: agent.internal_name and agent_id are load-bearing and cannot be overridden"
        for name in ("agentd_agent__agent_id", "agentd_agent__internal_name")
    ]


def test_environment_overrides_read_only_the_config_s_own_names() -> None:
    environ = {"AGENTD_TASK_ID": "7", "AGENTD_CONFIG": "/x.toml", "PATH": "/bin", "AGENTD_METRICS__ENABLED": "false"}
    assert environment_overrides(environ) == ({"metrics": {"enabled": "false"}}, [])


def test_unknown_adapter_kind_lists_the_five(tmp_path: Path) -> None:
    path = write_config(tmp_path, lambda raw: raw["adapters"][0].update(kind="scrpt"))
    found = problems_of(path)
    assert (
        f"{path}: adapters[0].kind: expected one of "
        "'claude-code', 'codex', 'hermes-agent', 'ollama-generate', 'script', found 'scrpt'" in found
    )


def test_profile_style_must_fit_its_adapter(tmp_path: Path) -> None:
    def codex_profile_on_claude(raw: dict[str, Any]) -> None:
        raw["adapters"].append({"adapter_id": "claude", "kind": "claude-code", "command": "claude", "timeout_ms": 1000})
        raw["profiles"][0].update(style="codex-like", default_adapter_id="claude")

    [problem] = problems_of(write_config(tmp_path, codex_profile_on_claude))
    assert "profiles[0].style: codex-like cannot drive a claude-code adapter (claude)" in problem


def test_integration_policy_is_removed_not_ignored(tmp_path: Path) -> None:
    path = write_config(tmp_path, lambda raw: raw["profiles"][0].update(integration_policy={"x": "y"}))
    [problem] = problems_of(path)
    assert problem.startswith(f"{path}: profiles[0].integration_policy: unknown key")


def test_world_readable_env_file_is_refused(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.env"
    secrets.write_text("TOKEN=x\n")
    secrets.chmod(0o644)
    [problem] = problems_of(write_config(tmp_path, lambda raw: raw["adapters"][0].update(env_file=str(secrets))))
    assert "others can read it; chmod 600 it" in problem


def test_config_check_exits_2_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, lambda raw: raw["dispatch"].update(grace_s=-1))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(["config", "check", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: dispatch.grace_s: input should be greater than or equal to 0, found -1" in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    # a command that would write refuses just as early
    assert main(["init", "--config", str(path)]) == 2
    assert not (tmp_path / "state").exists()


def test_config_check_passes_on_the_example(cli: Any) -> None:
    result = cli("config", "check")
    assert result.code == 0, result.err
    assert "ok (agent demo" in result.out


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"type": "object", "properties": {"note": {"type": "strnig"}}}', "is not a valid JSON Schema"),
        ('{"minLength": -1}', "is not a valid JSON Schema"),
        ('{"pattern": "("}', "is not a valid JSON Schema"),
        ('{"properties": {"a": ' * 450 + "{}" + "}}" * 450, "nested too deeply to check as a JSON Schema"),
    ],
    ids=["misspelt type", "negative length", "bad pattern", "450 levels deep"],
)
def test_a_bad_payload_schema_is_a_config_error_naming_its_file(tmp_path: Path, text: str, said: str) -> None:
    schema = tmp_path / "bad.payload.json"
    schema.write_text(text)
    path = write_config(tmp_path, lambda raw: raw["payload_schemas"].update({"example.payload/v1": str(schema)}))
    problem, unknown = problems_of(path)  # and the task type naming it is told the schema is gone
    assert problem.startswith(f"{path}: payload_schemas.'example.payload/v1': {schema} ") and said in problem
    assert "found 'example.payload/v1'" in unknown


# --- A TOML file agentd cannot use: one named problem, whichever file it is and however it is bad ----

HOSTILE_TOML = {
    "not UTF-8": (b'[agent]\nagent_id = "\xff"\n', "not UTF-8 (invalid start byte at byte 20)"),
    "arrays 3,000 deep": (b"x = " + b"[" * 3000 + b"]" * 3000 + b"\n", "nested too deep (agentd keeps 64 levels)"),
    "inline tables 3,000 deep": (b"x = " + b"{a = " * 3000 + b"1" + b"}" * 3000 + b"\n", "nested too deep"),
    "over a mebibyte": (b"# " + b"x" * (1 << 20) + b"\n", "cannot read it: over 1,048,576 bytes"),
}


@pytest.mark.parametrize(("content", "said"), HOSTILE_TOML.values(), ids=HOSTILE_TOML.keys())
def test_an_identity_toml_agentd_cannot_read_is_one_line_for_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, said: str
) -> None:
    path = write_config(tmp_path)
    main(["init", "--config", str(path)])  # a state dir, and the fast path's cached view of the good file
    path.write_bytes(content)
    capsys.readouterr()
    for command in (["status"], ["task", "list"], ["config", "check"], ["web", "token", "list"]):
        assert main([*command, "--config", str(path)]) == 2, command
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"{path}: ") and said in line, (command, line)


@pytest.mark.process
def test_a_config_path_that_never_ends_is_read_only_so_far() -> None:
    # In a child with 1 GiB of address space: were the read unbounded, it would fail there, not here.
    def one_gib() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    done = subprocess.run(
        [sys.executable, "-m", "agentd", "status", "--config", "/dev/zero"],
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=one_gib,
    )
    assert (done.returncode, done.stderr.strip()) == (
        2,
        "/dev/zero: cannot read it: over 1,048,576 bytes, far more than a config file holds",
    )


def own_folders(tmp_path: Path) -> tuple[Path, Path]:
    """The test's own skills folder (a copy of the repository's) and sensors folder (one empty sensor,
    `feed`, for the test to fill)."""
    skills, sensors = tmp_path / "skills", tmp_path / "sensors"
    if not skills.exists():
        shutil.copytree(REPO / "skills", skills)
    (sensors / "feed").mkdir(parents=True, exist_ok=True)
    return skills, sensors


def problems_with_own_folders(tmp_path: Path) -> list[str]:
    skills, sensors = own_folders(tmp_path)
    return problems_of(
        write_config(tmp_path, lambda raw: raw["paths"].update(skills_dir=str(skills), sensors_dir=str(sensors)))
    )


@pytest.mark.parametrize("manifest", ["sensor", "skill"])
@pytest.mark.parametrize(("content", "said"), HOSTILE_TOML.values(), ids=HOSTILE_TOML.keys())
def test_a_manifest_agentd_cannot_read_is_a_problem_naming_it(
    tmp_path: Path, manifest: str, content: bytes, said: str
) -> None:
    skills, sensors = own_folders(tmp_path)
    bad = sensors / "feed" / "sensor.toml" if manifest == "sensor" else skills / "example" / "skill.toml"
    bad.write_bytes(content)
    found = problems_with_own_folders(tmp_path)
    assert any(problem.startswith(f"{bad}: ") and said in problem for problem in found), found


def _adapter_env(tmp_path: Path, raw: dict[str, Any]) -> Path:
    raw["adapters"][0]["env_file"] = str(tmp_path / "adapter.env")
    return tmp_path / "adapter.env"


def _sensor_env(tmp_path: Path, raw: dict[str, Any]) -> Path:
    sensor = tmp_path / "sensors" / "feed"
    sensor.mkdir(parents=True, exist_ok=True)
    (sensor / "sensor.toml").write_text(
        'command = ["true"]\ndescription = "d"\ninterval_seconds = 60\nenv_file = "feed.env"\n'
    )
    raw["paths"]["sensors_dir"] = str(tmp_path / "sensors")
    return sensor / "feed.env"


def _skill_md(tmp_path: Path, raw: dict[str, Any]) -> Path:
    if not (tmp_path / "skills").exists():
        shutil.copytree(REPO / "skills", tmp_path / "skills")
    raw["paths"]["skills_dir"] = str(tmp_path / "skills")
    return tmp_path / "skills" / "example" / "SKILL.md"


def _soul(tmp_path: Path, raw: dict[str, Any]) -> Path:
    raw["constitution"]["soul_path"] = str(tmp_path / "SOUL.md")
    return tmp_path / "SOUL.md"


def _schema(tmp_path: Path, raw: dict[str, Any]) -> Path:
    raw["payload_schemas"]["example.payload/v1"] = str(tmp_path / "example.payload.json")
    return tmp_path / "example.payload.json"


NAMED_FILES = {"adapter env_file": _adapter_env, "sensor env_file": _sensor_env, "SKILL.md": _skill_md}
NAMED_FILES |= {"SOUL.md": _soul, "payload schema": _schema}
SPOILED = {
    "not UTF-8": (b'{"a": "\xff"}\n', "not UTF-8 (invalid start byte at byte 7)"),
    "over a mebibyte": (b"#" * ((1 << 20) + 1), "over 1,048,576 bytes"),
}


@pytest.mark.parametrize(
    ("named", "content", "said"),
    [
        pytest.param(named, content, said, id=f"{name}, {spoil}")
        for name, named in NAMED_FILES.items()
        for spoil, (content, said) in SPOILED.items()
        if (name, spoil) != ("SOUL.md", "not UTF-8")  # hashed as bytes, shown with U+FFFD: not a problem
    ],
)
def test_a_file_the_config_names_that_agentd_cannot_read_is_a_problem_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], named: Any, content: bytes, said: str
) -> None:
    spoiled: list[Path] = []
    path = write_config(tmp_path, lambda raw: spoiled.append(named(tmp_path, raw)))
    spoiled[0].write_bytes(content)
    spoiled[0].chmod(0o600)
    assert main(["config", "check", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert any(str(spoiled[0]) in line and said in line for line in err.splitlines()), err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("AGENTD_ADAPTERS", "expected JSON nested at most 64 levels deep, found '[[["),
        ("AGENTD_DISPATCH__POLL_CEILING_S", "input should be a valid number, unable to parse string as a number"),
    ],
)
def test_an_override_nested_past_what_json_reads_is_a_problem_and_a_long_value_is_shown_cut(
    monkeypatch: pytest.MonkeyPatch, state_dir: Path, name: str, said: str
) -> None:
    monkeypatch.setenv(name, "[" * 50_000 + "]" * 50_000)
    with pytest.raises(ConfigError) as caught:
        load_config(EXAMPLE_CONFIG)
    [problem] = caught.value.problems
    assert problem.source == name and problem.message.startswith(said), problem
    assert len(problem.message) < 300 and problem.message.endswith("(100,002 characters)"), problem


BAD_COMMANDS = {
    "empty text": ('""', "expected an argv, found ''"),
    "no items": ("[]", "expected an argv, found []"),
    "blanks": ('"   "', "expected an argv, found '   '"),
    "an empty program": ('[""]', "expected an argv, found ['']"),
    "a quote left open": ('"notes \'add"', 'cannot split "notes \'add" into an argv: no closing quotation'),
    "an escape at the end": ('"notes \\\\"', "cannot split 'notes \\\\' into an argv: no escaped character"),
}


@pytest.mark.parametrize("manifest", ["sensor", "skill"])
@pytest.mark.parametrize(("command", "said"), BAD_COMMANDS.values(), ids=BAD_COMMANDS.keys())
def test_a_command_with_no_argv_to_run_is_a_problem_naming_its_manifest(
    tmp_path: Path, manifest: str, command: str, said: str
) -> None:
    skills, sensors = own_folders(tmp_path)
    if manifest == "sensor":
        where, key = sensors / "feed" / "sensor.toml", "command"
        where.write_text(f'command = {command}\ndescription = "d"\ninterval_seconds = 60\n')
    else:
        where, key = skills / "example" / "skill.toml", "cli_commands.0.command"
        text = where.read_text().replace('command = ["bin/notes.py"]', f"command = {command}")
        assert text != where.read_text()
        where.write_text(text)
    assert f"{where}: {key}: {said}" in problems_with_own_folders(tmp_path)


@pytest.mark.parametrize("key", ["state_dir", "workspace", "run_dir", "skills_dir", "sensors_dir"])
@pytest.mark.parametrize(("made", "found"), [("file", "a file"), ("pipe", "a device, pipe or socket")])
def test_a_path_that_is_not_a_folder_is_named_for_what_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, made: str, found: str
) -> None:
    """Not "permission denied" or "File exists" from whichever command first tripped on it."""
    there = tmp_path / "not-a-folder"
    there.write_text("x") if made == "file" else os.mkfifo(there)
    path = write_config(tmp_path, lambda raw: raw["paths"].update({key: str(there)}))
    said = f"{path}: paths.{key}: expected a folder, found {found} at {there}"
    assert said in problems_of(path)
    for command in (["status"], ["init"], ["task", "list"]):
        assert main([*command, "--config", str(path)]) == 2
        assert said in capsys.readouterr().err.splitlines()


BAD_ENVIRONMENTS = {
    "a NUL in a value": ('env = { A = "x\\u0000y" }', "env.A: contains a NUL character"),
    "a NUL in a name": ('env = { "A\\u0000" = "1" }', "contains a NUL character"),
    "'=' in a name": ('env = { "B=C" = "1" }', "env: expected variable names without '=' or NUL, found 'B=C'"),
    "an empty name": ('env = { "" = "1" }', "env: expected variable names without '=' or NUL, found ''"),
    "a NUL in the argv": ('command = ["./feed", "a\\u0000b"]', "command[1]: contains a NUL character"),
}


@pytest.mark.parametrize(("line", "said"), BAD_ENVIRONMENTS.values(), ids=BAD_ENVIRONMENTS.keys())
def test_what_a_sensor_could_not_be_started_with_is_refused_at_the_check(tmp_path: Path, line: str, said: str) -> None:
    """Not an internal_error at the sensor's first run (exec refuses these)."""
    _, sensors = own_folders(tmp_path)
    sensor = sensors / "feed"
    (sensor / "feed").write_text("#!/bin/sh\n")
    (sensor / "feed").chmod(0o700)
    fields = {"command": 'command = ["./feed"]', "env": ""}
    fields[line.split(" ")[0]] = line
    (sensor / "sensor.toml").write_text(
        f'{fields["command"]}\ndescription = "d"\ninterval_seconds = 60\n{fields["env"]}\n'
    )
    found = problems_with_own_folders(tmp_path)
    assert any(problem.startswith(f"{sensor / 'sensor.toml'}: ") and said in problem for problem in found), found


@pytest.mark.parametrize("where", ["adapters", "message_handlers"])
def test_an_environment_name_exec_cannot_set_is_refused_in_the_identity_toml(tmp_path: Path, where: str) -> None:
    def bad_name(raw: dict[str, Any]) -> None:
        if where == "adapters":
            raw["adapters"][0]["env"] = {"X=Y": "1"}
        else:
            raw["message_handlers"] = [{"handler_id": "cmd", "kind": "command", "argv": ["true"], "env": {"X=Y": "1"}}]

    path = write_config(tmp_path, bad_name)
    said = "env: expected variable names without '=' or NUL, found 'X=Y'"
    assert any(said in problem for problem in problems_of(path)), problems_of(path)


@pytest.mark.parametrize("key", ["state_dir", "workspace", "skills_dir"])
@pytest.mark.parametrize("kind", ["a name past 255 bytes", "a file as a parent"])
def test_a_path_that_can_never_be_a_folder_is_named_by_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, kind: str
) -> None:
    (tmp_path / "a-file").write_text("x")
    there = tmp_path / ("d" * 300) if kind.startswith("a name") else tmp_path / "a-file" / "sub"
    why = "File name too long" if kind.startswith("a name") else "Not a directory"
    path = write_config(tmp_path, lambda raw: raw["paths"].update({key: str(there)}))
    said = f"{path}: paths.{key}: cannot be a folder: {there}: {why}"
    for command in (["status"], ["init"], ["task", "list"], ["evidence", "verify"]):
        assert main([*command, "--config", str(path)]) == 2, command
        assert said in capsys.readouterr().err.splitlines(), command


def _long_name(tmp_path: Path) -> str:
    return str(tmp_path / ("n" * 300))  # past NAME_MAX: every stat of it is ENAMETOOLONG


def _long_sensor(field: str) -> Callable[[Path, dict[str, Any]], str]:
    def write(tmp_path: Path, raw: dict[str, Any]) -> str:
        _, sensors = own_folders(tmp_path)
        long = _long_name(tmp_path)
        argv, line = ('["true"]', f'env_file = "{long}"\n') if field == "env_file" else (f'["{long}"]', "")
        (sensors / "feed" / "sensor.toml").write_text(
            f'command = {argv}\ndescription = "d"\ninterval_seconds = 60\n{line}'
        )
        raw["paths"]["sensors_dir"] = str(sensors)
        return f"{sensors / 'feed' / 'sensor.toml'}: {field}"

    return write


def _long_adapter(field: str) -> Callable[[Path, dict[str, Any]], str]:
    def write(tmp_path: Path, raw: dict[str, Any]) -> str:
        raw["adapters"][0][field] = _long_name(tmp_path)
        return f"adapters[0].{field}"

    return write


LONG_NAMES = {
    "adapter env_file": _long_adapter("env_file"),
    "adapter working_dir": _long_adapter("working_dir"),
    "sensor env_file": _long_sensor("env_file"),
    "sensor command": _long_sensor("command"),
}


@pytest.mark.parametrize("named", LONG_NAMES.values(), ids=LONG_NAMES.keys())
def test_a_name_too_long_for_the_file_system_is_a_problem_naming_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], named: Any
) -> None:
    where: list[str] = []
    path = write_config(tmp_path, lambda raw: where.append(named(tmp_path, raw)))
    assert main(["config", "check", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and any(where[0] in line for line in err.splitlines()), err


@pytest.mark.parametrize("field", ["instruction_path", "sensor_path"])
def test_a_skill_path_that_is_a_link_loop_is_a_problem_not_a_crash(tmp_path: Path, field: str) -> None:
    """Path.resolve() raises RuntimeError on a link loop (Python 3.11): config check ended in a traceback."""
    skills, _ = own_folders(tmp_path)
    manifest = skills / "example" / "skill.toml"
    (skills / "example" / "loop").symlink_to("loop")
    text = manifest.read_text()
    text = text.replace('instruction_path = "SKILL.md"', f'instruction_path = "SKILL.md"\n{field} = "loop"')
    if field == "instruction_path":
        text = text.replace('instruction_path = "SKILL.md"\n', "", 1)
    manifest.write_text(text)
    found = problems_with_own_folders(tmp_path)
    assert f"{manifest}: {field}: 'loop' escapes the skill folder (or is a link loop)" in found, found
