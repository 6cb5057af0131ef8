"""The UNTRUSTED grading worker: imports and runs workspace code on behalf of the trusted grader.

Started by the trusted grader (``grading_remote``) with ``cwd=/workspace`` and the workspace on
``PYTHONPATH``; it serves requests read from stdin and answers on stdout, nothing else. Everything
here can be replaced or patched by workspace code, and that is fine: all the worker can do is
claim return values and exceptions, which is no more than a workspace function returning a value.
It never sees the hidden tests or their expected values, and holds no handle to the grader's
output. Results are plain data (``grading_wire``) or handles: ids of objects kept here, which the
trusted side can only pass back or ask about. What the trusted side passes in arrives as plain data,
as a copy (``pickle``: values the trusted side pickled, never the other way round), as a reference
to a workspace object or exception class, or as a ``LocalObject``: a stand-in for an object of the
trusted side (a test's function, iterator or object) whose every use is a callback.

Runs inside the sandbox image: standard library only.
"""

import base64
import builtins
import importlib
import itertools
import operator
import os
import pickle
import random
import sys
import types

import grading_wire as wire

MAX_HANDLES = 100_000
MESSAGE_CHARS = 2000
BINOPS = frozenset(
    "eq ne lt le gt ge add sub mul truediv floordiv mod pow and_ or_ xor lshift rshift matmul".split()  # noqa: SIM905
)
_PLAIN_BASES = (tuple, list, dict, set, frozenset, str, bytes, int, float, complex)
_MUTABLE = (list, dict, set)
# Dunders a LocalObject may have, each answered by the trusted side (only those the real object has).
LOCAL_DUNDERS = (
    "__call__", "__iter__", "__next__", "__len__", "__contains__", "__getitem__", "__setitem__",
    "__enter__", "__exit__", "__hash__", "__eq__",
)  # fmt: skip


