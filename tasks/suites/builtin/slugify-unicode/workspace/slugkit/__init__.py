"""URL slugs from arbitrary titles (vendored from python-slugify)."""

from slugkit.slug import slugify

__all__ = ["slugify"]
