"""Names that stand for other paths: links and copies made by earlier calls (or earlier in a call).

A hidden file copied to an innocent name is still the hidden file to whoever reads the copy, and
a protected script written through a symbolic link pointing at it is changed. ``Aliases`` keeps
what calls did that create such names, from their ``Effect``\\ s:

- ``ln -s TARGET LINK`` / ``os.symlink`` / ``ln TARGET LINK``: LINK -> TARGET, followed for reads
  and writes (a link to a directory covers what lies below it);
- ``cp``/``mv``/``install``/``tar``/``shutil.copy``/``cat SRC > DST``: DST's origin is SRC (or,
  when the call does not say which input went where, every path the call read), followed for
  reads only (changing a copy does not change the original);
- a path written afresh (nothing read) or deleted loses what it stood for.

Bounded: ``MAX_ENTRIES`` names (the oldest forgotten first), ``MAX_ORIGINS`` origins each, and
resolution follows at most ``MAX_DEPTH`` steps and returns at most ``MAX_NAMES`` names.
"""

from __future__ import annotations

import posixpath
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from guard.types import READ_OPS, Effect

MAX_ENTRIES = 4096
MAX_ORIGINS = 8
MAX_DEPTH = 4
MAX_NAMES = 32


class Aliases:
    """Links and copies by name; ``names(path, purpose)`` resolves through them."""

    def __init__(self) -> None:
        self.links: OrderedDict[str, str] = OrderedDict()
        self.origins: OrderedDict[str, tuple[str, ...]] = OrderedDict()

    def __bool__(self) -> bool:
        return bool(self.links or self.origins)

    def record(self, effects: Iterable[Effect]) -> None:
        """Remember what one call's effects (in the order they happen) make names stand for."""
        reads: list[str] = []
        for effect in effects:
            if effect.deferred:  # code written for later: nothing happened yet
                continue
            self.observe(effect, reads)
            if effect.op in READ_OPS and effect.path not in reads:
                reads.append(effect.path)

    def observe(self, effect: Effect, reads: Sequence[str]) -> None:
        """One effect, after ``reads`` (what the call read before it)."""
        path = effect.path
        if effect.op == "link" and effect.source:
            self._put(self.links, path, effect.source)
            self.origins.pop(path, None)
        elif effect.op in ("write", "append") and effect.source:
            self._put(self.origins, path, (effect.source,))
        elif effect.op == "write" and reads and path not in reads:
            self._put(self.origins, path, tuple(reads[-MAX_ORIGINS:]))
        elif effect.op in ("write", "delete", "move"):
            self._drop(path)

    def _put(self, table: OrderedDict, key: str, value: object) -> None:  # type: ignore[type-arg]
        table.pop(key, None)
        table[key] = value
        while len(table) > MAX_ENTRIES:
            table.popitem(last=False)

    def _drop(self, path: str) -> None:
        self.links.pop(path, None)
        self.origins.pop(path, None)


def resolve(path: str, purpose: str, tables: Sequence[Aliases]) -> list[str]:
    """The names ``path`` stands for (itself first): links followed for both purposes, copies'
    origins for ``purpose == "read"``; ancestors count (a link or copy of a directory)."""
    if not any(tables):
        return [path]
    seen = [path]
    frontier = [path]
    for _ in range(MAX_DEPTH):
        found: list[str] = []
        for name in frontier:
            for target in _step(name, purpose, tables):
                if target not in seen and len(seen) < MAX_NAMES:
                    seen.append(target)
                    found.append(target)
        if not found:
            break
        frontier = found
    return seen


def _step(name: str, purpose: str, tables: Sequence[Aliases]) -> list[str]:
    out: list[str] = []
    prefix = name
    while True:
        rest = name[len(prefix) :]
        for table in tables:
            link = table.links.get(prefix)
            if link is not None:
                out.append(link.rstrip("/") + rest if rest else link)
            if purpose == "read":
                for origin in table.origins.get(prefix, ()):
                    out.append(origin.rstrip("/") + rest if rest else origin)
        if prefix in ("/", ""):
            return out
        prefix = posixpath.dirname(prefix)