class Worker:
    def __init__(self, rpc_in, rpc_out) -> None:
        self._in = rpc_in
        self._out = rpc_out
        self._objects: dict[int, object] = {}
        self._ids: dict[int, int] = {}  # id(obj) -> handle, so one object keeps one handle
        self._callbacks = itertools.count(1)
        self._local_classes: dict = {}
        self._local_objects: dict = {}  # one stand-in per object of the trusted side: ``is`` holds
        self._local_exceptions: dict = {}
        self._subclasses: dict = {}
        self._twins: dict = {}  # id(worker instance) -> stand-in of the test's object it pairs with
        self._forwarding: set = set()

    # ---------------------------------------------------------------------------- values
    def _handle(self, value) -> dict:
        twin = self._twins.get(id(value))
        if twin is not None and twin[0] is value:  # goes back as the test's own object
            value = twin[1]
        if isinstance(value, LocalObject):
            return {"t": "local", "id": object.__getattribute__(value, "_rlg_id")}
        if isinstance(value, type) and issubclass(value, BaseException):
            return {"t": "excclass", **_class_info(value)}
        return self._keep(value)

    def _keep(self, value) -> dict:
        handle = self._ids.get(id(value))
        if handle is None or self._objects.get(handle) is not value:
            if len(self._objects) >= MAX_HANDLES:
                raise RuntimeError(f"more than {MAX_HANDLES} live handles")
            handle = len(self._objects) + 1
            self._objects[handle] = value
            self._ids[id(value)] = handle
        return {"t": "h", "id": handle, "type": type(value).__name__[:100]}

    def _incoming(self, tagged: dict):
        tag = tagged["t"]
        if tag == "h":
            return self._objects[tagged["id"]]
        if tag == "p":
            return resolve(str(tagged["m"]), [str(name) for name in tagged["a"]])
        if tag == "pickle":
            return _Unpickler(self, base64.b64decode(tagged["v"])).load()
        if tag == "local":
            return self.local_object(tagged)
        if tag == "lexc":
            return self.local_exception(tagged)
        raise wire.WireError(f"unknown tag {tag!r}")

    def local_object(self, tagged: dict):
        known = self._local_objects.get(tagged["id"])
        if known is not None:
            return known
        dunders = tuple(name for name in LOCAL_DUNDERS if name in (tagged.get("dunders") or ()))
        cls = self._local_classes.get(dunders)
        if cls is None:
            attrs = {name: getattr(LocalObject, "_rlg" + name) for name in dunders}
            if "__eq__" in dunders and "__hash__" not in dunders:
                attrs["__hash__"] = None
            cls = self._local_classes[dunders] = type("LocalObject", (LocalObject,), attrs)
        obj = object.__new__(cls)
        object.__setattr__(obj, "_rlg_worker", self)
        object.__setattr__(obj, "_rlg_id", tagged["id"])
        for name in ("name", "qualname", "module", "doc"):
            if isinstance(tagged.get(name), str):
                object.__setattr__(obj, f"__{name}__", tagged[name])
        self._local_objects[tagged["id"]] = obj
        return obj

    def local_exception(self, tagged: dict) -> type:
        """One class here per exception class of the trusted side (a test's own exception)."""
        number = tagged["id"]
        if number not in self._local_exceptions:
            base = Exception
            for name in tagged.get("bases") or ():
                candidate = getattr(builtins, str(name), None)
                if isinstance(candidate, type) and issubclass(candidate, Exception):
                    base = candidate
                    break
            qualname = str(tagged.get("qualname") or "LocalError")
            name = qualname.rsplit(".", 1)[-1]
            name = name if name.isidentifier() else "LocalError"
            attrs = {"_rlg_lexc": number, "__qualname__": qualname, "__module__": str(tagged.get("module"))}
            self._local_exceptions[number] = type(name, (base,), attrs)
        return self._local_exceptions[number]

    def encode(self, value):
        return wire.encode(value, self._handle)

    def decode(self, data):
        return wire.decode(data, self._incoming)

    def target(self, ref: dict):
        if type(ref) is not dict or ref.get("t") not in ("h", "p"):
            raise wire.WireError("bad target")
        return self._incoming(ref)

    # --------------------------------------------------------------------------- serving
    def run(self, message: dict):
        op = message["op"]
        if op == "import":
            importlib.import_module(message["name"])
            return None
        if op == "seed":
            random.seed(*self.decode(message["args"]))
            return None
        obj = self.target(message["target"])
        if op == "getattr":
            value = getattr(obj, message["name"])
            if isinstance(obj, types.ModuleType) and type(value) in _MUTABLE:
                return _Live(value)  # a module's list/dict/set stays shared, not copied
            return value
        if op == "setattr":
            setattr(obj, message["name"], self.decode(message["value"]))
            return None
        if op == "delattr":
            delattr(obj, message["name"])
            return None
        if op == "call":
            args = self.decode(message["args"])
            kwargs = {str(k): v for k, v in self.decode(message["kwargs"]).items()}
            return obj(*args, **kwargs)
        if op == "getitem":
            return obj[self.decode(message["key"])]
        if op == "setitem":
            obj[self.decode(message["key"])] = self.decode(message["value"])
            return None
        if op == "delitem":
            del obj[self.decode(message["key"])]
            return None
        if op == "contains":
            return self.decode(message["value"]) in obj
        if op == "len":
            return len(obj)
        if op == "bool":
            return bool(obj)
        if op == "iter":
            return _Live(iter(obj))
        if op == "next":
            try:
                return [True, next(obj)]
            except StopIteration:
                return [False, None]
        if op == "str":
            return str(obj)
        if op == "repr":
            return repr(obj)
        if op == "hash":
            return hash(obj)
        if op == "value":
            return plain_view(obj)
        if op == "isinstance":
            return isinstance(self.decode(message["value"]), obj)
        if op == "issubclass":
            return issubclass(self.decode(message["value"]), obj)
        if op == "binop":
            name, other = message["name"], self.decode(message["value"])
            if name not in BINOPS:
                raise ValueError(f"unknown operator {name!r}")
            function = getattr(operator, name)
            return function(other, obj) if message.get("reflected") else function(obj, other)
        if op == "subclass":
            return _Live(self.twin(obj, message))
        if op == "methods":  # of a worker twin's workspace base
            base = type(obj).__mro__[1]
            names = [name for name in dir(base) if not name.startswith("_")]
            return [name for name in names if callable(getattr(base, name, None))]
        if op == "super":
            args = self.decode(message["args"])
            kwargs = {str(k): v for k, v in self.decode(message["kwargs"]).items()}
            return getattr(super(type(obj), obj), message["name"])(*args, **kwargs)
        if op == "init":
            args = self.decode(message["args"])
            kwargs = {str(k): v for k, v in self.decode(message["kwargs"]).items()}
            type(obj).__init__(obj, *args, **kwargs)
            return None
        if op == "enter":
            return obj.__enter__()
        if op == "exit":
            args = self.decode(message["args"])
            return obj.__exit__(*args)
        raise ValueError(f"unknown op {op!r}")

    def twin(self, base: type, message: dict):
        """The worker half of an instance of a test's class deriving from ``base``."""
        methods = [str(name) for name in self.decode(message["methods"])]
        others = [str(name) for name in self.decode(message["others"])]
        key = (id(base), str(message["name"]), tuple(methods), tuple(others))
        cls = self._subclasses.get(key)
        if cls is None:
            attrs = {name: _override(self, name) for name in methods}
            attrs.update({name: property(_attribute(self, name)) for name in others})
            attrs["__getattr__"] = _forward(self)
            cls = self._subclasses[key] = type(str(message["name"]), (base,), attrs)
        instance = cls.__new__(cls)
        self._twins[id(instance)] = (instance, self.decode(message["local"]))
        return instance

    def local_of(self, instance):
        twin = self._twins.get(id(instance))
        if twin is None or twin[0] is not instance:
            raise AttributeError("not paired with an object of the grader")
        return twin[1]

    def send(self, message: dict) -> None:
        self._out.write(wire.dumps(message))
        self._out.flush()

    def serve(self, until_callback: int | None = None) -> dict | None:
        """Answer requests until stdin closes (or, nested, until callback ``until_callback`` returns)."""
        while True:
            line = self._in.readline(wire.MAX_LINE_BYTES + 1)
            if not line:
                return None
            message = wire.loads(line)
            if "cb" in message:
                if message["cb"] == until_callback:
                    return message
                raise wire.WireError("unexpected callback answer")
            try:
                result = self.run(message)
                encoded = self._keep(result.value) if isinstance(result, _Live) else self.encode(result)
                reply = {"id": message["id"], "ok": encoded}
            except BaseException as exc:  # every failure goes back as the answer
                reply = {"id": message.get("id"), "err": _error_info(exc)}
            self.send(reply)

    def callback(self, number: int, op: str, args: tuple = (), kwargs: dict | None = None, name: str = ""):
        """Ask the trusted side to use one of its own objects (a test's function, iterator, object)."""
        call = next(self._callbacks)
        message = {"cb": call, "fn": number, "op": op, "args": self.encode(list(args))}
        if kwargs:
            message["kwargs"] = self.encode(kwargs)
        if name:
            message["name"] = name
        self.send(message)
        answer = self.serve(until_callback=call)
        if answer is None:
            raise SystemExit(0)
        if "err" in answer:
            raise self.local_error(answer["err"])
        return self.decode(answer["ok"])

    def local_error(self, info: dict) -> BaseException:
        """The exception a callback raised on the trusted side, as the closest class available here."""
        message = str(info.get("message", ""))
        cls = None
        if isinstance(info.get("lexc"), dict):
            cls = self.local_exception(info["lexc"])
        elif info.get("module") == "builtins":
            cls = getattr(builtins, str(info.get("qualname")), None)
        elif isinstance(info.get("module"), str):
            try:
                cls = resolve(info["module"], str(info.get("qualname")).split("."))
            except Exception:
                cls = None
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            cls, message = RuntimeError, f"{info.get('qualname')}: {message}"
        try:
            return cls(message)
        except Exception:
            return RuntimeError(f"{info.get('qualname')}: {message}")


