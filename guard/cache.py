"""A bounded cache of normalised calls (and their rule match) keyed by a hash of the call's content.

Normalisation is a pure function of the call (tool and arguments): the same file written, then
shown with ``cat``, run, or re-sent after a retry is read the same way, and the same large Python
file is the tail of stage-1 latency (its AST walk). ``NormalizeCache.get`` returns the earlier
reading of an identical call instead of parsing it again, with a slot where the rule engine keeps
the match of that reading (``Entry.match``): a call that episode memory and repository context
leave unchanged is matched once. What depends on the episode is added after the cache, so a hit
never carries another episode's state; an enriched call is matched afresh.

Bounds: ``max_entries`` readings and ``max_chars`` characters of call content in all; a call over
``max_call_chars`` is never cached (it would evict everything else). Thread-safe.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict

from guard.normalize import normalize
from guard.types import NormalizedCall, ToolCall


class Entry:
    """One cached reading: the normalised call and, once matched, the engine's match for it."""

    __slots__ = ("match", "matched", "normalized", "size")

    def __init__(self, normalized: NormalizedCall, size: int) -> None:
        self.normalized = normalized
        self.size = size
        self.matched = False
        self.match: object = None


class NormalizeCache:
    """LRU of ``normalize(call)`` by SHA-256 of the call's canonical JSON."""

    def __init__(
        self, max_entries: int = 4096, max_chars: int = 64 * 1024 * 1024, max_call_chars: int = 1024 * 1024
    ) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self.max_call_chars = max_call_chars
        self._entries: OrderedDict[bytes, Entry] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, call: ToolCall) -> Entry:
        """The entry for ``call``: from the cache when an identical call was read before."""
        try:
            raw = json.dumps([call.tool, call.arguments], sort_keys=True, ensure_ascii=False)
        except (TypeError, ValueError):  # not JSON-shaped: normalisation reports it, uncached
            return Entry(normalize(call), 0)
        if len(raw) > self.max_call_chars or self.max_entries == 0:
            return Entry(normalize(call), len(raw))
        key = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).digest()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry
        entry = Entry(normalize(call), len(raw))
        with self._lock:
            self.misses += 1
            if key not in self._entries:
                self._entries[key] = entry
                self._chars += entry.size
                while len(self._entries) > self.max_entries or self._chars > self.max_chars:
                    _, old = self._entries.popitem(last=False)
                    self._chars -= old.size
        return entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._chars = 0
