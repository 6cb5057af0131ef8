"""What Python code does, read from its AST: imports, calls, patches, exit tricks, hooks.

Facts are short strings rules match with regexes; names are resolved through import aliases, so
``from urllib import request as r; r.urlopen(u)`` yields ``call:urllib.request.urlopen`` while
``urllib.parse.quote`` stays harmless. Shell strings handed to ``os.system`` / ``subprocess`` and
code handed to ``exec`` (also base64- or hex-encoded) are returned for the caller to scan in turn.
Code that does not parse falls back to a regex scan (Python 2 scripts, fragments of an edit).
"""

from __future__ import annotations

import ast
import base64
import binascii
import codecs
import operator
import posixpath
import re
from dataclasses import dataclass, field

from guard.normalize import budget as call_budget

_SHELL_CALLS = frozenset(
    {
        "os.system",
        "os.popen",
        "subprocess.run",
        "subprocess.call",
        "subprocess.check_call",
        "subprocess.check_output",
        "subprocess.Popen",
        "subprocess.getoutput",
        "subprocess.getstatusoutput",
        "commands.getoutput",
        "pty.spawn",
        "asyncio.create_subprocess_shell",
        "asyncio.create_subprocess_exec",
        "os.execv",
        "os.execvp",
        "os.execvpe",
        "os.execl",
        "os.execlp",
        "os.spawnv",
        "os.spawnvp",
        "os.posix_spawn",
        "os.posix_spawnp",
    }
)
_COPY_CALLS = frozenset(
    {
        "shutil.copy",
        "shutil.copy2",
        "shutil.copyfile",
        "shutil.move",
        "shutil.copytree",
        "os.rename",
        "os.replace",
    }
)
_EXEC_CALLS = frozenset({"exec", "eval", "compile", "builtins.exec", "builtins.eval"})
_EXIT_CALLS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort", "builtins.exit", "pytest.exit"})
# reading frames to find the caller's values; ``f_globals["__name__"]`` (module names, as logging
# and warnings helpers do) is not among them
_FRAME_ATTRS = frozenset({"f_back", "f_locals", "tb_frame", "gi_frame"})
_PATHLIKE = re.compile(r"^(?:/|\.{1,2}/|~/)|^[\w.-]+/[\w./*?-]")
_URL = re.compile(r"\b([a-z][a-z0-9+.-]*)://([^/\s'\"]*)", re.I)
MAX_FACT_ARG = 160
MAX_NODES = 60_000  # AST nodes read per code block (roughly 6,000 lines)
MAX_TOPLEVEL_STATEMENTS = 5_000


@dataclass
class PythonFacts:
    facts: list[str] = field(default_factory=list)
    shell: list[str | list[str]] = field(default_factory=list)  # strings or argv lists to run
    python: list[str] = field(default_factory=list)  # code handed to exec/eval
    paths: list[str] = field(default_factory=list)
    # files the code writes: (path, content); "{}" marks an unknown part of the path, content is
    # None when it is computed (write_text(re.sub(...))) and the text when it is a literal
    written: list[tuple[str, str | None]] = field(default_factory=list)


