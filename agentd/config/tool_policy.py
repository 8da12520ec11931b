"""The tool policy: which tool calls an attempt may make (docs/policy.md).

Pure: `decide` takes the effective rules (the profile's `tool_policy`, then `[policy] rules`), the
default, and one call as the harness described it, and says which rule decides. `agentd policy test`
and the dispatcher's answer to a harness's hook both call it, so what the one says the other does.

A command glob is matched against the whole command and against each simple command in it (split at
`;`, `&&`, `||`, `|`, `&` and newlines, and looked into through `sh -c`, `bash -lc`, `eval`, `$(…)` and
backquotes): a deny or ask rule matches when any of them matches, an allow rule only when every one
does, so `allow "git status*"` never allows `git status; rm -rf ~`, and `deny "git push*"` is not
evaded by `cd repo && git push` or `sh -c "git push"`. A command that cannot be split (an open quote)
matches deny and ask rules as one piece and allow rules never.

A rule's `flags` looks for flags as whole words of the simple command its glob matched, so a force push is
`command = "git push*"` with `flags = ["-f", "--force"]`: `git push -f`, `git push origin main -f` and
`git push -uf` match, `git push origin feature-fix` and `git push --follow-tags` do not (a glob such as
`git push*-f*` matches them all, docs/decisions.md "A model in five minutes (issue 52)"). Words after `--`
are not flags.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any, Literal
from urllib.parse import urlsplit

from agentd import frozen_value
from agentd.config import Config
from agentd.records import ToolRule

Decision = Literal["allow", "deny", "ask"]
COMMAND_KEYS = ("command", "cmd")  # claude's Bash and codex's exec_command (its hook says Bash, `command`)
PATH_KEYS = ("file_path", "notebook_path", "path")  # Write, Edit, Read, NotebookEdit, Glob, Grep
URL_KEYS = ("url",)  # WebFetch
WRAPPERS = {"sh", "bash", "dash", "zsh", "ksh"}
MAX_DEPTH = 4  # shells within shells looked into; deeper is one piece
MAX_SEGMENTS = 256


@frozen_value
class Call:
    """One tool call as a harness's hook described it: the tool's name, its input, where it runs."""

    tool: str
    input: Mapping[str, Any]
    workspace: str  # the attempt's workspace: `inside_workspace` is judged against it
    cwd: str  # the harness's working dir: a relative path is relative to it


@frozen_value
class Ruling:
    """What decides a call: the rule (its place in the effective list, and where it came from) or the default."""

    decision: Decision
    reason: str
    rule: int | None = None  # 1-based place in the effective rules; None: the default decided
    source: str = "default"  # "profile <id>", "[policy]", or "default"

    def describe(self) -> str:
        if self.rule is None:
            return f"{self.decision}: no rule matches; [policy] default = {self.decision!r}"
        return f"{self.decision}: rule {self.rule} ({self.source})"


@frozen_value
class Policy:
    """The effective policy of one profile: its own rules first, then [policy] rules, then the default."""

    rules: tuple[tuple[ToolRule, str], ...]  # each with where it came from
    default: Decision

    @property
    def enforced(self) -> bool:
        """Something can be refused or held: a harness's hook is worth calling."""
        return self.default != "allow" or any(rule.decision != "allow" for rule, _ in self.rules)


def effective(
    profile_id: str, profile_rules: Sequence[ToolRule], rules: Sequence[ToolRule], default: Decision
) -> Policy:
    own = tuple((rule, f"profile {profile_id}") for rule in profile_rules)
    return Policy(own + tuple((rule, "[policy]") for rule in rules), default)


def profile_policy(config: Config, profile_id: str) -> Policy:
    """The effective tool policy of a profile's attempts: its own rules, then [policy]'s, then the default."""
    profile = config.profiles.get(profile_id)
    own = profile.tool_policy if profile is not None else []
    return effective(profile_id, own, config.policy.rules, config.policy.default)


