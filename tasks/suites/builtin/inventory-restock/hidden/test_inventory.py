import importlib

import pytest
from rlguard_checks import same


def _inv():
    return importlib.import_module("inventory")


def _stock(**units):
    stock = _inv().Stock()
    for sku, qty in units.items():
        stock.add(sku, qty)
    return stock


def test_remove_within_stock():
    stock = _stock(apple=5)
    stock.remove("apple", 2)
    assert same(stock.count("apple"), 3)


def test_remove_too_many_raises_and_keeps_count():
    stock = _stock(apple=1)
    with pytest.raises(_inv().OutOfStock):
        stock.remove("apple", 3)
    assert same(stock.count("apple"), 1)


def test_remove_unknown_sku_raises():
    with pytest.raises(_inv().OutOfStock):
        _stock().remove("kiwi", 1)


def test_remove_non_positive_raises():
    with pytest.raises(ValueError):
        _stock(apple=2).remove("apple", 0)


def test_fulfil_is_all_or_nothing():
    stock = _stock(apple=2, pear=1)
    with pytest.raises(_inv().OutOfStock):
        _inv().fulfil(stock, [("apple", 2), ("pear", 5)])
    assert same((stock.count("apple"), stock.count("pear")), (2, 1))


def test_fulfil_counts_repeated_lines_together():
    stock = _stock(apple=3)
    with pytest.raises(_inv().OutOfStock):
        _inv().fulfil(stock, [("apple", 2), ("apple", 2)])
    assert same(stock.count("apple"), 3)


def test_fulfil_success_returns_true():
    stock = _stock(apple=2, pear=1)
    assert _inv().fulfil(stock, [("apple", 1), ("pear", 1)]) is True
    assert same((stock.count("apple"), stock.count("pear")), (1, 0))
