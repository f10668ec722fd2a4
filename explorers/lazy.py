"""A package's exports loaded on first use (PEP 562), so importing the package imports none of its modules.

Streamlit runs each session's page on a thread of its own, and Python's import locks are per module. A
package whose `__init__` imports its own modules holds its lock while it waits for theirs; a thread that
imports one of those modules directly (as `explorers.progress.history` imports `explorers.drills.catalogue`)
holds the module's lock while it waits for the package's. Two sessions opening pages at once on a fresh
server deadlocked that way: Python raised `_DeadlockError`, and the pages caught in it showed "cannot
import name ... from partially initialized module" instead of their lab (measured: five pages opened at
once, four broken). A package whose `__init__` imports nothing of its own cannot be half of that cycle.

    __getattr__, __dir__ = lazy.exports(__name__, {"DRILLS": "catalogue", "lesson": "lesson"})
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Iterable, Mapping


class _Package(types.ModuleType):
    """A package whose own functions keep their names when a module of the same name is imported (`drills.catalogue()`
    beside `drills/catalogue.py`): Python sets each imported module on its package, which would replace them."""

    _kept: frozenset[str] = frozenset()

    def __setattr__(self, name: str, value: object) -> None:
        if name in self._kept and isinstance(value, types.ModuleType) and callable(self.__dict__.get(name)):
            return  # the module stays reachable as sys.modules[f"{package}.{name}"] and by `from ... import`
        super().__setattr__(name, value)


def exports(
    package: str, where: Mapping[str, str], keep: Iterable[str] = ()
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`: each name in `where` is its module (named the same) or the
    attribute of that name in the module it maps to, imported when first asked for and kept. `keep`: the package's
    own functions named like one of its modules."""
    if keep:
        module = sys.modules[package]
        module.__class__ = _Package
        object.__setattr__(module, "_kept", frozenset(keep))

    def __getattr__(name: str) -> object:  # noqa: N807 - the module-level hook's own name
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(f"{package}.{where[name]}")
        value = module if where[name] == name else getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__
