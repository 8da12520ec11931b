"""The constitution's proposal lane (seed 000 §1b), operator side: review, accept, reject.

An agent only proposes (a TaskOutcome's `constitution_proposal`, recorded through the outbox). Accepting
is the one place agentd writes SOUL.md or PURPOSE.md: only if the document is still the text the agent
proposed against, atomically, with the identity TOML's [constitution] version and revised_at moved on
(those two lines only). A running service keeps the constitution it loaded until it is restarted.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import tempfile
import tomllib
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from stat import S_IMODE
from typing import Any

from agentd import frozen_value
from agentd.clock import to_utc
from agentd.config import Config
from agentd.control import operator
from agentd.edge import whole_number
from agentd.errors import InputError
from agentd.hashing import sha256_hex
from agentd.records.constitution import ConstitutionProposalRecord
from agentd.store import Store

logger = logging.getLogger(__name__)

DOCUMENT_KEYS = {"soul": "soul_path", "purpose": "purpose_path"}
NO_FILE = "(no file)"


@frozen_value
class Accepted:
    proposal: ConstitutionProposalRecord
    path: Path  # the document written
    config_path: Path  # the identity TOML whose version moved on
    already_written: bool  # the document held the proposed text already (an interrupted accept)
    overridden: bool  # an environment override, not the TOML, sets the version the services see


def document_path(config: Config, document: str) -> Path:
    return Path(getattr(config.constitution, DOCUMENT_KEYS[document]))


def current_text(config: Config, document: str) -> str | None:
    """The document as it is on disk now (None: there is no file)."""
    try:
        return document_path(config, document).read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None


def current_sha256(config: Config, document: str) -> str:
    try:
        return sha256_hex(document_path(config, document).read_bytes())
    except FileNotFoundError:
        return ""  # as config.py hashes a missing document


def changed_since(config: Config, proposal: ConstitutionProposalRecord) -> bool:
    """The document is no longer the text the agent proposed against (nor the proposed text)."""
    return current_sha256(config, proposal.document) not in (proposal.base_sha256, proposal.proposed_sha256)


def proposal_diff(config: Config, proposal: ConstitutionProposalRecord) -> str:
    """What accepting would change: a unified diff from the document on disk to the proposed text."""
    path = document_path(config, proposal.document)
    before = current_text(config, proposal.document)
    lines = difflib.unified_diff(
        text_lines(before or ""),
        text_lines(proposal.proposed_text),
        fromfile=str(path) if before is not None else NO_FILE,
        tofile=f"{path.name} as proposal {proposal.proposal_id} has it",
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def text_lines(text: str) -> list[str]:
    """The lines of a text as a file holds them: split after each \\n only. str.splitlines also splits
    at \\r, U+2028, U+0085 and more, which would show one line of the file as several."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def accept_proposal(config: Config, store: Store, proposal_id: str, *, note: str | None, now: datetime) -> Accepted:
    """Write the proposed text over the document and move [constitution] version on; refused (nothing
    written) if the proposal is no longer pending, the document changed since the agent proposed, or a
    file cannot be written.

    Decided under the database's write lock: the proposal is found pending, the files are written and
    the decision recorded before the lock is let go, so an accept or reject racing this one either
    commits first (this one then finds it decided and writes nothing) or waits for this one."""
    writing = _Writing(config, now)
    try:
        recorded = store.accept_constitution_proposal(proposal_id, by=operator(), note=note, now=now, write=writing)
    except BaseException:
        writing.undo()  # the decision was not recorded: the files go back to what the records say
        raise
    assert writing.done is not None  # the store called it, or raised
    path, toml_path, already, version_before = writing.done
    overridden = config.constitution.version != version_before
    return Accepted(recorded, path, toml_path, already, overridden)


