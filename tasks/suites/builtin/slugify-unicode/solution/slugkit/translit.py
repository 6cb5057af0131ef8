"""Reduce text to ASCII."""

import unicodedata


def to_ascii(text):
    decomposed = unicodedata.normalize("NFKD", text)
    return decomposed.encode("ascii", "ignore").decode("ascii")
