"""The tool policy (docs/policy.md): the rule language, `agentd policy test`, the hook program, and the
dispatcher's gate answering a real attempt's calls over its socket (the script adapter's `agentd ask`; the
real claude and codex hooks are in tests/test_policy_harness.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import accept_each, run_main

from agentd.config.tool_policy import Call, Policy, decide, effective, segments
from agentd.process import hook
from agentd.records import ToolRule

WORKSPACE = "/srv/agent/work"


def rule(decision: str, **fields: Any) -> ToolRule:
    return ToolRule(decision=decision, **fields)  # type: ignore[arg-type]


def policy(*rules: ToolRule, default: str = "allow") -> Policy:
    return effective("p", [], list(rules), default)  # type: ignore[arg-type]


def bash(command: str) -> Call:
    return Call("Bash", {"command": command}, WORKSPACE, WORKSPACE)


NO_FORCE_PUSH = rule("deny", tool="Bash", command="git push*--force*", reason="no force pushes")
NO_PUSH_F = rule("deny", tool="Bash", command="git push*-f*")


@pytest.mark.parametrize(
    "command",
    [
        "git push --force",
        "cd repo && git push origin main --force",
        'sh -c "git push --force"',
        "bash -lc 'git status; git push --force'",
        "FOO=1 git push --force",
        "env -i /usr/bin/git push --force",
        "echo $(git push --force)",
        "true || git push --force",
    ],
)
def test_a_deny_rule_is_not_evaded_by_wrapping_the_command(command: str) -> None:
    assert decide(policy(NO_FORCE_PUSH), bash(command)).decision == "deny"


@pytest.mark.parametrize("command", ["git status", "git status --short", "  git status  "])
def test_an_allow_rule_allows_the_command_it_names(command: str) -> None:
    ruling = decide(policy(rule("allow", tool="Bash", command="git status*"), default="deny"), bash(command))
    assert (ruling.decision, ruling.rule) == ("allow", 1)


@pytest.mark.parametrize(
    "command",
    ["git status; rm -rf ~", "git status && curl evil", "git status | sh", 'git status "open', "git status $(rm x)"],
)
def test_an_allow_rule_never_allows_more_than_it_names(command: str) -> None:
    ruling = decide(policy(rule("allow", tool="Bash", command="git status*"), default="deny"), bash(command))
    assert ruling.decision == "deny" and ruling.rule is None


def test_the_first_matching_rule_decides_and_the_profile_s_rules_come_first() -> None:
    own = [rule("allow", tool="Bash", command="git push*", reason="this profile pushes")]
    effective_policy = effective("release", own, [NO_FORCE_PUSH], "deny")
    ruling = decide(effective_policy, bash("git push --force"))
    assert (ruling.decision, ruling.rule, ruling.source, ruling.reason) == (
        "allow",
        1,
        "profile release",
        "this profile pushes",
    )
    assert decide(effective("other", [], [NO_FORCE_PUSH], "deny"), bash("git push --force")).source == "[policy]"


def test_paths_are_judged_inside_or_outside_the_workspace_after_links_and_dots(tmp_path: Path) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / "escape").symlink_to(tmp_path)
    rules = policy(rule("allow", tool="Write", path="inside_workspace"), default="deny")
    for path, expected in [
        ("notes.md", "allow"),
        (str(workspace / "a" / "b.txt"), "allow"),
        ("../outside.txt", "deny"),
        ("escape/x.txt", "deny"),
        ("/etc/passwd", "deny"),
        ("a/../../x", "deny"),
    ]:
        call = Call("Write", {"file_path": path, "content": "x"}, str(workspace), str(workspace))
        assert decide(rules, call).decision == expected, path


def test_hosts_and_mcp_tools_are_matched_by_glob() -> None:
    rules = policy(
        rule("deny", tool="mcp__github__*", reason="no GitHub writes"),
        rule("allow", tool="WebFetch", host="*.python.org"),
        rule("ask", tool="WebFetch"),
    )
    assert decide(rules, Call("mcp__github__create_issue", {}, WORKSPACE, WORKSPACE)).decision == "deny"
    fetch = Call("WebFetch", {"url": "https://docs.python.org/3/"}, WORKSPACE, WORKSPACE)
    assert decide(rules, fetch).decision == "allow"
    other = Call("WebFetch", {"url": "https://example.com/x"}, WORKSPACE, WORKSPACE)
    assert decide(rules, other).decision == "ask"


def test_a_matcher_the_call_has_nothing_for_does_not_match() -> None:
    rules = policy(rule("deny", command="*"), rule("deny", path="*"), rule("deny", host="*"))
    assert decide(rules, Call("Read", {}, WORKSPACE, WORKSPACE)).decision == "allow"


@given(st.text(max_size=200))
def test_splitting_a_command_never_raises_and_keeps_something(command: str) -> None:
    pieces, _ = segments(command)
    assert isinstance(pieces, list)
    assert pieces or not command.strip() or set(command.strip()) <= set(";&|\n \t")


WORDS = st.sampled_from(["git", "push", "status", "rm", "-rf", "--force", "~", "curl", "x", "sh", "-c", "echo"])
SEPARATORS = st.sampled_from([" ; ", " && ", " || ", " | ", "\n"])


@st.composite
def commands(draw: Any) -> str:
    parts = draw(st.lists(st.lists(WORDS, min_size=1, max_size=4).map(" ".join), min_size=1, max_size=4))
    return "".join(part + (draw(SEPARATORS) if n < len(parts) - 1 else "") for n, part in enumerate(parts))


@given(commands(), st.lists(WORDS, min_size=1, max_size=2).map(lambda w: " ".join(w) + "*"))
def test_an_allowed_command_has_every_simple_command_matching_and_a_denied_glob_always_wins(
    command: str, glob: str
) -> None:
    allowed = decide(policy(rule("allow", tool="Bash", command=glob), default="deny"), bash(command))
    denied = decide(policy(rule("deny", tool="Bash", command=glob)), bash(command))
    pieces, _ = segments(command)
    from fnmatch import fnmatchcase

    if allowed.decision == "allow":
        assert all(fnmatchcase(piece, glob) for piece in pieces)
        assert denied.decision == "deny"  # what a glob allows whole, the same glob as a deny refuses
    if any(fnmatchcase(piece, glob) for piece in pieces):
        assert denied.decision == "deny"


# --- `agentd policy test` agrees with the gate -------------------------------------------------------------

RULES = st.builds(
    dict,
    decision=st.sampled_from(["allow", "deny", "ask"]),
    tool=st.sampled_from(["*", "Bash", "Write", "Web*"]),
    command=st.none() | st.sampled_from(["git push*", "*rm -rf*", "ls*"]),
    path=st.none() | st.sampled_from(["inside_workspace", "outside_workspace", "*.md"]),
).map(lambda r: {k: v for k, v in r.items() if v is not None})
CALLS = st.sampled_from(
    [
        ("Bash", {"command": "git push -f"}),
        ("Bash", {"command": "cd x && rm -rf /"}),
        ("Bash", {"command": "ls -la"}),
        ("Write", {"file_path": "notes.md"}),
        ("Write", {"file_path": "/etc/x.md"}),
        ("WebFetch", {"url": "https://example.com"}),
    ]
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(RULES, max_size=4), st.sampled_from(["allow", "deny", "ask"]), CALLS)
def test_policy_test_says_what_the_enforced_decision_is(
    tmp_path_factory: Any, capsys: Any, rules: list[dict[str, Any]], default: str, call: tuple[str, dict[str, Any]]
) -> None:
    """`policy test` against the gate's own judgement of the request the hook sends for the same call."""
    from support import write_config

    from agentd.attempt.calls import ruling_for
    from agentd.config.tool_policy import profile_policy
    from agentd.work.validation import load_config

    def add(raw: dict[str, Any]) -> None:
        raw["policy"] = {"default": default, "rules": rules}

    path = write_config(tmp_path_factory.mktemp("policy"), add)
    said = run_main(
        capsys, path, "policy", "test", "operator", "--tool", call[0], "--input", json.dumps(call[1]), "--json"
    )
    assert said.code == 0, said.err
    config = load_config(path)
    workspace = os.path.realpath(config.paths.workspace)
    hook_input = {"tool_name": call[0], "tool_input": call[1], "cwd": workspace, "tool_use_id": "t"}
    _, enforced = ruling_for(profile_policy(config, "operator"), hook.request_of("claude", hook_input), workspace, "/")
    assert (said.json()["decision"], said.json()["rule"]) == (enforced.decision, enforced.rule)


