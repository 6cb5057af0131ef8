"""A small to-do list library."""

from todo.model import Item
from todo.parse import parse_line
from todo.query import by_priority, select
from todo.store import Store

__all__ = ["Item", "Store", "by_priority", "parse_line", "select"]
