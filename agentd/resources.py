"""Where agentd's shipped data lives: inside the package in a wheel, beside it in a checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """`migrations`, `config`, `units`, `skills`, `sensors` or `docs`, wherever this install keeps them."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"agentd's {name}/ folder is missing from this install ({_PACKAGE})")


def example_config() -> Path:
    """The embedded default identity TOML that `make run` and the README tour use."""
    return data_dir("config") / "identity.example.toml"
