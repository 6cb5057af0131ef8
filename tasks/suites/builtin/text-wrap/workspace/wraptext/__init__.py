"""Greedy word wrapping."""

from wraptext.wrap import fill, wrap

__all__ = ["fill", "wrap"]