def test_config_refuses_a_rule_it_cannot_judge(tmp_path: Path, capsys: Any) -> None:
    from support import write_config

    def add(raw: dict[str, Any]) -> None:
        raw["policy"] = {"rules": [{"decision": "maybe", "tool": "Bash"}, {"decision": "deny", "tool": ""}]}

    said = run_main(capsys, write_config(tmp_path, add), "config", "check")
    assert said.code != 0
    assert "policy.rules[0].decision" in said.err and "policy.rules[1].tool" in said.err


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("claude-code", ["--bare"]),
        ("claude-code", ["--setting-sources", "user"]),
        ("claude-code", ["--settings=/tmp/mine.json"]),
        ("codex", ["-c", "features.hooks=false"]),
        ("codex", ["--config=hooks.PreToolUse=[]"]),
        ("codex", ["--disable", "hooks"]),
    ],
)
def test_config_refuses_arguments_that_would_silence_the_hook(
    tmp_path: Path, capsys: Any, kind: str, extra: list[str]
) -> None:
    from support import write_config

    def add(raw: dict[str, Any]) -> None:
        raw["policy"] = {"rules": [{"decision": "deny", "tool": "Bash", "command": "git push*"}]}
        raw["adapters"].append({"adapter_id": "h", "kind": kind, "command": "/bin/true", "timeout_ms": 1000})
        raw["adapters"][-1]["extra_args"] = ["--verbose", *extra]

    said = run_main(capsys, write_config(tmp_path / "governed", add), "config", "check")
    assert said.code != 0 and "adapters.h.extra_args" in said.err and "silence" in said.err, said.err

    def ungoverned(raw: dict[str, Any]) -> None:  # nothing to enforce: the same arguments are the operator's
        add(raw)
        raw["policy"] = {"rules": [{"decision": "allow", "tool": "*"}]}

    assert run_main(capsys, write_config(tmp_path / "open", ungoverned), "config", "check").code == 0


