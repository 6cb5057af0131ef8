"""What Python calls do, with names resolved through the code's imports: the shell text or argv
they run, the code they hand to ``exec``, the files they read, write, move or delete, the
attributes they patch (``monkeypatch.setattr``, ``mock.patch``).

``CallReader`` holds the context a call is read in (import aliases, names assigned a string,
files opened for writing); ``guard.normalize.pycode`` extends it with the handlers for
statements and definitions and walks the tree.
"""

from __future__ import annotations

import ast
import base64
import binascii
import codecs
import posixpath
import re
from dataclasses import dataclass, field

from guard.normalize.forgery import is_printed_verdict
from guard.normalize.pycode_names import (
    CHECKING_CALLS,
    COPY_CALLS,
    EXEC_CALLS,
    FILE_CALLS,
    PATH_METHODS,
    PRINTS,
    SHELL_CALLS,
    TRIVIAL_CALLS,
)
from guard.normalize.pycode_nodes import const_str, mode_op

PATHLIKE = re.compile(r"^(?:/|\.{1,2}/|~/)|^[\w.-]+/[\w./*?-]")
MAX_FACT_ARG = 160


@dataclass
class PythonFacts:
    """What one Python code block does (``guard.normalize.pycode.python_facts``)."""

    facts: list[str] = field(default_factory=list)
    shell: list[str | list[str]] = field(default_factory=list)  # strings or argv lists to run
    python: list[str] = field(default_factory=list)  # code handed to exec/eval
    paths: list[str] = field(default_factory=list)
    # files the code writes: (path, content); "{}" marks an unknown part of the path, content is
    # None when it is computed (write_text(re.sub(...))) and the text when it is a literal
    written: list[tuple[str, str | None]] = field(default_factory=list)
    # file operations: (op, path, source) with op read/list/write/append/delete/move/mode/link,
    # paths as written ("{}" for an unknown part), source the other path of a copy, move or link
    effects: list[tuple[str, str, str | None]] = field(default_factory=list)


