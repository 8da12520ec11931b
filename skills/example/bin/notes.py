#!/usr/bin/env python3
"""notes add TEXT… | notes list — the example skill's command; runs in the workspace."""

import sys
from pathlib import Path

NOTES = Path("notes.md")


def main(argv: list[str]) -> int:
    if argv[:1] == ["add"] and len(argv) > 1:
        with NOTES.open("a", encoding="utf-8") as handle:
            handle.write("- " + " ".join(argv[1:]) + "\n")
        return 0
    if argv == ["list"]:
        print(NOTES.read_text(encoding="utf-8") if NOTES.exists() else "(no notes yet)", end="")
        return 0
    print("usage: notes add TEXT… | notes list", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
