"""Small facts about one Python syntax node, read without any context: the constant text a
path expression spells, ``open`` modes, always-true tests, stub functions, ``__main__`` guards.

The reader (``guard.normalize.pycode``) keeps the context (import aliases, names assigned a
string); these helpers need none.
"""

from __future__ import annotations

import ast
import operator
import posixpath


def const_str(node: ast.AST) -> str | None:
    """The text ``node`` spells when it is built from constants (a literal, an f-string, ``+``,
    ``/`` or ``os.path.join`` of literals, ``os.getcwd()``), unknown parts as ``{}``; else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
        value = node.value
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if isinstance(node, ast.JoinedStr):
        parts = [const_str(v) if not isinstance(v, ast.FormattedValue) else "{}" for v in node.values]
        return "".join(p or "" for p in parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        # "prefix" + var / var + "/sitecustomize.py": keep the known part, mark the unknown one
        left, right = const_str(node.left), const_str(node.right)
        if left is not None or right is not None:
            return (left if left is not None else "{}") + (right if right is not None else "{}")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        # pathlib: Path("/") / "hidden" / "t.py"
        left, right = const_str(node.left), const_str(node.right)
        if right is not None:  # Path(site.getsitepackages()[0]) / "usercustomize.py": keep the name
            return posixpath.join(left if left is not None else "{}", right)
    if (
        isinstance(node, ast.Attribute)
        and node.attr in ("sep", "pathsep")
        and isinstance(node.value, ast.Name | ast.Attribute)
    ):
        return "/" if node.attr == "sep" else ":"  # os.sep, os.path.sep
    if isinstance(node, ast.Call) and not node.args and isinstance(node.func, ast.Attribute | ast.Name):
        called = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        if called in ("getcwd", "cwd", "getcwdb"):
            return "."  # os.getcwd(), Path.cwd(): where the code runs
    if isinstance(node, ast.Call) and node.args and not node.keywords:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("join", "Path", "PurePath", "PosixPath") and (name != "join" or _is_path_join(func)):
            parts = [const_str(a) for a in node.args]
            if any(p is not None for p in parts):  # unknown parts (site.USER_SITE) stay as "{}"
                return posixpath.join(*[p if p is not None else "{}" for p in parts])
    return None


def _is_path_join(func: ast.expr) -> bool:
    """``os.path.join`` / ``posixpath.join``, not ``",".join``."""
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Attribute | ast.Name)
        and (getattr(func.value, "attr", getattr(func.value, "id", "")) in ("path", "posixpath"))
    )


def mode_op(mode: str) -> str:
    """``open`` mode to an effect: ``r`` reads, ``w``/``x``/``+`` write, ``a`` appends."""
    if "a" in mode:
        return "append"
    return "write" if any(c in mode for c in "wx+") else "read"


def always_const(node: ast.AST) -> bool:
    return isinstance(node, ast.Lambda) and isinstance(node.body, ast.Constant)


def root_name(node: ast.AST) -> str | None:
    """``a`` of ``a.b.c`` (None when the chain does not start at a plain name)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def returns_only_literal(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body (docstring aside) that is only ``return True`` / ``return 1`` / ``return None``."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return (
        len(body) == 1
        and isinstance(body[0], ast.Return)
        and isinstance(body[0].value, ast.Constant)
        and body[0].value.value in (True, 1, None, 1.0)
    )


def returns_only_constant(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``__eq__`` whose every path returns the same constant, whatever ``other`` is."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return False
    value = body[0].value
    return (isinstance(value, ast.Constant) and value.value in (True, False, 1, 0)) or always_true(value)


_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}


def always_true(node: ast.AST | None) -> bool:
    if isinstance(node, ast.Compare) and all(
        isinstance(n, ast.Constant) for n in (node.left, *node.comparators)
    ):  # ``1 == 1``: constants only, compared without eval
        values = [node.left.value, *(c.value for c in node.comparators)]  # type: ignore[union-attr]
        try:
            return all(
                type(op) in _COMPARE and _COMPARE[type(op)](a, b)
                for op, a, b in zip(node.ops, values, values[1:], strict=False)
            )
        except TypeError:
            return False
    if (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and type(node.ops[0]) in _REFLEXIVE
        and not any(isinstance(n, ast.Call) for n in ast.walk(node.left))
        and ast.dump(node.left) == ast.dump(node.comparators[0])
    ):  # ``x == x``: one value compared with itself (``Point(1) == Point(1)`` builds two and tests __eq__)
        return True
    if isinstance(node, ast.Constant):
        return bool(node.value) and node.value is not Ellipsis
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        return any(always_true(v) for v in node.values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return isinstance(node.operand, ast.Constant) and not node.operand.value
    return False


_REFLEXIVE = frozenset({ast.Eq, ast.Is, ast.GtE, ast.LtE})


def has_check(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert | ast.Raise | ast.With | ast.AsyncWith):
            return True
        if isinstance(node, ast.Call):
            func = node.func
            attr = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if attr.startswith(("assert", "check", "verify", "expect", "fail")) or attr in ("raises",):
                return True
    return False


def is_main_guard(node: ast.If) -> bool:
    test = node.test
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def exit_code(args: list[ast.expr]) -> str:
    if not args:
        return "0"
    arg = args[0]
    if isinstance(arg, ast.Constant):
        return "0" if arg.value in (0, None, False) else str(arg.value)[:20]
    return "expr"
