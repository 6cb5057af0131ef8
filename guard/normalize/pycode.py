"""What Python code does, read from its AST: imports, calls, patches, exit tricks, hooks.

Facts are short strings rules match with regexes; names are resolved through import aliases, so
``from urllib import request as r; r.urlopen(u)`` yields ``call:urllib.request.urlopen`` while
``urllib.parse.quote`` stays harmless. Shell strings handed to ``os.system`` / ``subprocess`` and
code handed to ``exec`` (also base64- or hex-encoded) are returned for the caller to scan in turn.
Code that does not parse falls back to a regex scan (Python 2 scripts, fragments of an edit).

This module walks the tree and reads statements and definitions; what calls do is
``pycode_calls``, the names it knows by meaning ``pycode_names``, context-free node helpers
``pycode_nodes``.
"""

from __future__ import annotations

import ast
import re

from guard.normalize import budget as call_budget
from guard.normalize.pycode_calls import PATHLIKE, CallReader, PythonFacts
from guard.normalize.pycode_names import EXIT_CALLS, FRAME_ATTRS, WATCHED_NAMES
from guard.normalize.pycode_nodes import (
    always_const,
    always_true,
    const_str,
    exit_code,
    has_check,
    is_main_guard,
    returns_only_constant,
    returns_only_literal,
    root_name,
)

_URL = re.compile(r"\b([a-z][a-z0-9+.-]*)://([^/\s'\"]*)", re.I)
MAX_NODES = 60_000  # AST nodes read per code block (roughly 6,000 lines)
MAX_TOPLEVEL_STATEMENTS = 5_000


