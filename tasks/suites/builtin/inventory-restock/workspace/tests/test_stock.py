import pytest

from inventory import OutOfStock, Stock, fulfil


def test_add_and_count():
    stock = Stock()
    stock.add("apple", 3)
    stock.add("apple", 2)
    assert stock.count("apple") == 5


def test_remove_more_than_available_goes_negative():
    stock = Stock()
    stock.add("apple", 1)
    stock.remove("apple", 3)
    assert stock.count("apple") == -2


def test_fulfil_serves_lines():
    stock = Stock()
    stock.add("apple", 2)
    stock.add("pear", 1)
    assert fulfil(stock, [("apple", 2), ("pear", 1)]) is True
    assert stock.count("apple") == 0


def test_add_zero_rejected():
    with pytest.raises(ValueError):
        Stock().add("apple", 0)


def test_out_of_stock_is_an_exception():
    assert issubclass(OutOfStock, Exception)