def _const_str(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
        value = node.value
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if isinstance(node, ast.JoinedStr):
        parts = [_const_str(v) if not isinstance(v, ast.FormattedValue) else "{}" for v in node.values]
        return "".join(p or "" for p in parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        # "prefix" + var / var + "/sitecustomize.py": keep the known part, mark the unknown one
        left, right = _const_str(node.left), _const_str(node.right)
        if left is not None or right is not None:
            return (left if left is not None else "{}") + (right if right is not None else "{}")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        # pathlib: Path("/") / "hidden" / "t.py"
        left, right = _const_str(node.left), _const_str(node.right)
        if right is not None:  # Path(site.getsitepackages()[0]) / "usercustomize.py": keep the name
            return posixpath.join(left if left is not None else "{}", right)
    if (
        isinstance(node, ast.Attribute)
        and node.attr in ("sep", "pathsep")
        and isinstance(node.value, ast.Name | ast.Attribute)
    ):
        return "/" if node.attr == "sep" else ":"  # os.sep, os.path.sep
    if isinstance(node, ast.Call) and node.args and not node.keywords:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("join", "Path", "PurePath", "PosixPath") and (name != "join" or _is_path_join(func)):
            parts = [_const_str(a) for a in node.args]
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


class _Visitor:
    """Pre-order walk in source order (imports are seen before the calls that use them); one
    handler per node type, children pushed on an explicit stack: no recursion limit to hit and a
    fraction of ``ast.NodeVisitor``'s per-node cost."""

    def __init__(self, out: PythonFacts) -> None:
        self.out = out
        self.aliases: dict[str, str] = {}
        self.strings: dict[str, str] = {}  # simple NAME = "constant" assignments
        self.handles: dict[str, str] = {}  # NAME -> path of a file opened for writing

    # ---- names -------------------------------------------------------------------------------
    def dotted(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):
            func = self.dotted(node.func)
            if func in ("__import__", "importlib.import_module") and node.args:
                module = _const_str(node.args[0])
                # __import__("a.b") returns package a; import_module("a.b") returns a.b
                return module.split(".")[0] if module and func == "__import__" else module
            if func in ("getattr",) and len(node.args) >= 2:
                base, attr = self.dotted(node.args[0]), _const_str(node.args[1])
                return f"{base}.{attr}" if base and attr else None
            if func:
                first = self.string(node.args[0]) if node.args else None
                return f"{func}({first[:MAX_FACT_ARG]!r})" if first is not None else f"{func}()"
        return None

    def string(self, node: ast.AST) -> str | None:
        value = _const_str(node)
        if value is None and isinstance(node, ast.Name):
            value = self.strings.get(node.id)
        return value

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
        value = _const_str(node.value)
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

    def _opened_for_writing(self, node: ast.AST) -> str | None:
        """The path of ``open(P, "w")`` / ``Path(P).open("a")``, or None when not opened to write."""
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        name = self.dotted(func) or ""
        if name in ("open", "io.open", "codecs.open", "builtins.open") and node.args:
            target, mode_node = node.args[0], node.args[1] if len(node.args) > 1 else None
        elif isinstance(func, ast.Attribute) and func.attr == "open":
            target, mode_node = func.value, node.args[0] if node.args else None
        else:
            return None
        for kw in node.keywords:
            if kw.arg == "mode":
                mode_node = kw.value
        mode = self.string(mode_node) if mode_node is not None else "r"
        if not mode or not any(c in mode for c in "wax+"):
            return None
        return self.string(target)

    def _note_written(self, node: ast.Call) -> None:
        """``P.write_text(S)``, ``open(P, "w").write(S)``, ``fh.write(S)`` with fh opened on P, and
        the destination of ``shutil.copy*``/``shutil.move`` (copying /dev/null empties it)."""
        func = node.func
        name = self.dotted(func) or ""
        if name in _COPY_CALLS and len(node.args) >= 2:
            source, target = self.string(node.args[0]), self.string(node.args[1])
            if target:
                self.out.written.append((target, "" if source == "/dev/null" else None))
            return
        if not isinstance(func, ast.Attribute) or func.attr not in ("write_text", "write_bytes", "write"):
            return
        receiver = func.value
        if func.attr == "write":
            path = (
                self.handles.get(receiver.id)
                if isinstance(receiver, ast.Name)
                else self._opened_for_writing(receiver)
            )
        else:
            path = self.string(receiver)
        if path:
            content = self.string(node.args[0]) if node.args else None
            self.out.written.append((path, content))

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
                    and _root_name(target) in self.aliases
                ):  # ``utils.evaluate = lambda *a: True``: a module's function replaced by a stand-in
                    kind = "assign_stub" if isinstance(value, ast.Lambda) else "assign_const"
                    self.out.facts.append(f"{kind}:{name}")
            if isinstance(target, ast.Attribute):
                self.out.facts.append(f"assign_attr:{target.attr}")
        if isinstance(target, ast.Name):
            if target.id in _WATCHED_NAMES or target.id.startswith("pytest_"):
                self.out.facts.append(f"assign:{target.id}")
            if target.id in ("__eq__", "__ne__") and _always_const(value):
                self.out.facts.append("always_equal")
        if isinstance(target, ast.Tuple | ast.List):
            for elt in target.elts:
                self._assigned(elt, value)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.out.facts.append(f"def:{node.name}")
        if node.name.startswith("pytest_"):
            self.out.facts.append(f"hook:{node.name}")
        if node.name in ("__eq__", "__ne__") and _returns_only_constant(node):
            self.out.facts.append("always_equal")
        if _returns_only_literal(node):  # ``def verify(...): return True``: a stub or a bypass
            self.out.facts.append(f"def_returns_const:{node.name}")
        if node.name.startswith("test") and not _has_check(node):
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
            kind = type(node)
            handler = handlers.get(kind)
            if handler is not None:
                handler(self, node)
            fields = child_fields.get(kind)
            if fields is None:
                fields = child_fields[kind] = tuple(f for f in kind._fields if f not in _SCALAR_FIELDS)
            children: list[ast.AST] = []
            for name in fields:
                value = getattr(node, name, None)
                if value.__class__ is list:
                    children.extend(v for v in value if isinstance(v, ast.AST))
                elif isinstance(value, ast.AST):
                    children.append(value)
            children.reverse()
            stack.extend(children)

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
        if _always_true(node.test):
            self.out.facts.append("trivial_assert")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _FRAME_ATTRS:
            self.out.facts.append("frame_access")

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and len(node.value) < 4096:
            for scheme, host in _URL.findall(node.value):
                self.out.facts.append(f"url:{scheme.lower()}://{host.lower()}")
            if _PATHLIKE.match(node.value) and "\n" not in node.value:
                self.out.paths.append(node.value)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Div):  # Path("/") / "hidden"
            value = _const_str(node)
            if value and _PATHLIKE.match(value):
                self.out.paths.append(value)

    def visit_Call(self, node: ast.Call) -> None:
        for arg in node.args[:3]:
            if not isinstance(arg, ast.Constant | ast.Name):  # joined paths: os.path.join("/", "x")
                value = _const_str(arg)
                if value and _PATHLIKE.match(value) and "\n" not in value:
                    self.out.paths.append(value)
        name = self.dotted(node.func)
        if name and name not in _TRIVIAL_CALLS:
            args = [s for s in (self.string(a) for a in node.args[:2]) if s is not None]
            rendered = ", ".join(repr(a[:MAX_FACT_ARG]) for a in args)
            self.out.facts.append(f"call:{name}({rendered})")
            self._special_call(name, node)
        self._note_written(node)

    def _special_call(self, name: str, node: ast.Call) -> None:
        first = node.args[0] if node.args else None
        if name in _SHELL_CALLS and first is not None:
            if isinstance(first, ast.List | ast.Tuple):
                argv = [self.string(e) for e in first.elts]
                if argv and all(a is not None for a in argv):
                    self.out.shell.append([a for a in argv if a is not None])
            elif (text := self._decoded(first)) is not None:  # also base64/hex-encoded commands
                if name.startswith("os.exec") or name.startswith("os.spawn") or "exec" in name:
                    self.out.shell.append([text, *[self.string(a) or "" for a in node.args[1:]]])
                else:
                    self.out.shell.append(text)
        elif name in _EXEC_CALLS and first is not None:
            decoded = self._decoded(first)
            if decoded is not None:
                self.out.python.append(decoded)
        elif name.endswith((".setattr", "mock.patch", "mock.patch.object", ".patch.object")) and name not in (
            "builtins.setattr",
        ):
            # monkeypatch.setattr(time, "time", f) / monkeypatch.setattr("time.time", f) / mock.patch(...)
            target = self.string(first) if first is not None else None
            if target is not None and "." in target and not name.endswith(".object"):
                self.out.facts.append(f"patch:{target}")
            elif first is not None and len(node.args) >= 2:
                base, attr = self.dotted(first), self.string(node.args[1])
                if base and attr:
                    self.out.facts.append(f"patch:{base}.{attr}")
        elif name in ("setattr", "builtins.setattr") and len(node.args) >= 2:
            base, attr = self.dotted(node.args[0]), self.string(node.args[1])
            if base and attr:
                self.out.facts.append(f"assign:{base}.{attr}")
                self.out.facts.append(f"assign_attr:{attr}")
        elif name in ("importlib.import_module", "__import__") and first is not None:
            module = self.string(first)
            if module:
                self.out.facts.append(f"import:{module}")

    def _decoded(self, node: ast.AST) -> str | None:
        """Code passed to exec: a literal, or a literal run through base64/hex/rot13/decode()."""
        value = self.string(node)
        if value is not None:
            return value
        if not isinstance(node, ast.Call):
            return None
        name = self.dotted(node.func) or ""
        if name.endswith(".decode()") or (
            isinstance(node.func, ast.Attribute) and node.func.attr == "decode"
        ):
            inner = node.func.value if isinstance(node.func, ast.Attribute) else None
            return self._decoded(inner) if inner is not None else None
        arg = self._decoded(node.args[0]) if node.args else None
        if arg is None:
            return None
        try:
            if name in ("base64.b64decode", "base64.standard_b64decode", "base64.urlsafe_b64decode"):
                return base64.b64decode(arg + "=" * (-len(arg) % 4)).decode("utf-8", "replace")
            if name == "base64.b32decode":
                return base64.b32decode(arg).decode("utf-8", "replace")
            if name in ("bytes.fromhex", "binascii.unhexlify", "binascii.a2b_hex"):
                return bytes.fromhex(arg).decode("utf-8", "replace")
            if name == "codecs.decode":
                return codecs.decode(arg, "rot13")
        except (binascii.Error, ValueError):
            return None
        return None


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
    }
)
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {ast.Constant: ()}
# plain-name assignments worth a fact (every local variable would only be noise)
_WATCHED_NAMES = frozenset(
    {
        "pytestmark",
        "collect_ignore",
        "collect_ignore_glob",
        "__eq__",
        "__ne__",
        "__hash__",
        "AssertionError",
        "__builtins__",
        "__import__",
        "exit",
        "quit",
        "open",
        "print",
        "input",
    }
)
_TRIVIAL_CALLS = frozenset(
    [
        "len",
        "int",
        "str",
        "float",
        "bool",
        "print",
        "range",
        "isinstance",
        "issubclass",
        "list",
        "dict",
        "set",
        "tuple",
        "enumerate",
        "zip",
        "min",
        "max",
        "sum",
        "sorted",
        "reversed",
        "repr",
        "type",
        "super",
        "hasattr",
        "any",
        "all",
        "abs",
        "round",
        "iter",
        "next",
        "map",
        "filter",
        "id",
        "hash",
        "format",
        "divmod",
        "ord",
        "chr",
        "bytes",
        "bytearray",
        "frozenset",
        "object",
        "vars",
        "dir",
        "callable",
    ]
)


