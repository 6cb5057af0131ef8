"""A tiny warehouse stock model."""

from inventory.orders import fulfil
from inventory.stock import OutOfStock, Stock

__all__ = ["OutOfStock", "Stock", "fulfil"]
