"""The wire format between the trusted grader and the untrusted workspace worker (both sides).

One JSON object per line. Values are STRICT plain data, checked by exact type so a subclass (a
``float`` whose ``__eq__`` is always true) never passes as the built-in it pretends to be:

* ``None``, ``bool``, ``int``, ``float``, ``str`` and ``list`` are JSON's own;
* ``tuple``, ``dict``, ``set``, ``frozenset``, ``bytes``, ``decimal.Decimal``,
  ``fractions.Fraction``, ``complex`` and ``range`` are tagged objects ``{"t": <tag>, "v": ...}``
  (dict keys need not be strings); they are rebuilt by the receiver from ints, floats and text, so
  no code of the sender runs;
* ``NotImplemented`` and ``Ellipsis`` are ``{"t": "const", "v": <name>}``;
* anything else is a tagged object the caller's ``other`` hook makes and reads (remote handles,
  exception classes, local callbacks), so every JSON object on the wire carries a known tag.

Sizes and nesting are capped on both sides. Runs inside the sandbox image: standard library only.
"""

import base64
import decimal
import fractions
import json

MAX_LINE_BYTES = 8 * 1024 * 1024
MAX_DEPTH = 64
MAX_ITEMS = 200_000
MAX_TEXT = 1_000_000
_PLAIN_TAGS = ("tuple", "dict", "set", "frozenset", "bytes", "decimal")
_PLAIN_TAGS += ("fraction", "complex", "range", "const")
_CONSTANTS = {"NotImplemented": NotImplemented, "Ellipsis": Ellipsis}


class WireError(ValueError):
    """A message that is not well-formed plain data (or is over the caps)."""


class _Budget:
    def __init__(self) -> None:
        self.items = 0

    def spend(self, depth: int) -> None:
        self.items += 1
        if self.items > MAX_ITEMS:
            raise WireError(f"more than {MAX_ITEMS} values")
        if depth > MAX_DEPTH:
            raise WireError(f"nested deeper than {MAX_DEPTH}")


def encode(value, other):
    """``value`` as JSON-ready data; ``other(value)`` tags whatever is not plain data."""
    return _encode(value, other, _Budget(), 0)


def _encode(value, other, budget, depth):
    budget.spend(depth)
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float:
        return value
    if kind is str:
        if len(value) > MAX_TEXT:
            raise WireError(f"string longer than {MAX_TEXT}")
        return value
    if kind is list:
        return [_encode(item, other, budget, depth + 1) for item in value]
    if kind is tuple or kind is set or kind is frozenset:
        return {"t": kind.__name__, "v": [_encode(item, other, budget, depth + 1) for item in value]}
    if kind is dict:
        pairs = [
            [_encode(k, other, budget, depth + 1), _encode(v, other, budget, depth + 1)]
            for k, v in value.items()
        ]
        return {"t": "dict", "v": pairs}
    if kind is bytes:
        if len(value) > MAX_TEXT:
            raise WireError(f"bytes longer than {MAX_TEXT}")
        return {"t": "bytes", "v": base64.b64encode(value).decode("ascii")}
    if kind is decimal.Decimal:
        return {"t": "decimal", "v": str(value)}
    if kind is fractions.Fraction:
        return {"t": "fraction", "v": [value.numerator, value.denominator]}
    if kind is complex:
        return {"t": "complex", "v": [value.real, value.imag]}
    if kind is range:
        return {"t": "range", "v": [value.start, value.stop, value.step]}
    if value is NotImplemented or value is Ellipsis:
        return {"t": "const", "v": repr(value)}
    return other(value)


def decode(data, other):
    """The value ``data`` encodes; ``other(tagged)`` reads every tag that is not plain data."""
    return _decode(data, other, _Budget(), 0)


def _decode(data, other, budget, depth):
    budget.spend(depth)
    kind = type(data)
    if data is None or kind in (bool, int, float, str):
        return data
    if kind is list:
        return [_decode(item, other, budget, depth + 1) for item in data]
    if kind is not dict or type(data.get("t")) is not str:
        raise WireError(f"untagged {kind.__name__}")
    tag, payload = data["t"], data.get("v")
    if tag not in _PLAIN_TAGS:
        return other(data)
    if tag == "bytes":
        if type(payload) is not str:
            raise WireError("bytes payload is not text")
        return base64.b64decode(payload.encode("ascii"), validate=True)
    if tag == "const":
        if payload not in _CONSTANTS:
            raise WireError("unknown constant")
        return _CONSTANTS[payload]
    if tag == "decimal":
        if type(payload) is not str or len(payload) > 1000:
            raise WireError("bad decimal")
        try:
            return decimal.Decimal(payload)
        except decimal.InvalidOperation as exc:
            raise WireError(f"bad decimal {payload[:40]!r}") from exc
    if type(payload) is not list:
        raise WireError(f"{tag} payload is not a list")
    if tag in ("fraction", "complex", "range"):
        return _number(tag, payload)
    items = [_decode(item, other, budget, depth + 1) for item in payload]
    try:
        if tag == "tuple":
            return tuple(items)
        if tag == "set":
            return set(items)
        if tag == "frozenset":
            return frozenset(items)
        if any(type(pair) is not list or len(pair) != 2 for pair in payload):
            raise WireError("dict payload is not a list of pairs")
        return {k: v for k, v in items}
    except TypeError as exc:  # unhashable set members or dict keys
        raise WireError(str(exc)) from exc


def _number(tag: str, payload: list):
    kinds = (float, int) if tag == "complex" else (int,)
    if len(payload) != (3 if tag == "range" else 2) or any(type(x) not in kinds for x in payload):
        raise WireError(f"bad {tag}")
    try:
        if tag == "fraction":
            return fractions.Fraction(payload[0], payload[1])
        if tag == "complex":
            return complex(payload[0], payload[1])
        return range(*payload)
    except (ValueError, ZeroDivisionError) as exc:
        raise WireError(f"bad {tag}: {exc}") from exc


def dumps(message: dict) -> bytes:
    """One protocol line."""
    line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
    if len(line) > MAX_LINE_BYTES:
        raise WireError(f"message over {MAX_LINE_BYTES} bytes")
    return line


def loads(line: bytes) -> dict:
    """A protocol line back into its message object (never anything but a dict)."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not JSON: {exc}") from exc
    if type(message) is not dict:
        raise WireError("message is not an object")
    return message
