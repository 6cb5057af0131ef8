"""Memoisation on top of LRUCache."""

import functools

from cachekit.lru import LRUCache

_MISSING = object()


def memoize(capacity=128):
    def decorate(func):
        cache = LRUCache(capacity)

        @functools.wraps(func)
        def wrapper(*args):
            value = cache.get(args, _MISSING)
            if value is _MISSING:
                value = func(*args)
                cache.put(args, value)
            return value

        def cache_info():
            return {"hits": cache.stats.hits, "misses": cache.stats.misses, "size": len(cache)}

        wrapper.cache_info = cache_info
        return wrapper

    return decorate