class CallReader:
    """Names resolved in context, and what each call does; the statement handlers are
    ``guard.normalize.pycode``'s visitor, a subclass."""

    def __init__(self, out: PythonFacts) -> None:
        self.out = out
        self.aliases: dict[str, str] = {}
        self.strings: dict[str, str] = {}  # simple NAME = "constant" assignments
        self.handles: dict[str, str] = {}  # NAME -> path of a file opened for writing
        self.verdicts = 0  # prints of a pass verdict ("All tests passed")
        self.checks = 0  # asserts, comparisons, raises, test runs: code that could fail a check

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
                module = const_str(node.args[0])
                # __import__("a.b") returns package a; import_module("a.b") returns a.b
                return module.split(".")[0] if module and func == "__import__" else module
            if func in ("getattr",) and len(node.args) >= 2:
                base, attr = self.dotted(node.args[0]), const_str(node.args[1])
                return f"{base}.{attr}" if base and attr else None
            if func:
                first = self.string(node.args[0]) if node.args else None
                return f"{func}({first[:MAX_FACT_ARG]!r})" if first is not None else f"{func}()"
        return None

    def string(self, node: ast.AST) -> str | None:
        """The text of ``node`` when known: a literal, a name assigned a literal, or an f-string,
        ``+`` or ``os.path.join`` of those (unknown parts as ``{}``)."""
        if isinstance(node, ast.Name):
            return self.strings.get(node.id)
        if isinstance(node, ast.JoinedStr) and any(
            isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name) and v.value.id in self.strings
            for v in node.values
        ):
            parts = [
                self.strings[v.value.id]
                if isinstance(v, ast.FormattedValue)
                and isinstance(v.value, ast.Name)
                and v.value.id in self.strings
                else (const_str(v) if not isinstance(v, ast.FormattedValue) else "{}")
                for v in node.values
            ]
            return "".join(p or "" for p in parts)
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Add | ast.Div)
            and (isinstance(node.left, ast.Name) or isinstance(node.right, ast.Name))
        ):
            left, right = self.string(node.left), self.string(node.right)
            if left is not None or right is not None:
                left, right = left if left is not None else "{}", right if right is not None else "{}"
                return posixpath.join(left, right) if isinstance(node.op, ast.Div) else left + right
        return const_str(node)

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
        if name in COPY_CALLS and len(node.args) >= 2:
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

    def visit_Call(self, node: ast.Call) -> None:
        for arg in node.args[:3]:
            if not isinstance(arg, ast.Constant | ast.Name):  # joined paths: os.path.join("/", "x")
                value = const_str(arg)
                if value and PATHLIKE.match(value) and "\n" not in value:
                    self.out.paths.append(value)
        name = self.dotted(node.func)
        if name in PRINTS and node.args and (text := self.string(node.args[0])) and is_printed_verdict(text):
            self.verdicts += 1
        elif name and name.startswith(CHECKING_CALLS):
            self.checks += 1
        if name and name not in TRIVIAL_CALLS:
            args = [s for s in (self.string(a) for a in node.args[:2]) if s is not None]
            rendered = ", ".join(repr(a[:MAX_FACT_ARG]) for a in args)
            self.out.facts.append(f"call:{name}({rendered})")
            self._special_call(name, node)
            self._note_effects(name, node)
        self._note_written(node)

    def _note_effects(self, name: str, node: ast.Call) -> None:
        """File operations, by the resolved name of the function called (``guard.normalize.effects``
        has the shell's; this is Python's: ``open`` modes, ``os``, ``shutil``, ``pathlib``)."""
        args = node.args
        first = self.string(args[0]) if args else None
        second = self.string(args[1]) if len(args) > 1 else None
        effects = self.out.effects
        if name in ("open", "io.open", "codecs.open", "builtins.open", "os.open") and first is not None:
            mode = self._mode_of(node, 1)
            effects.append((mode_op(mode), first, None))
            return
        simple = name.rsplit(".", 1)[-1]
        op = FILE_CALLS.get(name)
        if op is not None and first is not None:
            if op in ("copy", "move", "link"):
                if second is None:
                    return
                source, target = first, second
                if op == "move":
                    effects.append(("move", source, None))
                    effects.append(("write", target, source))
                elif op == "link":
                    effects.append(("link", target, source))
                else:
                    tree = "*" if name == "shutil.copytree" else ""
                    effects.append((f"read{tree}", source, None))
                    effects.append((f"write{tree}", target, source))
            else:
                effects.append((op, first, None))
            return
        # pathlib: Path(P).write_text(...), Path(P).unlink(), Path(P).rename(Q), Path(P).open("w")
        func = node.func
        if not isinstance(func, ast.Attribute) or simple not in PATH_METHODS:
            return
        receiver = self.string(func.value)
        if receiver is None:
            return
        method = PATH_METHODS[simple]
        if simple == "open":
            effects.append((mode_op(self._mode_of(node, 0)), receiver, None))
        elif method in ("move", "link"):
            if first is None:
                return
            if method == "move":
                effects.append(("move", receiver, None))
                effects.append(("write", first, receiver))
            else:
                effects.append(("link", receiver, first))
        else:
            effects.append((method, receiver, None))

    def _mode_of(self, node: ast.Call, position: int) -> str:
        mode_node = node.args[position] if len(node.args) > position else None
        for kw in node.keywords:
            if kw.arg in ("mode", "flags"):
                mode_node = kw.value
        if mode_node is None:
            return "r"
        text = self.string(mode_node)
        if text is not None:
            return text
        flags = ast.unparse(mode_node) if isinstance(mode_node, ast.AST) else ""
        return (
            "w" if any(f in flags for f in ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")) else "r"
        )

    def _special_call(self, name: str, node: ast.Call) -> None:
        first = node.args[0] if node.args else None
        if name in SHELL_CALLS and first is not None:
            if isinstance(first, ast.List | ast.Tuple):
                argv = [self.string(e) for e in first.elts]
                if argv and all(a is not None for a in argv):
                    self.out.shell.append([a for a in argv if a is not None])
            elif (text := self._decoded(first)) is not None:  # also base64/hex-encoded commands
                if name.startswith("os.exec") or name.startswith("os.spawn") or "exec" in name:
                    self.out.shell.append([text, *[self.string(a) or "" for a in node.args[1:]]])
                else:
                    self.out.shell.append(text)
        elif name in EXEC_CALLS and first is not None:
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
        elif name in ("setattr", "builtins.setattr", "delattr", "builtins.delattr") and len(node.args) >= 2:
            base, attr = self.dotted(node.args[0]), self.string(node.args[1])
            if base and attr:
                self.out.facts.append(f"assign:{base}.{attr}")
                self.out.facts.append(f"assign_attr:{attr}")
            elif base:
                # the name is computed (a loop over names read from a file, a join): which attribute
                # cannot be told, what is patched can
                self.out.facts.append(f"assign_dynamic:{base}")
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
