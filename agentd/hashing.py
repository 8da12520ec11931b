"""Canonical JSON, SHA-256 and time-sortable ids: the bytes every hash in agentd is taken over."""

from __future__ import annotations

import collections
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


_sha256 = hashlib.sha256


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
    # that millisecond), the last 16 the 80 random bits.
    return _millis_text(millis) + _random_tail()


_PAIRS = [high + low for high in _CROCKFORD for low in _CROCKFORD]  # 10 bits → 2 characters


@functools.lru_cache(maxsize=4)
def _millis_text(millis: int) -> str:
    return "".join([_PAIRS[(millis >> shift) & 1023] for shift in range(40, -1, -10)])


# The 80 random bits are 16 characters of 5 random bits each: one random byte per character, its low
# 5 bits (256 is a multiple of 32, so each character is uniform), mapped by one bytes.translate. One
# os.urandom and one translate make the tails of _TAILS_AT_ONCE ids (an os.urandom per id, then eight
# lookups, were half an id's cost).
_RANDOM_CHARACTER = bytes(ord(_CROCKFORD[byte & 31]) for byte in range(256))
_TAILS_AT_ONCE = 256
# Hazard: one process's tails, never another's. deque.popleft is atomic (threads never share a
# tail); a forked child forgets what its parent had drawn (os.register_at_fork below).
_tails: collections.deque[str] = collections.deque()
os.register_at_fork(after_in_child=_tails.clear)


def random_tails(random: bytes) -> list[str]:
    """Each 16 bytes of `random` as 16 Crockford base32 characters: each byte's low 5 bits."""
    text = random.translate(_RANDOM_CHARACTER).decode()
    return [text[start : start + 16] for start in range(0, len(random) // 16 * 16, 16)]


def _random_tail() -> str:
    try:
        return _tails.popleft()
    except IndexError:
        fresh = random_tails(os.urandom(16 * _TAILS_AT_ONCE))
        _tails.extend(fresh[1:])
        return fresh[0]


GENESIS_HASH = "0" * 64


def chain_hash(prev_hash: str, body: dict[str, Any]) -> str:
    """An event's hash: over the previous event's hash and its own canonical body."""
    return sha256_hex(prev_hash.encode() + canonical_json(body))


_encode_text: Callable[[str], str] = encode_basestring  # json's own (its C form): the encoders' string


def _canonical_scalar(value: Any) -> str:
    """A field of an event's body as canonical_json writes it: the common types at once, the rest
    through the same encoder."""
    if value is None:
        return "null"
    if type(value) is str:
        return _encode_text(value)
    if type(value) is int:
        return int.__repr__(value)
    return _canonical_text(value)


def canonical_object(value: Any) -> str:
    """canonical_json of a JSON object, as text: the events' payload and refs columns hold these very
    characters, so an append encodes each once (for its hash and its row)."""
    return "{}" if type(value) is dict and not value else _canonical_text(value)


def event_body_text(
    event_id: str,
    event_type: str,
    timestamp: str,
    sequence: int,
    schema_version: int,
    task_id: int | None,
    attempt_id: str | None,
    workflow_id: int | None,
    schedule_id: str | None,
    sensor_id: str | None,
    payload_json: str,
    refs_json: str,
) -> str:
    """canonical_json of an event's body (the dict of these twelve fields) as text, written without building
    the dict and sorting its keys (the append's largest cost), given the payload's and refs'
    canonical_object text (the append has them already: they are its row's columns). The keys below are in
    sorted order; tests/test_fast_paths.py proves the two agree for any values of these types. Each field
    of the type it has when agentd appends (text, a plain int, None) is written here, with no call per
    field (the body was a quarter of an append's time: issue 56); any other goes through the encoder."""
    s, text = _canonical_scalar, _encode_text
    attempt = "null" if attempt_id is None else text(attempt_id) if type(attempt_id) is str else s(attempt_id)
    schedule = "null" if schedule_id is None else text(schedule_id) if type(schedule_id) is str else s(schedule_id)
    sensor = "null" if sensor_id is None else text(sensor_id) if type(sensor_id) is str else s(sensor_id)
    task = "null" if task_id is None else task_id if type(task_id) is int else s(task_id)
    workflow = "null" if workflow_id is None else workflow_id if type(workflow_id) is int else s(workflow_id)
    version = schema_version if type(schema_version) is int else s(schema_version)
    return (
        f'{{"attempt_id":{attempt},"event_id":{text(event_id)},"payload":{payload_json},"refs":{refs_json},'
        f'"schedule_id":{schedule},"schema_version":{version},"sensor_id":{sensor},'
        f'"sequence":{sequence if type(sequence) is int else s(sequence)},"task_id":{task},'
        f'"timestamp":{text(timestamp)},"type":{text(event_type)},"workflow_id":{workflow}}}'
    )


def chain_hash_of(prev_hash: str, body_json: bytes) -> str:
    """chain_hash, given the body's canonical bytes (event_body_text, encoded)."""
    return sha256_hex(prev_hash.encode() + body_json)


def chain_hash_of_text(prev_hash: str, body_text: str) -> str:
    """chain_hash_of(prev_hash, body_text.encode()): the same bytes (UTF-8 of two texts joined is their
    UTF-8 joined), with one encoding instead of two and a concatenation."""
    return _sha256((prev_hash + body_text).encode()).hexdigest()
