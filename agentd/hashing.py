"""Canonical JSON, SHA-256 and time-sortable ids: the bytes every hash in agentd is taken over."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from agentd.clock import Clock

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ULID_SHIFTS = range(125, -1, -5)  # 26 characters of 5 bits, most significant first


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: two equal values always give the same bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def new_ulid(clock: Clock) -> str:
    """A ULID: 48 bits of milliseconds then 80 random bits, 26 Crockford base32 characters."""
    millis = int(clock.now().timestamp() * 1000)
    value = (millis << 80) | int.from_bytes(os.urandom(10), "big")
    return "".join([_CROCKFORD[(value >> shift) & 31] for shift in _ULID_SHIFTS])


GENESIS_HASH = "0" * 64


def chain_hash(prev_hash: str, body: dict[str, Any]) -> str:
    """An event's hash: over the previous event's hash and its own canonical body."""
    return sha256_hex(prev_hash.encode() + canonical_json(body))
