"""Secrets redacted by value: every value of an env_file, wherever it shows up.

Applied before anything is parsed, so an outcome, its diagnostics, the events, the logs, metric
labels and later prompts never see a secret. A value is also found in the forms a Python repr of
the text or of its bytes gives it (exception messages quote what they received), each of those also
as JSON escapes it (quotes, backslashes, non-ASCII: adapters and sensors report in JSON), and, in
bytes, encoded as UTF-8 or Latin-1. A tool that re-encodes a secret (base64, URL encoding) defeats this;
keep values of fewer than MIN_SECRET_CHARS out of env files (they are not redacted: they would
match too much ordinary text).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MIN_SECRET_CHARS = 6
MARK = "[redacted]"
CHUNK_BYTES = 1 << 20


class Redactor:
    """Replaces known secret values with MARK and counts how many it replaced (never what)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        needles: set[str] = set()
        encoded: set[bytes] = set()
        for secret in secrets:
            if len(secret) >= MIN_SECRET_CHARS:
                needles |= _text_forms(secret)
                encoded |= _latin_1(secret)
        encoded |= {needle.encode("utf-8", "surrogatepass") for needle in needles}
        self._texts = sorted(needles, key=len, reverse=True)  # longest first: no partial leftovers
        self._bytes = sorted(encoded, key=len, reverse=True)
        self.count = 0

    def __bool__(self) -> bool:
        return bool(self._texts)

    @property
    def reach(self) -> int:
        """The longest form of a secret, in bytes: text cut closer than this to a secret's start may
        hold part of it, unrecognised."""
        return max((len(needle) for needle in self._bytes), default=0)

    def text(self, text: str) -> str:
        for needle in self._texts:
            if needle in text:
                self.count += text.count(needle)
                text = text.replace(needle, MARK)
        return text

    def value(self, value: Any) -> Any:
        """Every string inside a JSON-like value (keys too)."""
        if not self:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value

    def file(self, path: Path) -> int:
        """Rewrite a file with its secrets replaced (streamed: output files can be large); return
        how many were found. The file keeps its mode; an untouched file is not rewritten."""
        if not self or not path.is_file():
            return 0
        overlap = max(len(needle) for needle in self._bytes) - 1
        tmp = path.with_name(path.name + ".redacting")
        found = 0
        with (
            path.open("rb") as source,
            os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out,
        ):
            carry = b""
            while chunk := source.read(CHUNK_BYTES):
                data, hits = self._replace(carry + chunk)
                found += hits
                keep = max(len(data) - overlap, 0)  # a secret may straddle the next chunk
                out.write(data[:keep])
                carry = data[keep:]
            data, hits = self._replace(carry)
            found += hits
            out.write(data)
        if found:
            os.chmod(tmp, path.stat().st_mode & 0o777)
            os.replace(tmp, path)
            self.count += found
        else:
            tmp.unlink()
        return found

    def files(self, paths: Iterable[Path]) -> int:
        return sum(self.file(path) for path in paths)

    def raw(self, data: bytes) -> bytes:
        """Bytes as they came (from a socket, a file) with the secrets replaced, before anything decodes
        them: a decoder may change how a secret's non-ASCII characters look, and then it is not found."""
        data, hits = self._replace(data)
        self.count += hits
        return data

    def _replace(self, data: bytes) -> tuple[bytes, int]:
        hits = 0
        for needle in self._bytes:
            if needle in data:
                hits += data.count(needle)
                data = data.replace(needle, MARK.encode())
        return data, hits


def _text_forms(secret: str) -> set[str]:
    """The secret as a text may show it: as is, inside the repr of a text or of its UTF-8 or Latin-1
    bytes (`b'...\\xc3\\xab...'`), and each of those as a JSON string holds it (ASCII or not)."""
    forms = {secret, *_quoted_either_way(repr(secret + "'\"")[1:-4])}
    for encoded in {secret.encode("utf-8", "surrogatepass"), *_latin_1(secret)}:
        forms |= _quoted_either_way(repr(encoded + b"'\"")[2:-4])
    return forms | {json.dumps(form, ensure_ascii=ascii)[1:-1] for form in forms for ascii in (True, False)}


def _quoted_either_way(escaped: str) -> set[str]:
    """A repr escapes ' only when it quotes with ' a text that holds both quotes; the secret's part of a
    longer repr can be either, so both are looked for. `escaped` is the form with ' escaped."""
    return {escaped, escaped.replace("\\'", "'")}


def _latin_1(secret: str) -> set[bytes]:
    try:
        return {secret.encode("latin-1")}
    except UnicodeEncodeError:
        return set()
