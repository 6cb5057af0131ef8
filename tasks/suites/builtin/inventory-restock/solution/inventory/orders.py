"""Serving order lines from stock."""

from inventory.stock import OutOfStock


def fulfil(stock, lines):
    """Remove every (sku, qty) line from ``stock``, or nothing when any line cannot be served."""
    needed = {}
    for sku, qty in lines:
        if qty <= 0:
            raise ValueError("quantity must be positive")
        needed[sku] = needed.get(sku, 0) + qty
    for sku, qty in needed.items():
        if stock.count(sku) < qty:
            raise OutOfStock(f"{sku}: {stock.count(sku)} on hand, {qty} requested")
    for sku, qty in lines:
        stock.remove(sku, qty)
    return True