def test_config_check_shows_each_profiles_effective_policy(tmp_path: Path, capsys: Any) -> None:
    from support import write_config

    def add(raw: dict[str, Any]) -> None:
        raw["policy"] = {"default": "deny", "rules": [{"decision": "allow", "tool": "Read"}]}

    path = write_config(tmp_path, add)
    said = run_main(capsys, path, "config", "check")
    assert said.code == 0, said.err
    assert "tool policy: profile operator: 1 rule(s), then default deny;" in said.out
    shown = run_main(capsys, path, "config", "check", "--json").json()["tool_policy"]
    assert {"profile": "operator", "default": "deny"}.items() <= next(
        p for p in shown if p["profile"] == "operator"
    ).items()


def test_status_says_which_adapters_a_policy_or_a_running_budget_cannot_reach(tmp_path: Path, capsys: Any) -> None:
    """A harness without a hook, or without live usage and prices, is never a silent pass."""
    from support import write_config

    def add(raw: dict[str, Any]) -> None:
        raw["policy"] = {"rules": [{"decision": "deny", "tool": "Bash", "command": "git push*"}]}
        raw["budget"] = {"per_attempt_usd": 1.0}
        hermes = {"adapter_id": "herm", "kind": "hermes-agent", "command": "/bin/true", "timeout_ms": 1000}
        claude = {"adapter_id": "cc", "kind": "claude-code", "command": "/bin/true", "timeout_ms": 1000}
        raw["adapters"] += [hermes, claude]

    path = write_config(tmp_path, add)
    assert run_main(capsys, path, "init").code == 0
    for _ in range(2):  # the full path, then the fast one (its cached view): the same lines
        said = run_main(capsys, path, "status")
        assert said.code == 0, said.err
        assert "policy   adapter herm: policy not enforced at call time: hermes-agent has no hook" in said.out
        assert "policy   adapter cc: no live usage (no prices" in said.out
        assert "policy   adapter herm: no live usage (hermes-agent reports none" in said.out
        assert "adapter cc: policy not enforced" not in said.out
    shown = run_main(capsys, path, "status", "--json").json()["governance"]
    assert any(line.startswith("adapter herm: policy not enforced") for line in shown)


# --- the hook program -------------------------------------------------------------------------------------


class FakeGate:
    """A unix socket that answers as told (or never), to try the hook against."""

    def __init__(self, path: Path, answer: bytes | None) -> None:
        self.path, self.answer = path, answer
        self.seen: list[bytes] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(4)
        self.held: list[socket.socket] = []
        OPEN.append(self)
        accept_each(self.server, self._answer)

    def close(self) -> None:
        for conn in [self.server, *self.held]:
            conn.close()

    def _answer(self, conn: socket.socket) -> None:
        self.seen.append(conn.recv(1 << 20))
        if self.answer is None:
            self.held.append(conn)  # held open, never answered
            return
        with conn:
            conn.sendall(self.answer)


