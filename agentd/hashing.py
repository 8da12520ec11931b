"""Canonical JSON, SHA-256 and time-sortable ids: the bytes every hash in agentd is taken over."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

from agentd.clock import Clock

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ULID_SHIFTS = range(125, -1, -5)  # 26 characters of 5 bits, most significant first


def compact_json_writer(*, sort_keys: bool) -> Callable[[Any], str]:
    """json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False,
    allow_nan=False), the same text, from one encoder made once: json.dumps builds a JSONEncoder and
    its C encoder on every call that passes an option (a third of the cost for a small value). No
    circular-reference bookkeeping: agentd's JSON values come from JSON or literals, never cycles
    (a cycle would end in RecursionError instead of ValueError)."""
    reference = json.JSONEncoder(sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if c_make_encoder is None:  # an interpreter without json's C accelerator
        return reference.encode
    write = c_make_encoder(None, reference.default, encode_basestring, None, ":", ",", sort_keys, False, False)
    return lambda value: "".join(write(value, 0))


_canonical_text = compact_json_writer(sort_keys=True)


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: two equal values always give the same bytes."""
    return _canonical_text(value).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path) -> str:
    """A file's sha256: read whole up to 1 MiB (one read; evidence files mostly are), else streamed."""
    with open(path, "rb", buffering=0) as handle:
        if os.fstat(handle.fileno()).st_size <= 1 << 20:
            return hashlib.sha256(handle.readall()).hexdigest()  # to the end, even if it grew meanwhile
        digest = hashlib.sha256()
        while block := handle.read(1 << 20):
            digest.update(block)
        return digest.hexdigest()


def new_ulid(clock: Clock) -> str:
    """A ULID: 48 bits of milliseconds then 80 random bits, 26 Crockford base32 characters."""
    millis = int(clock.now().timestamp() * 1000)
    if not 0 <= millis < 1 << 48:
        value = (millis << 80) | int.from_bytes(os.urandom(10), "big")
        return "".join([_CROCKFORD[(value >> shift) & 31] for shift in _ULID_SHIFTS])
    # The same 26 characters: the first 10 are the milliseconds (the same for every id made in
    # that millisecond), the last 16 the 80 random bits, two characters (10 bits) per lookup.
    r, pairs = int.from_bytes(os.urandom(10), "big"), _PAIRS
    return (
        f"{_millis_text(millis)}{pairs[r >> 70]}{pairs[(r >> 60) & 1023]}{pairs[(r >> 50) & 1023]}"
        f"{pairs[(r >> 40) & 1023]}{pairs[(r >> 30) & 1023]}{pairs[(r >> 20) & 1023]}{pairs[(r >> 10) & 1023]}"
        f"{pairs[r & 1023]}"
    )


_PAIRS = [high + low for high in _CROCKFORD for low in _CROCKFORD]  # 10 bits → 2 characters


@functools.lru_cache(maxsize=4)
def _millis_text(millis: int) -> str:
    return "".join([_PAIRS[(millis >> shift) & 1023] for shift in range(40, -1, -10)])


GENESIS_HASH = "0" * 64


def chain_hash(prev_hash: str, body: dict[str, Any]) -> str:
    """An event's hash: over the previous event's hash and its own canonical body."""
    return sha256_hex(prev_hash.encode() + canonical_json(body))