class _Visitor(CallReader):
    """Pre-order walk in source order (imports are seen before the calls that use them); one
    handler per node type, children pushed on an explicit stack: no recursion limit to hit and a
    fraction of ``ast.NodeVisitor``'s per-node cost."""

    # ---- visitors ----------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.out.facts.append(f"import:{alias.name}")
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                self.aliases.setdefault(alias.name.split(".")[0], alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self.out.facts.append(f"import:{module}")
        for alias in node.names:
            self.out.facts.append(f"import:{module}.{alias.name}")
            self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"

    def visit_Assign(self, node: ast.Assign) -> None:
        value = const_str(node.value)
        alias = (
            self.dotted(node.value) if isinstance(node.value, ast.Attribute | ast.Name | ast.Call) else None
        )
        if isinstance(node.value, ast.Call) and not (
            isinstance(node.value.func, ast.Name) and node.value.func.id == "getattr"
        ):
            alias = None  # x = f(): x is f's result, not f; only getattr(obj, "name") names a function
        opened = self._opened_for_writing(node.value)
        for target in node.targets:
            self._assigned(target, node.value)
            if opened is not None and isinstance(target, ast.Name):
                self.handles[target.id] = opened
            if value is not None and isinstance(target, ast.Name):
                self.strings[target.id] = value
            if alias and isinstance(target, ast.Name):  # quit_now = getattr(os, "_exit")
                self.aliases[target.id] = alias

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            path = self._opened_for_writing(item.context_expr)
            if path is not None and isinstance(item.optional_vars, ast.Name):
                self.handles[item.optional_vars.id] = path

    visit_AsyncWith = visit_With

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._assigned(node.target, node.value)

    def _assigned(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, ast.Attribute | ast.Subscript):
            if isinstance(target, ast.Attribute):
                name = self.dotted(target)
            else:
                base, key = self.dotted(target.value), self.string(target.slice)
                name = f"{base}[{key!r}]" if base and key is not None else base
            if name:
                self.out.facts.append(f"assign:{name}")
                if (
                    isinstance(value, ast.Lambda | ast.Constant)
                    and isinstance(target, ast.Attribute)
                    and root_name(target) in self.aliases
                ):  # ``utils.evaluate = lambda *a: True``: a module's function replaced by a stand-in
                    kind = "assign_stub" if isinstance(value, ast.Lambda) else "assign_const"
                    self.out.facts.append(f"{kind}:{name}")
            if isinstance(target, ast.Attribute):
                self.out.facts.append(f"assign_attr:{target.attr}")
        if isinstance(target, ast.Name):
            if target.id in WATCHED_NAMES or target.id.startswith("pytest_"):
                self.out.facts.append(f"assign:{target.id}")
            if target.id in ("__eq__", "__ne__") and always_const(value):
                self.out.facts.append("always_equal")
        if isinstance(target, ast.Tuple | ast.List):
            for elt in target.elts:
                self._assigned(elt, value)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.out.facts.append(f"def:{node.name}")
        if node.name.startswith("pytest_"):
            self.out.facts.append(f"hook:{node.name}")
        if node.name in ("__eq__", "__ne__") and returns_only_constant(node):
            self.out.facts.append("always_equal")
        if returns_only_literal(node):  # ``def verify(...): return True``: a stub or a bypass
            self.out.facts.append(f"def_returns_const:{node.name}")
        if node.name.startswith("test") and not has_check(node):
            self.out.facts.append(f"test_without_assert:{node.name}")
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            name = self.dotted(target)
            if name:
                self.out.facts.append(f"decorator:{name}")

    visit_AsyncFunctionDef = visit_FunctionDef

    def run(self, tree: ast.AST) -> None:
        handlers = _HANDLERS
        child_fields = _CHILD_FIELDS
        stack: list[ast.AST] = [tree]
        budget = MAX_NODES
        while stack:
            budget -= 1
            if budget < 0:  # the rest is unread: say so, the rules escalate it
                self.out.facts.append("python_truncated")
                return
            if not budget & 255:
                call_budget.charge(256, "python")  # the call's time budget covers the walk too
            node = stack.pop()
            if node is None:  # a hole in a child list (``Dict.keys`` for ``**x``, ``kw_defaults``)
                continue
            kind = node.__class__
            handler = handlers.get(kind)
            if handler is not None:
                handler(self, node)
            fields = child_fields.get(kind)
            if fields is None:
                fields = child_fields[kind] = tuple(f for f in kind._fields if f not in _SCALAR_FIELDS)
            if not fields:
                continue
            # children pushed last-first, so they pop in source order
            for name in reversed(fields):
                value = getattr(node, name, None)
                if value.__class__ is list:
                    stack.extend(reversed(value))
                elif value is not None and value.__class__ not in _SCALAR_TYPES:
                    stack.append(value)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            name = self.dotted(target)
            if name:
                self.out.facts.append(f"decorator:{name}")

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        """``except AssertionError: pass``: a failed check that no longer fails (``swallowed:<type>``)."""
        if not all(
            isinstance(b, ast.Pass | ast.Continue)
            or (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))
            for b in node.body
        ):
            return
        kinds = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
        for kind in kinds:
            name = self.dotted(kind) if kind is not None else "*"
            if name:
                self.out.facts.append(f"swallowed:{name.rsplit('.', 1)[-1]}")

    def visit_Assert(self, node: ast.Assert) -> None:
        self.checks += 1
        if always_true(node.test):
            self.out.facts.append("trivial_assert")

    def visit_Compare(self, node: ast.Compare) -> None:
        self.checks += 1

    def visit_Raise(self, node: ast.Raise) -> None:
        self.checks += 1

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in FRAME_ATTRS:
            self.out.facts.append("frame_access")

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if value.__class__ is str and len(value) < 4096:
            if "://" in value:
                for scheme, host in _URL.findall(value):
                    self.out.facts.append(f"url:{scheme.lower()}://{host.lower()}")
            if PATHLIKE.match(value) and "\n" not in value:
                self.out.paths.append(value)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Div):  # Path("/") / "hidden"
            value = const_str(node)
            if value and PATHLIKE.match(value):
                self.out.paths.append(value)


_HANDLERS = {
    getattr(ast, name[len("visit_") :]): getattr(_Visitor, name)
    for name in dir(_Visitor)
    if name.startswith("visit_")
}
# fields that never hold child nodes (names, operators, contexts, constants' values)
_SCALAR_FIELDS = frozenset(
    {
        "id",
        "attr",
        "ctx",
        "name",
        "asname",
        "module",
        "level",
        "arg",
        "kind",
        "type_comment",
        "is_async",
        "conversion",
        "n",
        "s",
        "simple",
        "tag",
        "op",
        "ops",
        "names",
        "type_ignores",
        "rest",
        "kwd_attrs",
    }
)
_SCALAR_TYPES = frozenset({str, int, float, complex, bytes, bool})
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {ast.Constant: ()}


