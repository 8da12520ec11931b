"""`--watch [SECONDS]`: a command's own output drawn again every N seconds until Ctrl-C, as watch(1)
would, without a shell. The command's renderer is reused as it is; this only repeats it."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable

from agentd.clock import SystemClock, format_ts

DEFAULT_WATCH_S = 2.0
CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen: only ever sent to a terminal


def watch_seconds(text: str) -> float:
    """argparse type for --watch: seconds between redraws, above 0 (a bare number; 0.5 is fine)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, found {text!r}")
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
            while True:
                _redraw(name, render, args)
                time.sleep(args.watch)
        except KeyboardInterrupt:  # Ctrl-C is how a watch ends: not an error, no traceback
            return 0

    return handler


def _redraw(name: str, render: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> None:
    """One frame: on a terminal the screen is cleared first; a pipe gets frames one after another."""
    if sys.stdout.isatty():
        print(CLEAR, end="")
    print(f"every {args.watch:g}s: agentd {name}   {format_ts(SystemClock().now())[:19]}Z  (Ctrl-C stops)")
    render(args)
    print(flush=True)
