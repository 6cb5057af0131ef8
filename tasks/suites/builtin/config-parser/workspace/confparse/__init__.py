"""A small INI-style configuration reader."""

from confparse.parser import parse

__all__ = ["parse"]