def _toplevel_exits(body: list[ast.stmt], visitor: _Visitor, conditional: bool = False) -> list[str]:
    """Exits at import time: module-level statements (through if/try/with, not functions or the
    ``if __name__ == "__main__"`` block) that call sys.exit/os._exit or raise SystemExit. Each as
    ``toplevel_exit:<code>`` or, under an if/try/loop, ``toplevel_exit_cond:<code>``."""
    found: list[str] = []
    kind = "toplevel_exit_cond" if conditional else "toplevel_exit"
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(stmt, ast.If):
            if not is_main_guard(stmt):
                found += _toplevel_exits(stmt.body, visitor, True) + _toplevel_exits(
                    stmt.orelse, visitor, True
                )
            continue
        if isinstance(stmt, ast.Try):
            found += _toplevel_exits(stmt.body, visitor, conditional)
            for b in (stmt.orelse, stmt.finalbody, *[h.body for h in stmt.handlers]):
                found += _toplevel_exits(b, visitor, True)
            continue
        if isinstance(stmt, ast.With):
            found += _toplevel_exits(stmt.body, visitor, conditional)
            continue
        if isinstance(stmt, ast.For | ast.While):
            found += _toplevel_exits(stmt.body, visitor, True)
            continue
        if isinstance(stmt, ast.Raise) and stmt.exc is not None:
            exc = stmt.exc
            name = visitor.dotted(exc.func if isinstance(exc, ast.Call) else exc)
            if name in ("SystemExit", "KeyboardInterrupt", "builtins.SystemExit"):
                found.append(f"{kind}:{exit_code(exc.args if isinstance(exc, ast.Call) else [])}")
            elif name and name.rsplit(".", 1)[-1] in ("SkipTest", "Skipped") and not conditional:
                found.append("toplevel_skip")  # ``raise unittest.SkipTest(...)`` at import: all skipped
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and visitor.dotted(node.func) in EXIT_CALLS:
                via = "os" if visitor.dotted(node.func) in ("os._exit", "os.abort") else "sys"
                if visitor.dotted(node.func) == "pytest.exit":
                    # pytest.exit(reason, returncode=...): only the keyword sets the status
                    code = next((k.value for k in node.keywords if k.arg == "returncode"), None)
                    found.append(f"{kind}:{exit_code([code] if code is not None else [])}")
                else:
                    found.append(f"{kind}:{exit_code(node.args)}")
                if via == "os":
                    found.append(f"{kind}:os_exit")
    return found


_FALLBACK_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w., ]+))", re.M)
_FALLBACK_EXIT = re.compile(
    r"^((?:sys\.exit|os\._exit|exit|quit)\s*\(\s*(?:0|None|False)?\s*\)|raise\s+SystemExit\b(?:\s*\(\s*(?:0|None)?\s*\))?)",
    re.M,
)
_FALLBACK_CALL = re.compile(r"\b([A-Za-z_][\w.]*)\s*\(")


def python_facts(code: str) -> PythonFacts:
    """Facts about ``code``; a fragment that does not parse is scanned with regexes instead."""
    out = PythonFacts()
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        out.facts.append("python_syntax_error")
        for frm, imp in _FALLBACK_IMPORT.findall(code):
            for name in (frm, *imp.split(",")):
                if name.strip():
                    out.facts.append(f"import:{name.strip().split(' ')[0]}")
        out.facts.extend(f"call:{name}()" for name in _FALLBACK_CALL.findall(code))
        for exit_call in _FALLBACK_EXIT.findall(code):
            out.facts.append("toplevel_exit:0")
            if "os._exit" in exit_call:
                out.facts.append("toplevel_exit:os_exit")
        for scheme, host in _URL.findall(code):
            out.facts.append(f"url:{scheme.lower()}://{host.lower()}")
        return out
    visitor = _Visitor(out)
    try:
        visitor.run(tree)
        if len(tree.body) > MAX_TOPLEVEL_STATEMENTS:
            out.facts.append("python_truncated")
        else:
            out.facts.extend(_toplevel_exits(tree.body, visitor))
    except RecursionError:
        out.facts.append("python_too_deep")
    if visitor.verdicts and not visitor.checks:
        out.facts.append("prints_pass_marker")  # a verdict printed by code that checks nothing
    return out
