"""The runner's side of the wire: one JSON request per line in, one JSON answer per line out.

Parsed and written with the C scanner and encoder behind ``json`` (``_json``) rather than ``json``
itself, which pulls in ``re`` and ``enum``: the runner starts in every fresh sandbox, and importing
those is most of its start-up time. A request the runner will not carry out raises ``Refused``,
whose ``kind`` tells the host which error to raise. Binary data travels as base64. Standard library
only (this module runs inside the sandbox, see ``sandbox.runner_protocol``).
"""

import binascii

try:  # C modules only: ``json`` pulls in re and enum, most of the start-up time
    import _json
except ImportError:  # an interpreter without it: the plain module works the same
    _json = None


class _ScanContext:
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float
    memo = None


def load_json(text: str) -> object:
    """Parse one JSON document (the host's request) with the C scanner behind ``json.loads``."""
    if _json is None:
        import json

        return json.loads(text)
    text = text.strip()
    value, end = _json.make_scanner(_ScanContext())(text, 0)
    if end != len(text):
        raise ValueError("extra data after the JSON value")
    return value


def dump_json(value: object) -> str:
    """Serialise an answer (str, int, float, bool, None, list, dict) as ASCII JSON."""
    if isinstance(value, str):
        return _json.encode_basestring_ascii(value) if _json else __import__("json").dumps(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return repr(value) if value == value and value not in (float("inf"), float("-inf")) else "null"
    if isinstance(value, list | tuple):
        return "[" + ",".join(dump_json(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(dump_json(str(k)) + ":" + dump_json(v) for k, v in value.items()) + "}"
    raise TypeError(f"cannot serialise {type(value).__name__}")


class Refused(Exception):
    """A request the runner will not carry out; ``kind`` tells the host which error to raise."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def encode(data: bytes) -> str:
    """Bytes as base64 text (an answer's ``data``)."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def decode(text: str) -> bytes:
    """A request's base64 ``data`` as bytes."""
    return binascii.a2b_base64(text.encode("ascii"))
