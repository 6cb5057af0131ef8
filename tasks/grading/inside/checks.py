"""Exact comparisons for hidden tests, shipped into the grading container as ``rlguard_checks``.

Workspace code never runs in the grader's process (``grading_remote``): results arrive as exact
built-in values or identity-compared handles, so plain ``==`` cannot be fooled by an always-equal
object any more. ``same`` remains for when the TYPE matters too (``2`` is not ``2.0``): it demands
the exact built-in type all the way down, then compares with the expected value on the left.

Runs inside the sandbox image: standard library only.
"""

import builtins
import decimal
import fractions

_type = builtins.type
_len = builtins.len
_sorted = builtins.sorted
_repr = builtins.repr
_range = builtins.range
_map = builtins.map
_all = builtins.all
_SCALARS = (int, float, complex, str, bytes, bool, builtins.type(None), decimal.Decimal, fractions.Fraction)
_SEQUENCES = (list, tuple)
_SETS = (set, frozenset)


def same(actual, expected) -> bool:
    """True exactly when ``actual`` equals ``expected`` with identical built-in types all the way down."""
    kind = _type(expected)
    if _type(actual) is not kind:
        return False
    if kind in _SEQUENCES:
        if _len(actual) != _len(expected):
            return False
        return _all(same(actual[index], expected[index]) for index in _range(_len(expected)))
    if kind is dict:
        if _len(actual) != _len(expected):
            return False
        for key in expected:
            matches = [k for k in actual if same(k, key)]
            if _len(matches) != 1 or not same(actual[matches[0]], expected[key]):
                return False
        return True
    if kind in _SETS:
        for item in actual:
            if _type(item) not in _SCALARS:
                return False
        return _sorted(_map(_repr, actual)) == _sorted(_map(_repr, expected))
    if kind in _SCALARS:
        return (expected == actual) is True
    raise TypeError(f"same() compares built-in values only, not {kind.__name__}")
