"""Remote import, TRUSTED side: what a hidden test holds of workspace code, proxies whose every use
is a request to the untrusted worker (``grading_remote.Client``).

* ``RemoteModule``: a workspace module, served by ``grading_import_hook`` and never in
  ``sys.modules``. Before ``allow()`` (i.e. during collection) nothing reaches the worker: module
  attributes are lazy path references (``from pkg import func`` at module level works) and any
  use fails; ``resolve_lazy`` turns the stable ones (exception classes, immutable values) into
  what they name once collection is over.
* ``Remote``: a workspace object living in the worker. Comparisons: handle against handle is the
  workspace's own operator; handle against a value of the test compares the handle's plain value
  (a namedtuple's tuple, an IntEnum's int) HERE, and an object that overrides ``==`` has none, so it
  compares by identity: the worker never learns what it is compared to, and an always-equal object
  never equals an expected value.
* ``RemoteSubclass``: a test's class deriving from a workspace class; each instance has a twin in
  the worker.
* A crash, exit, hang (per-call timeout) or protocol violation of the worker raises a
  ``RemoteFailure`` (a ``BaseException``: ``pytest.raises(Exception)`` cannot swallow it), fails
  that test, and the next use starts a fresh worker; handles of the old one are dead.

Runs inside the sandbox image: standard library only.
"""

from __future__ import annotations

import decimal
import fractions
import operator
import os
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grading_remote import Client

_EXPOSED_DUNDERS = ("__name__", "__qualname__", "__doc__")
# Dunders a test may read from a workspace object (``getattr(Version, "__lt__")``, ``obj.__dict__``)
# once collection is over; others (``__wrapped__``, ``__code__``...) are what pytest and inspect probe.
_READABLE_DUNDERS = frozenset(
    [*_EXPOSED_DUNDERS, "__module__", "__dict__", "__all__", "__version__", "__slots__", "__init__"]
    + [f"__{n}__" for n in ("eq", "ne", "lt", "le", "gt", "ge", "hash", "str", "repr", "bool", "len")]
    + [f"__{n}__" for n in ("iter", "next", "contains", "call", "getitem", "setitem", "delitem")]
    + [f"__{n}__" for n in ("enter", "exit", "add", "sub", "mul", "truediv", "floordiv", "mod")]
)
_ARITHMETIC = "add sub mul truediv floordiv mod pow and_ or_ xor lshift rshift matmul".split()  # noqa: SIM905


class RemoteFailure(BaseException):
    """The workspace worker crashed, exited, hung or broke the protocol: the test fails."""


class RemoteCrash(RemoteFailure):
    pass


class RemoteTimeout(RemoteFailure):
    pass


class RemoteProtocolError(RemoteFailure):
    pass


class RemoteUnavailable(RuntimeError):
    """Workspace code was used before collection finished (it may not run yet)."""


