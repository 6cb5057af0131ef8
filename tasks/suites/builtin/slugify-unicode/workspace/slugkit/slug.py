"""Slug generation."""

import re

from slugkit.translit import to_ascii

_NOT_ALNUM = re.compile(r"[^a-z0-9]")


def slugify(text, sep="-"):
    text = to_ascii(text).lower()
    return _NOT_ALNUM.sub(sep, text)