class _Live:
    """A result that goes back as a handle even when it is plain data (a module's mutable constant)."""

    def __init__(self, value) -> None:
        self.value = value


class _Unpickler(pickle.Unpickler):
    """Copies made by the trusted side; handles inside them come back as the objects they name."""

    def __init__(self, worker: Worker, data: bytes) -> None:
        import io

        super().__init__(io.BytesIO(data))
        self._worker = worker

    def persistent_load(self, pid):
        return self._worker.decode(pid)


class LocalObject:
    """An object of the trusted side (a test's function, iterator or object): every use is a callback."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._rlg_cb("getattr", name=name)

    def __setattr__(self, name: str, value) -> None:
        self._rlg_cb("setattr", (value,), name=name)

    def __str__(self) -> str:
        return str(self._rlg_cb("str"))

    def __repr__(self) -> str:
        return str(self._rlg_cb("repr"))

    def __bool__(self) -> bool:
        return bool(self._rlg_cb("bool"))

    def _rlg_cb(self, op: str, args: tuple = (), kwargs: dict | None = None, name: str = ""):
        worker = object.__getattribute__(self, "_rlg_worker")
        return worker.callback(object.__getattribute__(self, "_rlg_id"), op, args, kwargs, name)

    def _rlg__call__(self, *args, **kwargs):
        return self._rlg_cb("call", args, kwargs)

    def _rlg__iter__(self):
        return self._rlg_cb("iter")

    def _rlg__next__(self):
        more, value = self._rlg_cb("next")
        if not more:
            raise StopIteration
        return value

    def _rlg__len__(self):
        return self._rlg_cb("len")

    def _rlg__contains__(self, value):
        return self._rlg_cb("contains", (value,))

    def _rlg__getitem__(self, key):
        return self._rlg_cb("getitem", (key,))

    def _rlg__setitem__(self, key, value):
        self._rlg_cb("setitem", (key, value))

    def _rlg__enter__(self):
        return self._rlg_cb("enter")

    def _rlg__exit__(self, *exc_info):
        return self._rlg_cb("exit", exc_info[:2])

    def _rlg__hash__(self):
        return self._rlg_cb("hash")

    def _rlg__eq__(self, other):
        return self._rlg_cb("eq", (other,))


def _override(worker: Worker, name: str):
    def method(self, *args, **kwargs):
        local = worker.local_of(self)
        return worker.callback(object.__getattribute__(local, "_rlg_id"), "method", args, kwargs, name)

    method.__name__ = name
    return method


def _attribute(worker: Worker, name: str):
    def read(self):
        return getattr(worker.local_of(self), name)

    return read


def _forward(worker: Worker):
    """Attributes the test's code set on its object (``self.factor = 2``) seen from workspace code."""

    def __getattr__(self, name: str):
        key = (id(self), name)
        if name.startswith("__") or key in worker._forwarding:
            raise AttributeError(name)
        worker._forwarding.add(key)
        try:
            return getattr(worker.local_of(self), name)
        finally:
            worker._forwarding.discard(key)

    return __getattr__


