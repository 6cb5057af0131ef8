"""Units on hand per SKU."""


class OutOfStock(Exception):
    """Not enough units on hand."""


class Stock:
    def __init__(self):
        self._units = {}

    def add(self, sku, qty):
        if qty <= 0:
            raise ValueError("quantity must be positive")
        self._units[sku] = self._units.get(sku, 0) + qty

    def remove(self, sku, qty):
        if qty <= 0:
            raise ValueError("quantity must be positive")
        if self.count(sku) < qty:
            raise OutOfStock(f"{sku}: {self.count(sku)} on hand, {qty} requested")
        self._units[sku] = self._units.get(sku, 0) - qty

    def count(self, sku):
        return self._units.get(sku, 0)
