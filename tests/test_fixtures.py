"""The project's own fixtures (tests/fixtures/harness/, recorded by `make record-fixtures`) are what they say
and name nothing of the machine that recorded them; the suite leaves the repo only through support.reference_dir."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from harness.record import KEY
from harness.redact import HERMES_SESSION, UUID, Redactor, session_placeholder, uuid_placeholder
from harness.scenarios import SCENARIOS
from hypothesis import given, settings
from hypothesis import strategies as st
from support import HARNESS_FIXTURES, REFERENCE_DIR, REPO, examples, missing, reference_dir

MANIFEST = json.loads((HARNESS_FIXTURES / "fixtures.json").read_text())
# The samples the third-party reference carries (its harness-samples/): each has a fixture of the same name.
REFERENCE_SAMPLES = {
    "claude_json_error_max_turns.json",
    "claude_json_http429.json",
    "claude_json_http500.json",
    "claude_json_no_api_key.json",
    "claude_json_permission_denied.json",
    "claude_json_success.json",
    "claude_stream_json_http500.jsonl",
    "claude_stream_json_tool_use.jsonl",
    "claude_text_http500.txt",
    "codex_exec_json_http429.jsonl",
    "codex_exec_json_http500.jsonl",
    "codex_exec_json_stream_idle_timeout.jsonl",
    "codex_exec_json_success.jsonl",
    "codex_exec_json_tool_use.jsonl",
    "codex_exec_json_unknown_model_warning.jsonl",
    "codex_output_last_message.txt",
    "hermes_chat_q_quiet.txt",
    "hermes_oneshot_hang_stdout.txt",
    "hermes_oneshot_http429_stdout.txt",
    "hermes_oneshot_http500_stdout.txt",
    "hermes_oneshot_success.txt",
    "hermes_oneshot_tool_use.txt",
    "hermes_usage_hang.json",
    "hermes_usage_http500.json",
    "hermes_usage_success.json",
    "hermes_usage_tool_use.json",
    "ollama_generate_nostream.json",
    "ollama_generate_stream.ndjson",
    "ollama_tags.json",
}


def fixture_files() -> set[str]:
    return {p.name for p in HARNESS_FIXTURES.iterdir() if p.is_file()} - {"fixtures.json"}


# --- the fixtures themselves ------------------------------------------------------------------------------


def test_every_fixture_comes_from_a_scenario_of_the_recorder() -> None:
    assert set(MANIFEST) == set(SCENARIOS)
    assert {file: name for name, s in MANIFEST.items() for file in s["files"]} == {
        file: name for name, s in SCENARIOS.items() for file in s.files
    }
    assert {file for s in MANIFEST.values() for file in s["files"]} == fixture_files()


def test_the_fixtures_were_recorded_with_the_pinned_clis() -> None:
    """A new pin in tests/harness/install.sh fails this until `make record-fixtures` ran with it."""
    script = (REPO / "tests" / "harness" / "install.sh").read_text()
    pins = dict(re.findall(r"^(CLAUDE|CODEX|HERMES)_VERSION=(\S+)$", script, re.MULTILINE))
    for scenario in MANIFEST.values():
        if scenario["cli"] != "ollama":
            assert pins[scenario["cli"].upper()] in scenario["version"], scenario


def test_the_fixtures_cover_every_sample_of_the_reference() -> None:
    assert fixture_files() >= REFERENCE_SAMPLES


def test_the_reference_holds_the_samples_named_here() -> None:
    assert {p.name for p in reference_dir("harness-samples").iterdir()} == REFERENCE_SAMPLES


PLACEHOLDER_IDS = re.compile(r"00000000-0000-4000-8000-\d{12}|20260101_000000_\d{6}")
# A path from the root of a machine (not a placeholder's tail, as in /srv/agent/home/), or the scratch prefix.
MACHINE = re.compile(r"(?<![\w.-])/(tmp|home|root|work|Users|private|var/folders)/|agentd-record-", re.IGNORECASE)


def test_the_fixtures_name_nothing_of_the_machine_that_recorded_them() -> None:
    for path in HARNESS_FIXTURES.iterdir():
        text = path.read_text(encoding="utf-8")
        ids = {m.group(0) for pattern in (UUID, HERMES_SESSION) for m in pattern.finditer(text)}
        assert all(PLACEHOLDER_IDS.fullmatch(i) for i in ids), (path.name, ids)
        assert not MACHINE.search(text), (path.name, MACHINE.search(text))
        assert KEY not in text, path.name


SECRETS = ["/tmp/agentd-record-x1/00-a/work", "/tmp/agentd-record-x1/00-a", "fake-key-0f3b9c1d"]
IDS = st.uuids().map(str) | st.uuids().map(lambda u: str(u).upper())
PIECES = st.lists(st.sampled_from(SECRETS) | IDS | st.text(max_size=8) | st.just(" "), max_size=12).map("".join)


@settings(max_examples=examples(200), deadline=None)
@given(text=PIECES)
def test_the_redactor_leaves_no_scratch_path_key_or_id(text: str) -> None:
    literals = {SECRETS[0]: "/srv/agent/work", SECRETS[1]: "/srv/agent", SECRETS[2]: "[redacted-api-key]"}
    clean = Redactor(literals, "recorder01")
    redacted = clean.text(text)
    assert clean.leaks(redacted) == []
    assert all(PLACEHOLDER_IDS.fullmatch(m.group(0)) for m in UUID.finditer(redacted))
    survived = {m.group(0) for m in UUID.finditer(text)} & {m.group(0) for m in UUID.finditer(redacted)}
    assert all(PLACEHOLDER_IDS.fullmatch(i) for i in survived)
    assert clean.text(redacted) == redacted  # a placeholder is never rewritten


def test_the_redactor_keeps_what_parsers_read() -> None:
    clean = Redactor({"/tmp/s/work": "/srv/agent/work", "-tmp-s-work": "-srv-agent-work"}, "recorder01")
    a, b = "2cd432bb-614d-4e00-b8ea-2efebced400c", "01A20161-8D59-7112-BE1C-A979B4CF5B12"
    line = json.dumps(
        {"cwd": "/tmp/s/work", "memory": "/h/-tmp-s-work/m", "session_id": "20261122_035741_9d550e",
         "at": "recorder01", "ids": [a, b, a.upper()]}
    )  # fmt: skip
    assert json.loads(clean.text(line)) == {
        "cwd": "/srv/agent/work",
        "memory": "/h/-srv-agent-work/m",
        "session_id": session_placeholder(1),
        "at": "recording-host",
        "ids": [uuid_placeholder(1), uuid_placeholder(2), uuid_placeholder(1)],  # one id, one placeholder
    }


# --- the one way out of the repo ---------------------------------------------------------------------------

# Spelled in pieces, so that this file does not name what it looks for.
OUTSIDE = re.compile("|".join([re.escape("../" + "shared"), re.escape("REPO" + ".parent"), r"(?<![\w.-])/wo" + "rk/"]))


def test_no_test_reads_beside_the_checkout_but_through_the_reference_helper() -> None:
    """Tests read the repo's own files; the third-party reference only through support.reference_dir."""
    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        found += [(path.name, match.group(0)) for match in OUTSIDE.finditer(text)]
        if path.name != "support.py" and REFERENCE_DIR in text:
            found.append((path.name, REFERENCE_DIR))
    assert found == []