class _Writing:
    """What accepting writes, called by the store inside the decision's transaction: the checks, then the
    document and the TOML. Remembers what they held, to put it back if the decision is not committed."""

    def __init__(self, config: Config, now: datetime) -> None:
        self.config, self.now = config, now
        self.done: tuple[Path, Path, bool, str] | None = None  # document, TOML, already written, version before
        self._before: list[tuple[Path, bytes | None]] = []  # each file written, and what it held

    def __call__(self, proposal: ConstitutionProposalRecord) -> tuple[str, str]:
        path = document_path(self.config, proposal.document).resolve()
        found = current_sha256(self.config, proposal.document)
        already = found == proposal.proposed_sha256
        if not already and found != proposal.base_sha256:
            raise InputError(
                f"{path} changed since proposal {proposal.proposal_id} was made (it was proposed against sha256 "
                f"{proposal.base_sha256[:12]}…, the file is now {found[:12] or 'missing'}…); nothing was written. "
                "Reject it (`agentd constitution reject`) and let the agent propose against the current text"
            )
        toml_path = self.config.path.resolve()
        text = toml_path.read_text(encoding="utf-8")
        version_before = _configured_version(text, toml_path)
        version_after = next_version(version_before, self.now)
        revised = revise_toml(text, version_after, revision_time(self.now), toml_path)
        _check_writable(path, toml_path)
        if not already:
            self._replace(path, proposal.proposed_text.encode("utf-8"))
        self._replace(toml_path, revised.encode("utf-8"))
        self.done = (path, toml_path, already, version_before)
        return version_before, version_after

    def _replace(self, path: Path, data: bytes) -> None:
        self._before.append((path, path.read_bytes() if path.exists() else None))
        write_atomically(path, data)

    def undo(self) -> None:
        """Put back what was written (the commit failed after it): best effort, newest first."""
        for path, data in reversed(self._before):
            try:
                if data is None:
                    path.unlink(missing_ok=True)
                else:
                    write_atomically(path, data)
            except OSError as exc:
                logger.error("constitution accept: could not put %s back after a failed commit: %s", path, exc)
        self._before.clear()


def reject_proposal(store: Store, proposal_id: str, *, reason: str, now: datetime) -> ConstitutionProposalRecord:
    """Record the operator's no, and why; the document is not touched."""
    return store.reject_constitution_proposal(proposal_id, by=operator(), reason=reason, now=now)


def next_version(version: str, now: datetime) -> str:
    """The revision after `version`: an ISO 8601 marker becomes the time of accepting; otherwise its last
    number counts up ("1" → "2", "1.4.2" → "1.4.3", "v07" → "v08"); with no number, the time too."""
    if re.match(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}", version):
        return revision_time(now) if "T" in version else to_utc(now).date().isoformat()
    match = re.search(r"([0-9]+)([^0-9]*)$", version)
    last = None if match is None else whole_number(match[1])  # None past 100 digits too
    if match is None or last is None:
        return revision_time(now)
    number = str(last + 1).zfill(len(match[1]))
    return f"{version[: match.start(1)]}{number}{match[2]}"


def revision_time(now: datetime) -> str:
    """A revision's time as the identity TOML writes it: UTC to the second (2026-11-22T10:00:00Z)."""
    return to_utc(now).strftime("%Y-%m-%dT%H:%M:%SZ")


_TABLE = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\-\" ]+?)\s*\]\s*(#.*)?$")
_ARRAY_TABLE = re.compile(r"^\s*\[\[")
_KEY_LINE = r"^(\s*{key}\s*=\s*)(\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^\s#]+)(\s*(?:#.*)?)$"


def revise_toml(text: str, version: str, revised_at: str, source: Path) -> str:
    """The identity TOML with [constitution] version and revised_at set, every other byte kept (comments,
    order, layout); checked by parsing both. InputError if the keys are not plain lines of that table."""
    lines, table, done = text.splitlines(keepends=True), "", set()
    values = {"version": version, "revised_at": revised_at}
    for index, line in enumerate(lines):
        header = _TABLE.match(line)
        if header or _ARRAY_TABLE.match(line):
            table = header[1] if header else ""
            continue
        for key, value in values.items():
            match = re.match(_KEY_LINE.format(key=key), line.rstrip("\r\n")) if table == "constitution" else None
            if match:
                ending = line[len(line.rstrip("\r\n")) :]
                lines[index] = f"{match[1]}{json.dumps(value)}{match[3]}{ending}"
                done.add(key)
    revised = "".join(lines)
    expected = tomllib.loads(text)
    expected["constitution"].update(values)
    if done != set(values) or _parsed(revised) != expected:
        raise InputError(
            f"{source}: cannot set [constitution] version and revised_at (they are not plain `key = value` "
            "lines of that table); nothing was written. Write them as such and accept again"
        )
    return revised


def _parsed(text: str) -> dict[str, Any] | None:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None


def _configured_version(text: str, path: Path) -> str:
    table = _parsed(text) or {}
    constitution = table.get("constitution")
    version = constitution.get("version") if isinstance(constitution, dict) else None
    if not isinstance(version, str):
        raise InputError(f"{path}: has no [constitution] version to move on; add it and accept again")
    return version


def _check_writable(*paths: Path) -> None:
    for path in paths:
        if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise InputError(f"cannot write {path}; nothing was written. Run this as the user who owns it")


def write_atomically(path: Path, data: bytes) -> None:
    """Replace a file so a reader sees the old text or the new, never half: a temp file beside it with the
    same mode (and owner, where allowed), synced, renamed over it, the folder synced."""
    previous = path.stat() if path.exists() else None
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if previous is not None:
            os.chmod(temp, S_IMODE(previous.st_mode))
            with suppress(PermissionError):
                os.chown(temp, previous.st_uid, previous.st_gid)
        os.replace(temp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