class Remote:
    """A workspace object living in the worker: every use is a request.

    ``==`` and the other comparisons against a handle run in the worker (the workspace's own
    operator); against a test's value they compare the handle's plain value here (see the module
    docstring). Hashing, arithmetic, ``with``, ``next``, ``isinstance`` and ``issubclass`` go to
    the worker; ``repr`` is local (pytest's failure messages must not run workspace code).
    """

    __slots__ = ("_rlg_client", "_rlg_ref", "_rlg_type")

    def __init__(self, client: Client, ref: tuple, type_name: str) -> None:
        object.__setattr__(self, "_rlg_client", client)
        object.__setattr__(self, "_rlg_ref", ref)
        object.__setattr__(self, "_rlg_type", type_name)

    def __getattribute__(self, name: str):
        # ``getattr(Version, "__lt__")`` in a test means the workspace's method, not this proxy's.
        test_reads = name[:2] == "__" and name in _READABLE_DUNDERS and from_tests(sys._getframe(1))
        if test_reads and object.__getattribute__(self, "_rlg_allowed")():
            return object.__getattribute__(self, "_rlg")("getattr", name=name)
        return object.__getattribute__(self, name)

    def _rlg(self, op: str, **fields):
        client = object.__getattribute__(self, "_rlg_client")
        if client is None:
            raise RemoteUnavailable("workspace code cannot run while hidden tests are collected")
        return client.request(op, object.__getattribute__(self, "_rlg_ref"), **fields)

    def _rlg_allowed(self) -> bool:
        client = object.__getattribute__(self, "_rlg_client")
        return client is not None and client.allowed

    def __getattr__(self, name: str):
        if name.startswith("_rlg_") or (name.startswith("__") and name not in _READABLE_DUNDERS):
            raise AttributeError(name)
        if not self._rlg_allowed():
            raise AttributeError(name)  # pytest probes objects while collecting: nothing runs then
        return self._rlg("getattr", name=name)

    def __setattr__(self, name: str, value) -> None:
        self._rlg("setattr", name=name, value=value)

    def __delattr__(self, name: str) -> None:
        self._rlg("delattr", name=name)

    def __call__(self, *args, **kwargs):
        return self._rlg("call", args=list(args), kwargs=kwargs)

    def __getitem__(self, key):
        return self._rlg("getitem", key=key)

    def __setitem__(self, key, value) -> None:
        self._rlg("setitem", key=key, value=value)

    def __delitem__(self, key) -> None:
        self._rlg("delitem", key=key)

    def __contains__(self, value) -> bool:
        return _exact(self._rlg("contains", value=value), bool, "in")

    def __len__(self) -> int:
        return _exact(self._rlg("len"), int, "len()")

    def __bool__(self) -> bool:
        return _exact(self._rlg("bool"), bool, "bool()")

    def __iter__(self):
        return self._rlg("iter")  # a handle to the worker's iterator: items come one at a time

    def __next__(self):
        answer = self._rlg("next")
        if type(answer) is not list or len(answer) != 2 or type(answer[0]) is not bool:
            raise TypeError("next() of a workspace object gave a malformed answer")
        if not answer[0]:
            raise StopIteration
        return answer[1]

    def __enter__(self):
        return self._rlg("enter")

    def __exit__(self, exc_type, exc, traceback) -> bool:
        return self._rlg("exit", args=[exc_type, exc, None]) is True

    def __hash__(self) -> int:
        if not self._rlg_allowed():
            return object.__hash__(self)
        return _exact(self._rlg("hash"), int, "hash()")

    def __instancecheck__(self, instance) -> bool:
        return _exact(self._rlg("isinstance", value=instance), bool, "isinstance()")

    def __subclasscheck__(self, subclass) -> bool:
        return _exact(self._rlg("issubclass", value=subclass), bool, "issubclass()")

    def __mro_entries__(self, bases):
        """``class Mine(pkg.Base)`` in a test: a local class whose instances pair with worker ones."""
        return (_subclass_base(self),)

    def _rlg_compare(self, name: str, other):
        if not self._rlg_allowed():
            return NotImplemented
        if isinstance(other, Remote):
            return self._rlg("binop", name=name, value=other)
        try:
            mine = self._rlg("value")
        except TypeError:  # no plain value: identity decides (Python's default)
            return NotImplemented
        return getattr(operator, name)(mine, other)

    def __eq__(self, other):
        return self._rlg_compare("eq", other)

    def __ne__(self, other):
        return self._rlg_compare("ne", other)

    def __lt__(self, other):
        return self._rlg_compare("lt", other)

    def __le__(self, other):
        return self._rlg_compare("le", other)

    def __gt__(self, other):
        return self._rlg_compare("gt", other)

    def __ge__(self, other):
        return self._rlg_compare("ge", other)

    def __str__(self) -> str:
        return _exact(self._rlg("str"), str, "str()")

    def __repr__(self) -> str:
        # ``repr(obj)`` written in a test is the workspace's; pytest's failure messages stay local.
        if self._rlg_allowed() and from_tests(sys._getframe(1)):
            return _exact(self._rlg("repr"), str, "repr()")
        ref = object.__getattribute__(self, "_rlg_ref")
        where = ".".join([ref[1], *ref[2]]) if ref[0] == "p" else f"#{ref[2]}"
        return f"<remote {object.__getattribute__(self, '_rlg_type')} {where}>"


