"""The runner's start-up-friendly JSON codec agrees with the ``json`` module (no engine needed)."""

import json

from hypothesis import given
from hypothesis import strategies as st

from sandbox.inside import protocol

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=20
)


@given(values)
def test_dump_matches_json(value: object) -> None:
    text = protocol.dump_json(value)
    assert text.isascii()
    assert json.loads(text) == value


@given(values)
def test_load_matches_json(value: object) -> None:
    assert protocol.load_json(json.dumps(value)) == value


def test_trailing_garbage_is_rejected() -> None:
    try:
        protocol.load_json('{"op": "ping"} {"op": "exec"}')
    except ValueError:
        return
    raise AssertionError("two documents on one line were accepted")
