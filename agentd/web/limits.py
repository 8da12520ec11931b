"""How many live streams the console holds open (docs/web.md, "Live events"): at most `[web] max_streams`
in all and `[web] max_streams_per_token` per token; past either, 429 and nothing opened. Their reads
take turns on one lane (agentd/web/stream.py paces it)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import anyio

RETRY_STREAM_S = 15  # what a 429 for a stream says to wait (a stream ends at least this often: keepalives)


class TooManyStreams(Exception):
    """Past `[web] max_streams` or `max_streams_per_token`: 429, nothing opened."""


@dataclass
class Streams:
    """The open streams (per token, and so in all) and the one lane their reads take turns on."""

    most: int
    most_per_token: int
    per_token: Counter[str] = field(default_factory=Counter)
    lane: anyio.Lock = field(default_factory=anyio.Lock)

    @property
    def open(self) -> int:
        return sum(self.per_token.values())

    def take(self, token_id: str) -> None:
        """One more stream for `token_id`, or TooManyStreams naming the limit it would pass."""
        if self.open >= self.most:
            raise TooManyStreams(f"{self.open} live streams are open: the most [web] max_streams allows")
        if self.per_token[token_id] >= self.most_per_token:
            held = self.per_token[token_id]
            raise TooManyStreams(f"this token holds {held} live streams: the most [web] max_streams_per_token allows")
        self.per_token[token_id] += 1

    def give_back(self, token_id: str) -> None:
        self.per_token[token_id] -= 1
        if self.per_token[token_id] <= 0:
            del self.per_token[token_id]