def from_tests(frame: types.FrameType | None) -> bool:
    """True when ``frame`` runs code of a hidden test file (not pytest's, not this module's)."""
    if frame is None:
        return False
    filename = frame.f_code.co_filename
    known = _IN_TESTS.get(filename)
    if known is None:
        known = _IN_TESTS[filename] = os.path.realpath(filename).startswith(_TESTS_PREFIX[0])
    return known


_IN_TESTS: dict = {}


def resolve_lazy(value: object) -> object:
    """A lazy reference made during collection, as what it names when that is stable across workers.

    ``from pkg import InvalidVersion`` at module level must be a real class for ``pytest.raises``;
    a constant is a copy at import time in plain Python too. Anything else stays a lazy reference
    (re-resolved on use, so it survives a worker restart); so does anything that fails to resolve.
    """
    if not isinstance(value, Remote):
        return value
    ref = object.__getattribute__(value, "_rlg_ref")
    if ref[0] != "p" or not ref[2]:
        return value
    try:
        resolved = _CLIENT[0].request("getattr", ("p", ref[1], tuple(ref[2][:-1])), name=ref[2][-1])
    except (Exception, RemoteFailure):  # a broken workspace fails the tests that use it, not collection
        return value
    stable = (isinstance(resolved, type) and issubclass(resolved, BaseException)) or _immutable(resolved)
    return resolved if stable else value


_IMMUTABLE = (bool, int, float, str, bytes, complex, decimal.Decimal, fractions.Fraction)


def _immutable(value) -> bool:
    if type(value) in (tuple, frozenset):
        return all(_immutable(item) for item in value)
    return value is None or type(value) in _IMMUTABLE


def _arithmetic(name: str, reflected: bool):
    def method(self, other):
        return self._rlg("binop", name=name, value=other, reflected=reflected)

    method.__name__ = f"__{'r' if reflected else ''}{name.rstrip('_')}__"
    return method


for _name in _ARITHMETIC:
    setattr(Remote, f"__{_name.rstrip('_')}__", _arithmetic(_name, False))
    setattr(Remote, f"__r{_name.rstrip('_')}__", _arithmetic(_name, True))


def _exact(value, kind: type, what: str):
    if type(value) is not kind:
        raise TypeError(f"{what} of a workspace object gave {type(value).__name__}, not {kind.__name__}")
    return value


_NOT_OVERRIDDEN = frozenset(
    (
        *("__init__", "__new__", "__getattr__", "__getattribute__", "__setattr__", "__delattr__"),
        *("__del__", "__init_subclass__", "__class_getitem__", "__dict__", "__weakref__", "__module__"),
        *("__qualname__", "__doc__", "__slots__", "__firstlineno__", "__static_attributes__", "_rlg_base"),
    )
)


def overrides(cls: type) -> tuple:
    """(methods, other attributes) a test's class defines over its workspace base."""
    methods: dict = {}
    others: dict = {}
    for klass in cls.__mro__:
        if klass is RemoteSubclass or "_rlg_base" in vars(klass):
            break
        for name, value in vars(klass).items():
            if name in _NOT_OVERRIDDEN or name in methods or name in others:
                continue
            if isinstance(value, types.FunctionType):
                methods[name] = None
            elif not name.startswith("__"):
                others[name] = None
    return list(methods), list(others)


class RemoteSubclass:
    """A test's class deriving from a workspace class: each instance has a twin in the worker.

    The twin is an instance of a class the worker derives from the real workspace class, whose
    methods and attributes that the test's class overrides call back here; everything else (the
    base's methods, ``super()`` calls, attributes the workspace code sets) runs on the twin. The
    twin goes wherever the test passes the instance, and comes back as this very object.
    """

    def __new__(cls, *args, **kwargs):
        self = object.__new__(cls)
        client = _CLIENT[0]
        base = _subclass_root(cls)
        methods, others = overrides(cls)
        remote = client.request(
            "subclass",
            object.__getattribute__(base._rlg_base, "_rlg_ref"),
            name=cls.__name__,
            methods=methods,
            others=others,
            local=self,
        )
        object.__setattr__(self, "_rlg_remote", remote)
        if base._rlg_inherited is None:  # the base's methods, so ``super().method()`` finds them
            base._rlg_inherited = _exact(remote._rlg("methods"), list, "methods")
            for name in base._rlg_inherited:
                if isinstance(name, str) and name.isidentifier() and name not in vars(base):
                    setattr(base, name, _base_method(name))
        return self

    def __init__(self, *args, **kwargs) -> None:
        """The workspace base's ``__init__`` on the twin (``super().__init__(...)`` lands here)."""
        vars(self)["_rlg_remote"]._rlg("init", args=list(args), kwargs=kwargs)

    def __getattr__(self, name: str):
        remote = vars(self).get("_rlg_remote")
        if remote is None or name.startswith("_rlg_"):
            raise AttributeError(name)
        return remote._rlg("getattr", name=name)


