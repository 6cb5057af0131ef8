"""A least-recently-used cache."""

from collections import OrderedDict

from cachekit.stats import CacheStats

_MISSING = object()


class LRUCache:
    def __init__(self, capacity):
        self.capacity = capacity
        self.stats = CacheStats()
        self._data = OrderedDict()

    def get(self, key, default=None):
        value = self._data.get(key, _MISSING)
        if value is _MISSING:
            return default
        return value

    def put(self, key, value):
        self._data[key] = value
        if len(self._data) > self.capacity:
            self._data.popitem(last=True)

    def __len__(self):
        return len(self._data)

    def __contains__(self, key):
        return key in self._data
