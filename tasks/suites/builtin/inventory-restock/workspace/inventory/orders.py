"""Serving order lines from stock."""


def fulfil(stock, lines):
    """Remove every (sku, qty) line from ``stock``."""
    for sku, qty in lines:
        stock.remove(sku, qty)
    return True
