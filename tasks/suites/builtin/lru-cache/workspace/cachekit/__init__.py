"""Small caching helpers."""

from cachekit.decorator import memoize
from cachekit.lru import LRUCache
from cachekit.stats import CacheStats

__all__ = ["CacheStats", "LRUCache", "memoize"]
