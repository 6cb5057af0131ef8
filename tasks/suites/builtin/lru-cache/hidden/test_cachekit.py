import importlib

import pytest
from rlguard_checks import same


def _ck():
    return importlib.import_module("cachekit")


def test_evicts_least_recently_used():
    cache = _ck().LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert ("a" in cache, "b" in cache, "c" in cache) == (False, True, True)


def test_get_refreshes_recency():
    cache = _ck().LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert same(cache.get("a"), 1)
    cache.put("c", 3)
    assert ("a" in cache, "b" in cache) == (True, False)


def test_put_existing_refreshes_and_updates():
    cache = _ck().LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    cache.put("c", 3)
    assert same(cache.get("a"), 10)
    assert "b" not in cache
    assert same(len(cache), 2)


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        _ck().LRUCache(0)


def test_stats_count_hits_and_misses():
    cache = _ck().LRUCache(2)
    assert same(cache.stats.hit_rate, 0.0)
    cache.put("a", 1)
    cache.get("a")
    cache.get("b")
    cache.get("a")
    assert same((cache.stats.hits, cache.stats.misses), (2, 1))
    assert cache.stats.hit_rate == pytest.approx(2 / 3) and type(cache.stats.hit_rate) is float


def test_memoize_caches_and_reports():
    calls = []

    @_ck().memoize(capacity=2)
    def square(x):
        calls.append(x)
        return x * x

    assert same([square(2), square(2), square(3), square(4), square(2)], [4, 4, 9, 16, 4])
    assert same(calls, [2, 3, 4, 2])
    assert same(square.cache_info(), {"hits": 1, "misses": 4, "size": 2})
    assert square.__name__ == "square"
