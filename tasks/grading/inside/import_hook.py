"""Remote import, TRUSTED side: which workspace names the hidden tests get as proxies, and the import
hook that hands them out.

``install`` wraps ``builtins.__import__`` (and ``importlib.import_module``) so that imports written
in the hidden tests (and only those) of the top-level names found in /workspace (or
/workspace/src) get ``grading_proxies.RemoteModule`` proxies, even when the image ships a package
of the same name or pytest has imported it already: the workspace's copy always wins for the tests,
and the proxies never enter ``sys.modules``, so pytest's own imports never see one.

Runs inside the sandbox image: standard library only.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import os
import sys
import types
from typing import TYPE_CHECKING

import grading_proxies as proxies
from grading_proxies import RemoteModule

if TYPE_CHECKING:
    from grading_remote import Client

_EXCLUDED_NAMES = {"tests", "test", "conftest", "setup", "sitecustomize", "usercustomize", "__pycache__"}
_NEVER_SERVED = {
    *("pytest", "_pytest", "rlguard_checks", "grading_wire", "grading_worker"),
    *("grading_remote", "grading_proxies", "grading_import_hook"),
}

def import_roots(workspace: str) -> list:
    """Where workspace modules are imported from: ``src/`` first when the project uses that layout."""
    src = os.path.join(workspace, "src")
    return [src, workspace] if os.path.isdir(src) else [workspace]


def served_names(workspace: str, pristine: list | None = None) -> set:
    """Top-level module and package names of ``workspace`` the hidden tests get as proxies.

    Tests, conftest and setup files are never served; neither are the standard library, pytest
    and this grader's own modules: a workspace ``statistics.py`` or ``rlguard_checks.py`` must not
    answer a test that computes or checks expected values with them. A name the image also ships
    (``packaging``, ``pluggy``) is served, the workspace's copy winning, only when the pristine
    workspace has it too (``pristine``): then it is the code under test, not a test's helper.
    """
    names = set()
    for root in import_roots(workspace):
        try:
            entries = os.listdir(root)
        except OSError:
            continue
        names |= _names_in(root, entries)
    names -= _NEVER_SERVED | set(sys.stdlib_module_names)
    if pristine is not None:
        kept = set(pristine)
        names = {name for name in names if name in kept or importlib.util.find_spec(name) is None}
    return names


def _names_in(root: str, entries: list) -> set:
    names = set()
    for entry in entries:
        path = os.path.join(root, entry)
        name = entry[:-3] if entry.endswith(".py") and os.path.isfile(path) else entry
        if name == entry and not os.path.isdir(path):
            continue
        if name.isidentifier() and name not in _EXCLUDED_NAMES and not name.startswith("test_"):
            names.add(name)
    return names


_SERVED: dict = {}  # name -> RemoteModule; never in sys.modules


def _served_module(name: str) -> RemoteModule:
    module = _SERVED.get(name)
    if module is None:
        module = RemoteModule(name)
        module.__path__ = []  # a package, so ``import pkg.sub`` finds its submodules here
        client = proxies.current_client()
        if client is not None and client.allowed:  # after collection an import error shows at import
            client.request("import", name=name)
        _SERVED[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            types.ModuleType.__setattr__(_served_module(parent), child, module)
    return module


def _submodules(roots: list, name: str, fromlist) -> list:
    """The names in ``from name import a, b`` that are submodules in the workspace (imported too)."""
    found = []
    for item in fromlist or ():
        if not isinstance(item, str) or not item.isidentifier():
            continue
        for root in roots:
            base = os.path.join(root, *name.split("."), item)
            if os.path.isdir(base) or os.path.isfile(base + ".py"):
                found.append(f"{name}.{item}")
                break
    return found


def _make_import(original, names: set, tests_prefix: str, roots: list):
    def __import__(name, globals=None, locals=None, fromlist=(), level=0):
        filename = globals.get("__file__") if isinstance(globals, dict) else None
        from_tests = isinstance(filename, str) and os.path.realpath(filename).startswith(tests_prefix)
        if level == 0 and from_tests and name.partition(".")[0] in names:
            parts = name.split(".")
            for end in range(1, len(parts) + 1):
                module = _served_module(".".join(parts[:end]))
            for submodule in _submodules(roots, name, fromlist):
                _served_module(submodule)
            return module if fromlist else _SERVED[parts[0]]
        return original(name, globals, locals, fromlist, level)

    __import__.rlguard_served = names
    return __import__


def _make_import_module(original, names: set):
    def import_module(name, package=None):
        served = isinstance(name, str) and not name.startswith(".") and name.partition(".")[0] in names
        if served and proxies.from_tests(sys._getframe(1)):
            parts = name.split(".")
            for end in range(1, len(parts) + 1):
                module = _served_module(".".join(parts[:end]))
            return module
        return original(name, package)

    return import_module


def install(client: Client | None, workspace: str, tests_dir: str, pristine: list | None = None) -> set:
    """Serve ``workspace``'s top-level modules to the tests in ``tests_dir`` through ``client`` (None:
    collection only, every use fails); the names served."""
    names = served_names(workspace, pristine)
    tests_prefix = os.path.join(os.path.realpath(tests_dir), "")
    proxies.bind(client, tests_prefix)
    if client is not None:
        client.test_modules = (tests_prefix,)
    builtins.__import__ = _make_import(builtins.__import__, names, tests_prefix, import_roots(workspace))
    importlib.import_module = _make_import_module(importlib.import_module, names)
    return names