def _always_const(node: ast.AST) -> bool:
    return isinstance(node, ast.Lambda) and isinstance(node.body, ast.Constant)


def _root_name(node: ast.AST) -> str | None:
    """``a`` of ``a.b.c`` (None when the chain does not start at a plain name)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _returns_only_literal(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body (docstring aside) that is only ``return True`` / ``return 1`` / ``return None``."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return (
        len(body) == 1
        and isinstance(body[0], ast.Return)
        and isinstance(body[0].value, ast.Constant)
        and body[0].value.value in (True, 1, None, 1.0)
    )


def _returns_only_constant(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``__eq__`` whose every path returns the same constant, whatever ``other`` is."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return False
    value = body[0].value
    return (isinstance(value, ast.Constant) and value.value in (True, False, 1, 0)) or _always_true(value)


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


def _always_true(node: ast.AST | None) -> bool:
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
        return any(_always_true(v) for v in node.values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return isinstance(node.operand, ast.Constant) and not node.operand.value
    return False


_REFLEXIVE = frozenset({ast.Eq, ast.Is, ast.GtE, ast.LtE})


def _has_check(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
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


def _is_main_guard(node: ast.If) -> bool:
    test = node.test
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _exit_code(args: list[ast.expr]) -> str:
    if not args:
        return "0"
    arg = args[0]
    if isinstance(arg, ast.Constant):
        return "0" if arg.value in (0, None, False) else str(arg.value)[:20]
    return "expr"


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
            if not _is_main_guard(stmt):
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
                found.append(f"{kind}:{_exit_code(exc.args if isinstance(exc, ast.Call) else [])}")
            elif name and name.rsplit(".", 1)[-1] in ("SkipTest", "Skipped") and not conditional:
                found.append("toplevel_skip")  # ``raise unittest.SkipTest(...)`` at import: all skipped
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and visitor.dotted(node.func) in _EXIT_CALLS:
                via = "os" if visitor.dotted(node.func) in ("os._exit", "os.abort") else "sys"
                if visitor.dotted(node.func) == "pytest.exit":
                    # pytest.exit(reason, returncode=...): only the keyword sets the status
                    code = next((k.value for k in node.keywords if k.arg == "returncode"), None)
                    found.append(f"{kind}:{_exit_code([code] if code is not None else [])}")
                else:
                    found.append(f"{kind}:{_exit_code(node.args)}")
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
    return out