def decide(policy: Policy, call: Call) -> Ruling:
    """The first rule that matches `call` decides; none: the default."""
    for place, (rule, source) in enumerate(policy.rules, start=1):
        if matches(rule, call):
            reason = rule.reason or f"{rule.decision} by rule {place} ({source})"
            return Ruling(rule.decision, reason, place, source)
    return Ruling(policy.default, f"{policy.default} by the [policy] default (no rule matches)")


def matches(rule: ToolRule, call: Call) -> bool:
    """Every matcher the rule gives holds for the call (a matcher the call has nothing for does not)."""
    if not fnmatchcase(call.tool, rule.tool):
        return False
    if rule.command is not None and not _command_matches(rule, command_of(call)):
        return False
    if rule.path is not None and not _path_matches(rule.path, call):
        return False
    return rule.host is None or _host_matches(rule.host, call)


def _text(value: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    return next((value[key] for key in keys if isinstance(value.get(key), str)), None)


def command_of(call: Call) -> str | None:
    return _text(call.input, COMMAND_KEYS)


def _command_matches(rule: ToolRule, command: str | None) -> bool:
    if command is None or rule.command is None:
        return False
    glob, flags = rule.command, rule.flags

    def fits(piece: str, words: list[str]) -> bool:
        return fnmatchcase(piece, glob) and (flags is None or has_flag(words, flags))

    pieces, whole = simple_commands(command)
    if rule.decision == "allow":
        return whole and bool(pieces) and all(fits(piece, words) for piece, words in pieces)
    return fits(command.strip(), command.split()) or any(fits(piece, words) for piece, words in pieces)


def has_flag(words: Sequence[str], flags: Sequence[str]) -> bool:
    """Whether a simple command's words (its program first) hold one of `flags` as a word: `--force` or
    `--force=…`; a one-letter `-f` also in a bundle of short options (`-uf`). Nothing after `--` is a flag."""
    for word in words[1:]:
        if word == "--":
            return False
        for flag in flags:
            if word == flag or (flag.startswith("--") and word.startswith(flag + "=")):
                return True
            short = len(flag) == 2 and not word.startswith("--") and word.startswith("-")
            if short and flag[1] in word[1:]:
                return True
    return False


def _path_matches(glob: str, call: Call) -> bool:
    found = _text(call.input, PATH_KEYS)
    if found is None:
        return False
    path = resolved(found, call.cwd)
    if glob in ("inside_workspace", "outside_workspace"):
        inside = path == call.workspace or path.startswith(call.workspace.rstrip("/") + "/")
        return inside == (glob == "inside_workspace")
    return fnmatchcase(path, glob) or fnmatchcase(found, glob)


def resolved(path: str, cwd: str) -> str:
    """The path as the harness would open it: relative to its cwd, `..` and links followed where they exist."""
    joined = os.path.join(cwd, path)  # an absolute path stays itself
    try:
        return os.path.realpath(joined)
    except (ValueError, OSError):  # a NUL in it, a link loop: judged as written
        return os.path.normpath(joined)


def _host_matches(glob: str, call: Call) -> bool:
    url = _text(call.input, URL_KEYS)
    if url is None:
        return False
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        host = None
    return host is not None and fnmatchcase(host, glob.lower())


SEPARATORS = re.compile(r"\s*(?:&&|\|\||[;&|\n])\s*")


def segments(command: str) -> tuple[list[str], bool]:
    """The simple commands in `command` (see the module docstring) and whether it could be split whole."""
    found, whole = simple_commands(command)
    return [piece for piece, _ in found], whole


def simple_commands(command: str) -> tuple[list[tuple[str, list[str]]], bool]:
    """Each simple command in `command` as text and as its words, and whether it could be split whole."""
    found: list[tuple[str, list[str]]] = []
    whole = _split(command, 0, found)
    return found[:MAX_SEGMENTS], whole and len(found) <= MAX_SEGMENTS


def _split(command: str, depth: int, found: list[tuple[str, list[str]]]) -> bool:
    whole = True
    for inner in _substitutions(command):
        whole = _split(inner, depth + 1, found) and whole
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = ""
        words = list(lexer)
    except ValueError:  # an open quote: one piece, judged as a whole
        found.append((command.strip(), command.split()))
        return False
    for simple in _simple_commands(words):
        found.append((" ".join(simple), simple))
        bare = _bare(simple)
        if bare and " ".join(bare) != found[-1][0]:
            found.append((" ".join(bare), bare))
        script = _wrapped(bare) if bare else None
        if script is not None:
            whole = (_split(script, depth + 1, found) if depth < MAX_DEPTH else False) and whole
    return whole


def _simple_commands(words: list[str]) -> Iterator[list[str]]:
    current: list[str] = []
    for word in words:
        if word and set(word) <= set(";&|"):
            if current:
                yield current
            current = []
        else:
            current.append(word)
    if current:
        yield current


ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PREFIXES = {"env", "command", "exec", "nohup", "nice", "time", "sudo", "doas", "builtin"}


def _bare(words: list[str]) -> list[str]:
    """The command a simple command runs: without `NAME=value` assignments, runner words (`env`, `sudo`,
    `nohup` … and their options) and the program's folder (`/usr/bin/git` is `git`)."""
    words = list(words)
    while words and (
        ASSIGNMENT.match(words[0]) or words[0] in PREFIXES or (words[0].startswith("-") and len(words) > 1)
    ):
        words.pop(0)
    if words and "/" in words[0]:
        words[0] = os.path.basename(words[0]) or words[0]
    return words


def _wrapped(words: list[str]) -> str | None:
    """The script of `sh -c "…"` (any shell, any flags ending in c) or `eval …`."""
    if words[0] == "eval" and len(words) > 1:
        return " ".join(words[1:])
    if os.path.basename(words[0]) not in WRAPPERS:
        return None
    for place, word in enumerate(words[1:], start=1):
        if word.startswith("-") and "c" in word and place + 1 < len(words):
            return words[place + 1]
    return None


SUBSTITUTION = re.compile(r"\$\(([^()]*)\)|`([^`]*)`")


def _substitutions(command: str) -> list[str]:
    return [a or b for a, b in SUBSTITUTION.findall(command) if (a or b).strip()]


# How each adapter kind's calls meet the policy (docs/policy.md, "What each harness enforces").
ENFORCED_BY = {
    "claude-code": "at each call, by claude's PreToolUse hook, with nothing allowed by claude of its own "
    "(dontAsk) and every call claude reports held to a decision",
    "codex": "at each call, by codex's PreToolUse hook, with codex's tools in its sandbox (away from the hook) "
    "and every command codex starts held to a decision",
    "script": "when the script asks (`agentd ask`); what it runs without asking is not seen",
}
NOT_ENFORCED = "policy not enforced at call time: {kind} has no hook agentd can use"


def enforcement(kind: str, policy: Policy) -> str:
    """What holds for `kind`'s attempts under `policy`, in one line (status, the manifest, config check)."""
    if not policy.enforced:
        return "nothing to enforce: every call is allowed"
    return ENFORCED_BY.get(kind) or NOT_ENFORCED.format(kind=kind)


def gated(kind: str, policy: Policy) -> bool:
    """An attempt of `kind` gets a policy socket: something can be refused, and something can ask."""
    return policy.enforced and kind in ENFORCED_BY


def unenforced_lines(config: Config) -> list[str]:
    """What `agentd status` says of each adapter whose calls a policy that can refuse or hold them cannot
    reach while it runs (docs/policy.md): never a silent pass."""
    policies = [profile_policy(config, profile_id) for profile_id in config.profiles]
    if not any(policy.enforced for policy in [*policies, profile_policy(config, "")]):
        return []
    return [
        f"adapter {adapter_id}: " + NOT_ENFORCED.format(kind=adapter.kind)
        for adapter_id, adapter in sorted(config.adapters.items())
        if adapter.kind not in ENFORCED_BY
    ]
