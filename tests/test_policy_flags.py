"""A flag is a word (issue 52, finding 6): docs/policy.md's force-push rules deny `git push -f`, `--force`,
`origin main -f` and `--force-with-lease`, and allow `git push origin feature-fix` and `--follow-tags`, which
the page's old glob `git push*-f*` denied. The page's TOML is the policy these tests run; its `agentd policy
test` session is run as written by tests/test_doc_commands.py against the example config, which holds the
same rules (checked here)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from support import EXAMPLE_CONFIG, REPO, run_main
from test_tool_policy import bash

from agentd.config.tool_policy import decide, effective, has_flag
from agentd.records import ToolRule

PUSHES = {
    "git push -f origin main": "deny",
    "git push --force": "deny",
    "git push origin main -f": "deny",
    "git push --force-with-lease": "deny",
    "git push origin feature-fix": "allow",
    "git push --follow-tags": "allow",
    "git push origin +main": "deny",
    "cd repo && git push -uf origin main": "deny",
    "git push --force-with-lease=main:abc origin main": "deny",
    'git commit -m "-f is fine in a message" && git push': "allow",
    "git push origin -- -f": "allow",
}


def rules_blocks() -> list[tuple[str, str]]:
    """(language, text) of each fenced block under docs/policy.md's "The rules" (tests/test_docs.py's reader
    takes the first page with a heading of that name)."""
    text = (REPO / "docs" / "policy.md").read_text(encoding="utf-8")
    found = re.search(r"^## The rules\n(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    assert found is not None
    return re.findall(r"^```(\w*)\n(.*?)^```", found.group(1), re.MULTILINE | re.DOTALL)


def page_policy() -> dict[str, Any]:
    """The TOML block of docs/policy.md's "The rules", as a config reads it."""
    [toml] = [body for lang, body in rules_blocks() if lang == "toml"][:1]
    return tomllib.loads(toml)["policy"]


def rules_of(section: dict[str, Any]) -> list[ToolRule]:
    return [ToolRule.model_validate(rule) for rule in section["rules"]]


@pytest.mark.parametrize(("command", "answer"), PUSHES.items())
def test_the_page_s_rules_tell_a_force_push_from_a_push(command: str, answer: str) -> None:
    section = page_policy()
    policy = effective("operator", [], rules_of(section), section["default"])
    assert decide(policy, bash(command)).decision == answer


def test_the_example_config_holds_the_page_s_force_push_rules(tmp_path: Path, capsys: Any) -> None:
    """So the page's `policy test` session answers as written in a fresh clone (no TOML to paste first)."""
    example = tomllib.loads(EXAMPLE_CONFIG.read_text())["policy"]
    force = [rule for rule in page_policy()["rules"] if "force-pushing" in rule.get("reason", "")]
    assert example["rules"] == force and example["default"] == page_policy()["default"]


def test_the_page_s_write_rule_answers_its_own_policy_test(tmp_path: Path, capsys: Any) -> None:
    """The page's `policy show` and its Write `policy test`, on the example config with the page's whole block
    in place of its own [policy]."""
    [toml] = [body for lang, body in rules_blocks() if lang == "toml"][:1]
    for folder in ("config", "skills", "sensors"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    config = tmp_path / "config" / EXAMPLE_CONFIG.name
    config.write_text(re.sub(r"(?ms)^\[policy\]\n.*?(?=^# Where an outcome)", "", config.read_text()) + "\n" + toml)
    [sh] = [body for lang, body in rules_blocks() if lang == "sh"]
    shown, tested = (shlex.split(line)[1:] for line in sh.strip().splitlines())
    listed = run_main(capsys, config, *shown)
    assert listed.code == 0 and 'deny  Write path="outside_workspace"' in listed.out, listed.out
    answered = run_main(capsys, config, *tested)
    assert answered.code == 0 and json.loads(answered.out)["decision"] == "deny"


def test_flags_without_a_command_are_refused() -> None:
    with pytest.raises(ValidationError, match="flags needs a command glob"):
        ToolRule(decision="deny", tool="Bash", flags=["-f"])
    with pytest.raises(ValidationError):
        ToolRule(decision="deny", tool="Bash", command="git push*", flags=["force"])


WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_./:=+", min_size=1, max_size=12)
FORCE = ("-f", "--force", "--force-with-lease")


def forces(word: str) -> bool:
    """What a force flag is, said independently of the matcher: the word itself, `--force…=`, a short bundle."""
    if word in FORCE or any(word.startswith(flag + "=") for flag in FORCE[1:]):
        return True
    return word.startswith("-") and not word.startswith("--") and "f" in word[1:]


@given(st.lists(WORD, max_size=8))
def test_a_command_s_words_hold_a_flag_exactly_when_one_of_them_before_any_double_dash_is_one(words: list[str]) -> None:
    before = words[: words.index("--")] if "--" in words else words
    assert has_flag(["git", *words], FORCE) == any(forces(word) for word in before)


@given(st.lists(WORD, max_size=6), st.integers(0, 6), st.sampled_from(FORCE))
def test_a_force_flag_anywhere_in_a_push_is_denied_and_none_is_allowed(words: list[str], at: int, flag: str) -> None:
    section = page_policy()
    policy = effective("operator", [], rules_of(section), section["default"])
    words = [word for word in words if word != "--" and not forces(word) and not word.startswith("+")]
    plain = shlex.join(["git", "push", *words])
    assert decide(policy, bash(plain)).decision == "allow", plain
    forced = shlex.join(["git", "push", *words[:at], flag, *words[at:]])
    assert decide(policy, bash(forced)).decision == "deny", forced
    assert decide(policy, bash(f"cd {REPO.name} && {forced}")).decision == "deny"


@given(st.lists(WORD, max_size=6), st.sampled_from(FORCE))
def test_an_allow_rule_with_flags_allows_only_when_every_command_has_one(words: list[str], flag: str) -> None:
    rule = ToolRule(decision="allow", tool="Bash", command="git push*", flags=[flag])
    policy = effective("operator", [], [rule], "deny")
    words = [word for word in words if word != "--" and not forces(word)]
    assert decide(policy, bash(shlex.join(["git", "push", flag, *words]) + "; rm -rf ~")).decision == "deny"
    assert decide(policy, bash(shlex.join(["git", "push", *words, flag]))).decision == "allow"