def _subclass_root(cls: type) -> type:
    return next(klass for klass in cls.__mro__ if "_rlg_base" in vars(klass))


_SUBCLASS_BASES: dict = {}


def _subclass_base(remote: Remote) -> type:
    ref = object.__getattribute__(remote, "_rlg_ref")
    key = (ref[0], ref[1], tuple(ref[2]) if ref[0] == "p" else ref[2])
    if key not in _SUBCLASS_BASES:
        name = str(ref[2][-1]) if ref[0] == "p" and ref[2] else "RemoteBase"
        attrs = {"_rlg_base": remote, "_rlg_inherited": None}
        for method in ("__eq__", "__hash__", "__len__", "__iter__", "__contains__", "__getitem__", "__str__"):
            attrs[method] = _base_dunder(method)
        _SUBCLASS_BASES[key] = type(name, (RemoteSubclass,), attrs)
    return _SUBCLASS_BASES[key]


def _base_method(name: str):
    """A workspace base's method on the twin, found by ``super()`` (which skips ``__getattr__``)."""

    def method(self, *args, **kwargs):
        return vars(self)["_rlg_remote"]._rlg("super", name=name, args=list(args), kwargs=kwargs)

    method.__name__ = name
    return method


def _base_dunder(name: str):
    """``len(obj)``, ``obj == x``... on a test's subclass instance: the workspace base's, on the twin."""

    def method(self, *args):
        remote = vars(self).get("_rlg_remote")
        if remote is None:
            return object.__hash__(self) if name == "__hash__" else NotImplemented
        return getattr(type(remote), name)(remote, *args)

    method.__name__ = name
    return method


class RemoteModule(types.ModuleType):
    """A workspace module: attributes are lazy references during collection, answers afterwards.

    Setting an attribute after collection (``monkeypatch.setattr(pkg, "LIMIT", 3)``) sets it in
    the worker, where workspace code reads it.
    """

    def __getattr__(self, name: str):
        if name.startswith("__") or name.startswith("_rlg_"):
            raise AttributeError(name)
        client = _CLIENT[0]
        if client is None or not client.allowed:
            return Remote(client, ("p", self.__name__, (name,)), "lazy")
        return client.request("getattr", ("p", self.__name__, ()), name=name)

    def __setattr__(self, name: str, value) -> None:
        client = _CLIENT[0]
        if name.startswith("__") or isinstance(value, RemoteModule) or client is None or not client.allowed:
            super().__setattr__(name, value)
        else:
            client.request("setattr", ("p", self.__name__, ()), name=name, value=value)

    def __delattr__(self, name: str) -> None:
        client = _CLIENT[0]
        if name.startswith("__") or name in self.__dict__ or client is None or not client.allowed:
            super().__delattr__(name)
        else:
            client.request("delattr", ("p", self.__name__, ()), name=name)


_CLIENT: list = [None]
_TESTS_PREFIX: list = ["\0"]


def bind(client: Client | None, tests_prefix: str) -> None:
    """Serve the proxies through ``client`` (None: collection only) to the tests under ``tests_prefix``."""
    _CLIENT[0] = client
    _TESTS_PREFIX[0] = tests_prefix


def current_client() -> Client | None:
    """The client the proxies are served through (None before ``bind`` or when only collecting)."""
    return _CLIENT[0]
