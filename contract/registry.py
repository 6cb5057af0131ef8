"""``Registry[T]``: a named table of implementations, the one shape every plug-in point uses.

Advantage estimators (``trainer.advantages``), grading modes (``tasks.grading.modes``) and bash
decoys (``guard.decoys``) are each a ``Registry``: implementations register under a name with a
decorator, settings and task files name them, and an unknown name is one clear error listing the
known ones. Registration order is kept (bash decoys are tried in it). A setting that names an
implementation is validated against the registry's keys (:meth:`Registry.validator`) instead of a
hand-kept ``Literal`` that drifts from what is registered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
F = TypeVar("F")


class UnknownNameError(KeyError):
    """No implementation is registered under this name (the message lists the known ones)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class Registry(Generic[T]):
    """Implementations of one kind (``what``, e.g. ``"grading mode"``), by name."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        """Register ``item`` as ``name``; a name registers once."""
        if name in self._items:
            raise ValueError(f"{self.what} {name!r} registered twice")
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator form of :meth:`add`: ``@registry.register("gae")``."""

        def decorate(item: F) -> F:
            self.add(name, item)  # type: ignore[arg-type]
            return item

        return decorate

    def get(self, name: str) -> T:
        """The implementation registered as ``name``; :class:`UnknownNameError` listing the known ones."""
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self._unknown(name)) from None

    def _unknown(self, name: str) -> str:
        return f"unknown {self.what} {name!r}; known: {', '.join(self.names())}"

    def names(self) -> list[str]:
        return sorted(self._items)

    def items(self) -> Iterator[tuple[str, T]]:
        """``(name, implementation)`` in registration order."""
        return iter(list(self._items.items()))

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __len__(self) -> int:
        return len(self._items)

    def validator(self) -> Callable[[str], str]:
        """A pydantic ``field_validator`` body: the value must be a registered name."""

        def check(value: str) -> str:
            if value not in self._items:
                raise ValueError(self._unknown(value))
            return value

        return check