@pytest.mark.parametrize("value", ["", "0"])
def test_a_missing_requirement_skips_by_name(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("AGENTD_REQUIRE_THING", value)
    with pytest.raises(pytest.skip.Exception, match=r"no thing here \(set AGENTD_REQUIRE_THING=1"):
        missing("THING", "no thing here")


def test_a_missing_requirement_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTD_REQUIRE_THING", "1")
    with pytest.raises(pytest.fail.Exception, match=r"no thing here \(AGENTD_REQUIRE_THING is set"):
        missing("THING", "no thing here")


def test_the_reference_is_found_only_through_its_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AGENTD_REQUIRE_REFERENCE", raising=False)
    monkeypatch.delenv(REFERENCE_DIR, raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"{REFERENCE_DIR} is not set"):
        reference_dir("agent-runtime")
    monkeypatch.setenv(REFERENCE_DIR, str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match=f"{tmp_path}/agent-runtime is not a directory"):
        reference_dir("agent-runtime")
    monkeypatch.setenv("AGENTD_REQUIRE_REFERENCE", "1")
    with pytest.raises(pytest.fail.Exception, match="is not a directory"):
        reference_dir("agent-runtime")
    (tmp_path / "agent-runtime").mkdir()
    assert reference_dir("agent-runtime") == tmp_path / "agent-runtime"
