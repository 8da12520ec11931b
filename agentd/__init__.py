"""agentd: an agent runtime with a durable SQLite queue, one verified attempt at a time.

`frozen_value` makes the frozen dataclasses every layer passes around (docs/decisions.md, "Start-up").
"""

from __future__ import annotations

import dataclasses
import reprlib
from typing import TYPE_CHECKING, Any, TypeVar

__version__ = "0.1.0"

T = TypeVar("T")

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Any:
        return lambda decorator: decorator


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def frozen_value(cls: type[T]) -> type[T]:
    """`@dataclass(frozen=True)`: the same class, with the same `__init__`, `__repr__`, `__eq__`,
    `__hash__` and frozen fields, built in about half the time. Python 3.11 compiles each method a
    dataclass generates on its own (~0.1 ms each on a small VM), six for a frozen one, and a service
    start builds ~120 such classes. The three that only read the fields (repr, eq, hash) are shared
    functions here, which read the class's field names. A class that defines one of them keeps its own."""
    made = dataclasses.dataclass(cls, frozen=True, repr=False, eq=False)
    fields = dataclasses.fields(made)  # type: ignore[arg-type]
    made.__value_fields__ = (  # type: ignore[attr-defined]
        tuple(f.name for f in fields if f.repr),
        tuple(f.name for f in fields if f.compare),
        tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)),
    )
    own = vars(cls)
    if "__repr__" not in own:
        made.__repr__ = _repr  # type: ignore[method-assign]
    if "__eq__" not in own:
        made.__eq__ = _eq  # type: ignore[method-assign]
    if own.get("__hash__") is None:  # none, or None because the class defined __eq__: dataclass adds one then
        made.__hash__ = _hash  # type: ignore[method-assign]
    return made


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    fields = type(self).__value_fields__[0]
    return f"{type(self).__qualname__}({', '.join(f'{name}={getattr(self, name)!r}' for name in fields)})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        compared = type(self).__value_fields__[1]
        return tuple(getattr(self, name) for name in compared) == tuple(getattr(other, name) for name in compared)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, name) for name in type(self).__value_fields__[2]))
