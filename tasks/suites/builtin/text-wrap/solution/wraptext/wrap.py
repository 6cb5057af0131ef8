"""Packing words into lines."""

from wraptext.words import words


def _pieces(text, width):
    for word in words(text):
        for start in range(0, len(word), width):
            yield word[start : start + width]


def wrap(text, width):
    if width < 1:
        raise ValueError("width must be at least 1")
    lines, current = [], ""
    for word in _pieces(text, width):
        candidate = f"{current} {word}" if current else word
        if len(candidate) <= width:
            current = candidate
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def fill(text, width):
    return "\n".join(wrap(text, width))