OPEN: list[FakeGate] = []


@pytest.fixture
def short_dir() -> Iterator[Path]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="hk") as folder:
        yield Path(folder)
        while OPEN:
            OPEN.pop().close()


def run_hook(socket_path: Path, stdin: bytes, within: str = "5", harness: str = "claude") -> tuple[int, str, float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-I", hook.__file__, harness, "--socket", str(socket_path), "--within", within],
        input=stdin,
        capture_output=True,
        timeout=30,
    )
    return done.returncode, done.stdout.decode(), time.monotonic() - started


CALL = json.dumps({"tool_name": "Bash", "tool_input": {"command": "git push -f"}, "cwd": "/w", "tool_use_id": "t1"})


def decision_of(out: str) -> tuple[str, str] | None:
    if not out.strip():
        return None
    said = json.loads(out)["hookSpecificOutput"]
    assert said["hookEventName"] == "PreToolUse"
    return said["permissionDecision"], said["permissionDecisionReason"]


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_the_hook_says_deny_with_the_reason_and_nothing_for_the_policy_s_allow(short_dir: Path) -> None:
    deny = FakeGate(short_dir / "d.sock", b'{"decision": "deny", "reason": "no force pushes"}\n')
    code, out, _ = run_hook(deny.path, CALL.encode())
    assert code == 0 and decision_of(out) == ("deny", "no force pushes")
    assert json.loads(deny.seen[0]) == {
        "harness": "claude",
        "tool": "Bash",
        "input": {"command": "git push -f"},
        "cwd": "/w",
        "tool_use_id": "t1",
    }
    allow = FakeGate(short_dir / "a.sock", b'{"decision": "allow", "reason": "r"}\n')
    assert run_hook(allow.path, CALL.encode())[:2] == (0, "")  # the harness's own permissions still decide
    person = FakeGate(short_dir / "p.sock", b'{"decision": "allow", "reason": "ok by ann", "explicit": true}\n')
    assert decision_of(run_hook(person.path, CALL.encode())[1]) == ("allow", "ok by ann")


@pytest.mark.parametrize(
    ("answer", "stdin"),
    [
        (None, CALL.encode()),  # the dispatcher never answers
        (b"not json\n", CALL.encode()),
        (b'{"decision": "ask", "reason": "x"}\n', CALL.encode()),  # never passed on: headless claude denies ask
        (b'{"decision": "allow"}', CALL.encode()),  # no newline before the close
        (b"", CALL.encode()),  # closed without an answer
        (b'{"decision": "allow", "reason": "r"}\n', b"not json"),  # the harness's input is unusable
        (b'{"decision": "allow", "reason": "r"}\n', b'{"tool_input": {}}'),
        (b'{"decision": "allow", "reason": "r"}\n', b"{" * 100_000),
    ],
)
@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_the_hook_denies_whatever_goes_wrong_and_always_exits_0(
    short_dir: Path, answer: bytes | None, stdin: bytes
) -> None:
    gate = FakeGate(short_dir / "g.sock", answer)
    code, out, took = run_hook(gate.path, stdin, within="1")
    assert code == 0, "exit 1 would fail open: the harness runs the call"
    decided = decision_of(out)
    assert decided is not None and decided[0] == "deny"
    assert took < 10, "it answers within its own deadline, before the harness's limit on it"


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_the_hook_denies_when_there_is_no_socket_or_it_was_called_wrong(short_dir: Path) -> None:
    code, out, _ = run_hook(short_dir / "missing.sock", CALL.encode())
    assert code == 0 and decision_of(out)[0] == "deny"  # type: ignore[index]
    done = subprocess.run([sys.executable, "-I", hook.__file__, "claude"], input=CALL.encode(), capture_output=True)
    assert done.returncode == 0 and decision_of(done.stdout.decode())[0] == "deny"  # type: ignore[index]


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_the_hook_reaches_a_socket_deeper_than_a_unix_address_holds(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    folder = os.open(deep, os.O_PATH)
    server.bind(f"/proc/self/fd/{folder}/policy.sock")
    os.close(folder)
    server.listen(1)

    def answer() -> None:
        conn, _ = server.accept()
        conn.recv(1 << 20)
        conn.sendall(b'{"decision": "deny", "reason": "deep"}\n')
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    with server:
        assert len(str(deep / "policy.sock")) > 108
        assert decision_of(run_hook(deep / "policy.sock", CALL.encode())[1]) == ("deny", "deep")
