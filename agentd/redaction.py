"""Secrets redacted by value: every value of an env_file, wherever it shows up.

Applied before anything is parsed, so an outcome, its diagnostics, the events, the logs, metric
labels and later prompts never see a secret. A value is also found in the form JSON gives it
(escaped quotes, backslashes, non-ASCII), since adapters report in JSON. A tool that re-encodes a
secret (base64, URL encoding) defeats this; keep values of fewer than MIN_SECRET_CHARS out of
env files (they are not redacted: they would match too much ordinary text).
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
        for secret in secrets:
            if len(secret) >= MIN_SECRET_CHARS:
                needles |= {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
        self._texts = sorted(needles, key=len, reverse=True)  # longest first: no partial leftovers
        self._bytes = [needle.encode("utf-8", "surrogatepass") for needle in self._texts]
        self.count = 0

    def __bool__(self) -> bool:
        return bool(self._texts)

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

    def _replace(self, data: bytes) -> tuple[bytes, int]:
        hits = 0
        for needle in self._bytes:
            if needle in data:
                hits += data.count(needle)
                data = data.replace(needle, MARK.encode())
        return data, hits