def resolve(module: str, path: list):
    """A workspace object by module and attribute path (a reference the trusted side holds)."""
    obj = importlib.import_module(module)
    for name in path:
        obj = getattr(obj, name)
    return obj


def plain_view(obj):
    """``obj`` as the built-in value it compares as, when its class keeps the built-in ``==``.

    A namedtuple is its tuple, an IntEnum member its int; a class that overrides ``__eq__`` has no
    plain value, so the trusted side compares it by identity: it never sees what it is compared to.
    """
    for base in _PLAIN_BASES:
        if isinstance(obj, base) and type(obj).__eq__ is base.__eq__:
            return base(obj)
    raise TypeError(f"{type(obj).__name__} has no plain value")


def _class_info(cls: type) -> dict:
    info = {
        "module": str(cls.__module__)[:200],
        "qualname": str(cls.__qualname__)[:200],
        "bases": [c.__name__ for c in cls.__mro__ if c.__module__ == "builtins"][:20],
    }
    local = next((c.__dict__["_rlg_lexc"] for c in cls.__mro__ if "_rlg_lexc" in c.__dict__), None)
    if type(local) is int:
        info["lexc"] = local
    return info


def _error_info(exc: BaseException) -> dict:
    try:
        message = str(exc)[:MESSAGE_CHARS]
    except Exception:  # a __str__ that raises still fails the call
        message = "<unprintable>"
    return {**_class_info(type(exc)), "message": message}


def main() -> None:
    # The RPC keeps private copies of stdin/stdout; prints in workspace code go to stderr instead.
    rpc_in = os.fdopen(os.dup(0), "rb")
    rpc_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull)  # noqa: SIM115 (lives as long as the process)
    sys.stdout = sys.stderr
    Worker(rpc_in, rpc_out).serve()


if __name__ == "__main__":
    main()
