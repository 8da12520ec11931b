"""What a run's output is kept as: each stream written to a file up to a cap, counted past it (`CappedFile`,
`CapturedOutput`), and how the run ended (`ProcessResult`). Apart from agentd/process/runner.py, which starts
processes, so what only writes or reads a run's output (an adapter with no process, a refusal) needs none of it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import IO

from agentd import frozen_value
from agentd.process.files import create_private


@frozen_value
class CapturedOutput:
    path: Path
    bytes_seen: int
    bytes_kept: int

    @property
    def truncated(self) -> bool:
        return self.bytes_seen > self.bytes_kept


@frozen_value
class ProcessResult:
    pid: int | None
    exit_code: int | None  # None when it never started or a signal ended it
    signal: int | None
    timed_out: bool
    start_error: str | None
    stdout: CapturedOutput
    stderr: CapturedOutput
    elapsed_s: float
    stragglers: int = 0  # processes the run left behind that were killed when it ended
    # "pids" or "memory": the run's own limit ended it (agentd/process/limits.py); or why its RunTimer ended it
    limit_hit: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def describe(self) -> str:
        if self.start_error:
            return self.start_error
        if self.timed_out:
            return f"timed out after {self.elapsed_s:.1f}s"
        if self.signal is not None:
            return f"killed by {signal.Signals(self.signal).name}"
        return f"exit {self.exit_code}"


class CappedFile:
    """Writes a stream to a file (0600) up to `cap` bytes, counts the rest. With `tail_bytes`, the last
    that many bytes are kept too (in memory, at most that many): the head and the tail around a marked
    gap, for a stream whose verdict is its last record (a harness's result). Without, the head only."""

    def __init__(self, path: Path, cap: int, tail_bytes: int = 0) -> None:
        self.path, self.cap, self.seen, self.kept = path, cap, 0, 0
        self.head_cap = cap - min(max(tail_bytes, 0), cap)
        self.tail_cap = cap - self.head_cap
        self._tail = bytearray()  # the last tail_cap bytes seen after the head was full
        self._file: IO[bytes] = os.fdopen(create_private(path), "wb")

    def write(self, chunk: bytes) -> None:
        self.seen += len(chunk)
        room = self.head_cap - self.kept
        if room > 0:
            part = chunk[:room]
            self._file.write(part)
            self._file.flush()  # as it comes: a reader tails the file while the process runs (docs/live.md)
            self.kept += len(part)
            chunk = chunk[room:]
        if chunk and self.tail_cap:
            self._tail += chunk[-self.tail_cap :]
            del self._tail[: max(len(self._tail) - self.tail_cap, 0)]

    def close(self) -> CapturedOutput:
        tail = self._whole_lines()
        dropped = self.seen - self.kept - len(tail)
        if dropped:
            self._file.write(self._marker(len(tail), dropped).encode())
        self._file.write(tail)
        self._file.close()
        return CapturedOutput(self.path, self.seen, self.kept + len(tail))

    def _marker(self, tail: int, dropped: int) -> str:
        if not self.tail_cap:
            return f"\n[agentd: output capped at {self.cap} bytes; {dropped} more dropped]\n"
        kept = f"the first {self.kept} and the last {tail} kept"
        return f"\n[agentd: output capped at {self.cap} bytes: {kept}; {dropped} between them dropped]\n"

    def _whole_lines(self) -> bytes:
        """The tail from its first whole line, when bytes before it were dropped: a line cut in two
        is no record any parser can read, so it is not kept as one."""
        if self.seen - self.kept <= len(self._tail):
            return bytes(self._tail)  # nothing was dropped: the tail follows the head as it came
        cut = self._tail.find(b"\n")
        return bytes(self._tail[cut + 1 :]) if cut >= 0 else b""
