"""Redaction of recorded harness outputs (tests/fixtures/README.md): what names the recording machine or
run goes (scratch paths, hostname, keys, session ids), what agentd's parsers read stays."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# Session, thread and message ids the CLIs make up (UUIDs of any version), and hermes's session ids.
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
HERMES_SESSION = re.compile(r"\b\d{8}_\d{6}_[0-9a-f]{6}\b")
MIN_HOSTNAME_CHARS = 3  # a shorter hostname ("vm") is a word the outputs may carry for other reasons


def uuid_placeholder(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def session_placeholder(n: int) -> str:
    return f"20260101_000000_{n:06d}"


def path_slug(path: str) -> str:
    """How claude names a directory after a path (`/tmp/x.y` -> `-tmp-x-y`), as in its memory_paths."""
    return re.sub(r"[^A-Za-z0-9]", "-", path)


@dataclass(frozen=True)
class Redactor:
    """Replaces each literal (a path, a key) by its placeholder, then numbers ids by first appearance.

    The same id in one text gets the same placeholder, so records that refer to each other still do.
    """

    literals: Mapping[str, str]
    hostname: str = ""

    def text(self, value: str) -> str:
        value = self._literals(value)
        if len(self.hostname) >= MIN_HOSTNAME_CHARS:
            value = re.sub(rf"\b{re.escape(self.hostname)}\b", "recording-host", value)
        value = _numbered(UUID, value, uuid_placeholder)
        return _numbered(HERMES_SESSION, value, session_placeholder)

    def leaks(self, value: str) -> list[str]:
        """The literals (and the hostname) still in `value`: empty for a redacted text."""
        found = [secret for secret in self.literals if secret in value]
        if len(self.hostname) >= MIN_HOSTNAME_CHARS and re.search(rf"\b{re.escape(self.hostname)}\b", value):
            found.append(self.hostname)
        return found

    def _literals(self, value: str) -> str:
        """One pass, longest literal first: a placeholder is never itself rewritten."""
        usable = {k: v for k, v in self.literals.items() if k}
        if not usable:
            return value
        pattern = re.compile("|".join(re.escape(k) for k in sorted(usable, key=len, reverse=True)))
        return pattern.sub(lambda match: usable[match.group(0)], value)


def _numbered(pattern: re.Pattern[str], value: str, placeholder: Callable[[int], str]) -> str:
    seen: dict[str, str] = {}

    def replace(match: re.Match[str]) -> str:
        key = match.group(0).lower()
        if key not in seen:
            seen[key] = placeholder(len(seen) + 1)
        return seen[key]

    return pattern.sub(replace, value)
