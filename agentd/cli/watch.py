"""`--watch [SECONDS]`: a command's own output drawn again every N seconds until Ctrl-C, as watch(1)
would, without a shell. The command's renderer is reused as it is; this only repeats it."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from agentd.clock import SystemClock, format_ts
from agentd.edge import decimal_number, quoted

DEFAULT_WATCH_S = 2.0
CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen: only ever sent to a terminal


def watch_seconds(text: str) -> float:
    """argparse type for --watch: seconds between redraws, above 0 (a bare number; 0.5 is fine)."""
    value = decimal_number(text)
    if value is None or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, found {quoted(text)}")
    return value


def add_watch_option(parser: argparse.ArgumentParser, name: str, render: Callable[[argparse.Namespace], int]) -> None:
    """Give `parser`'s command (`agentd NAME`) a --watch option that repeats `render`, its handler."""
    parser.add_argument(
        "--watch",
        nargs="?",
        const=DEFAULT_WATCH_S,
        type=watch_seconds,
        metavar="SECONDS",
        help=f"draw it again every SECONDS (default {DEFAULT_WATCH_S:g}) until Ctrl-C",
    )
    parser.set_defaults(handler=watching(name, render))


def watching(name: str, render: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A handler that runs `render` once, or with --watch again and again until Ctrl-C (exit 0)."""

    def handler(args: argparse.Namespace) -> int:
        if getattr(args, "watch", None) is None:
            return render(args)
        try:
            with ctrl_c() as stopped:
                while not stopped.is_set():
                    _redraw(name, render, args)
                    stopped.wait(args.watch)
        except KeyboardInterrupt:  # a second Ctrl-C, or one ctrl_c could not take over
            pass
        return 0  # Ctrl-C is how a watch ends: not an error, no traceback

    return handler


@contextlib.contextmanager
def ctrl_c() -> Iterator[threading.Event]:
    """An event Ctrl-C (SIGINT) sets, instead of raising KeyboardInterrupt wherever the program happens to
    be: a KeyboardInterrupt in the middle of a frame (an import, a read, a print) could end the process by
    the signal, or be lost in code that cleans up. The frame being drawn is finished, then the watch ends;
    a second Ctrl-C interrupts at once, as usual."""
    stopped = threading.Event()
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler or threading.current_thread() is not threading.main_thread():
        yield stopped  # Ctrl-C ignored (a background job), or someone else's handler: theirs stays
        return

    def first(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, previous)  # the next Ctrl-C is the usual KeyboardInterrupt
        stopped.set()

    signal.signal(signal.SIGINT, first)
    try:
        yield stopped
    finally:
        signal.signal(signal.SIGINT, previous)


def _redraw(name: str, render: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> None:
    """One frame: on a terminal the screen is cleared first; a pipe gets frames one after another."""
    if sys.stdout.isatty():
        print(CLEAR, end="")
    print(f"every {args.watch:g}s: agentd {name}   {format_ts(SystemClock().now())[:19]}Z  (Ctrl-C stops)")
    render(args)
    print(flush=True)
