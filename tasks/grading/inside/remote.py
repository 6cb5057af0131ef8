"""Remote import, TRUSTED side: workspace modules as proxies whose code runs in another process.

The trusted grader never imports workspace code. ``install`` wraps ``builtins.__import__`` so that
imports written in the hidden tests (and only those) of the top-level names found in /workspace (or
/workspace/src) get ``RemoteModule`` proxies, even when the image ships a package of the same name or
pytest has imported it already: the workspace's copy always wins for the tests, and the proxies
never enter ``sys.modules``, so pytest's own imports never see one. Using one (calling a function,
reading an attribute) is a request to the UNTRUSTED worker (``grading_worker``), started at the
first use with ``cwd=/workspace`` in its own process group. What comes back is plain data
(``grading_wire``, exact built-in types), a synthesised local exception class, or a ``Remote``
handle.

* Before ``allow()`` (i.e. during collection) nothing reaches the worker: module attributes are
  lazy path references (``from pkg import func`` at module level works) and any use fails.
* Remote exceptions become the built-in class of the same name, or one local class per
  workspace-defined qualified name, derived from its nearest built-in base (so both
  ``pytest.raises(pkg.MyError)`` and ``pytest.raises(ValueError)`` work).
* A crash, exit, hang (per-call timeout) or protocol violation of the worker raises a
  ``RemoteFailure`` (a ``BaseException``: ``pytest.raises(Exception)`` cannot swallow it), fails
  that test, and the next use starts a fresh worker; handles of the old one are dead.
* Arguments go as plain data, else as a copy (pickled here, unpickled there; never the other way
  round) when the value and everything it references can be imported by the worker, else as a
  reference the worker calls back about (a test's functions, generators, iterators, objects and
  exception classes): iterators stay lazy, objects stay shared. A callback can read only public
  attributes of what it was given, never frames, code or modules.
* Comparisons: handle against handle is the workspace's own operator; handle against a value of
  the test compares the handle's plain value (a namedtuple's tuple, an IntEnum's int) HERE, and an
  object that overrides ``==`` has none, so it compares by identity: the worker never learns what
  it is compared to, and an always-equal object never equals an expected value.

Runs inside the sandbox image: standard library only.
"""

import base64
import builtins
import decimal
import fractions
import importlib
import importlib.util
import io
import itertools
import operator
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
import types

import grading_wire as wire

STDERR_TAIL_BYTES = 1000
_EXPOSED_DUNDERS = ("__name__", "__qualname__", "__doc__")
# Dunders a test may read from a workspace object (``getattr(Version, "__lt__")``, ``obj.__dict__``)
# once collection is over; others (``__wrapped__``, ``__code__``...) are what pytest and inspect probe.
_READABLE_DUNDERS = frozenset(
    [*_EXPOSED_DUNDERS, "__module__", "__dict__", "__all__", "__version__", "__slots__", "__init__"]
    + [f"__{n}__" for n in ("eq", "ne", "lt", "le", "gt", "ge", "hash", "str", "repr", "bool", "len")]
    + [f"__{n}__" for n in ("iter", "next", "contains", "call", "getitem", "setitem", "delitem")]
    + [f"__{n}__" for n in ("enter", "exit", "add", "sub", "mul", "truediv", "floordiv", "mod")]
)
_NOT_MAPPED = (StopIteration, StopAsyncIteration)
_EXCLUDED_NAMES = {"tests", "test", "conftest", "setup", "sitecustomize", "usercustomize", "__pycache__"}
_NEVER_SERVED = {"pytest", "_pytest", "rlguard_checks", "grading_remote", "grading_wire", "grading_worker"}
_PUBLIC_DUNDERS = ("__name__", "__qualname__", "__module__", "__doc__")
# What a callback may never hand to workspace code: the way into a test's globals and locals.
_PRIVATE_TYPES = (types.FrameType, types.CodeType, types.TracebackType, types.ModuleType, types.CellType)
# Dunders of a test's object that the worker's stand-in gets (see ``grading_worker.LOCAL_DUNDERS``).
_LOCAL_DUNDERS = (
    "__call__", "__iter__", "__next__", "__len__", "__contains__", "__getitem__", "__setitem__",
    "__enter__", "__exit__",
)  # fmt: skip
_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
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


class Client:
    """The trusted end of the RPC: starts, talks to and kills the worker."""

    def __init__(self, argv: list, cwd: str, env: dict, call_timeout_s: float, deadline: float) -> None:
        self._argv, self._cwd, self._env = argv, cwd, env
        self._call_timeout_s = call_timeout_s
        self._deadline = deadline
        self._proc = None
        self._buffer = b""
        self._ids = itertools.count(1)
        self._locals: dict = {}
        self._local_ids: dict = {}
        self._remotes: dict = {}
        self._exceptions: dict = {}
        self._exception_origin: dict = {}  # synthesised class -> (module, qualname) in the workspace
        self._test_modules: tuple = ()
        self._seed: list | None = None
        self._stderr_tail = [b""]
        self.allowed = False
        self.generation = 0
        self.stats = {"starts": 0, "failures": 0}
        self.timed_out = False

    # ------------------------------------------------------------------------ lifetime
    def _start(self) -> None:
        self._proc = subprocess.Popen(
            self._argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self._cwd,
            env=self._env,
            close_fds=True,
            start_new_session=True,
        )
        self._buffer = b""
        self._remotes = {}
        self.generation += 1
        self.stats["starts"] += 1
        threading.Thread(target=self._drain_stderr, args=(self._proc.stderr,), daemon=True).start()
        if self._seed is not None:  # a fresh worker continues from the test's last random.seed
            self.request("seed", args=self._seed)

    def _drain_stderr(self, stream) -> None:
        for chunk in iter(lambda: stream.read(4096), b""):
            self._stderr_tail[0] = (self._stderr_tail[0] + chunk)[-STDERR_TAIL_BYTES:]

    def stderr_tail(self) -> str:
        return self._stderr_tail[0].decode("utf-8", "replace")

    def kill(self) -> None:
        """Kill the worker's whole process group (daemons it started included)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def _fail(self, cls: type, message: str) -> RemoteFailure:
        self.stats["failures"] += 1
        self.kill()
        return cls(message)

    # -------------------------------------------------------------------------- wire
    def _send(self, message: dict) -> None:
        try:
            line = wire.dumps(message)
        except wire.WireError as exc:
            raise TypeError(f"cannot send to workspace code: {exc}") from None
        try:
            self._proc.stdin.write(line)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise self._fail(RemoteCrash, f"workspace worker is gone ({exc})") from None

    def _read(self) -> dict:
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            now = time.monotonic()
            if now >= self._deadline:
                self.timed_out = True
                raise self._fail(RemoteTimeout, "grading deadline reached")
            wait = min(self._call_timeout_s, self._deadline - now)
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                raise self._fail(RemoteTimeout, f"workspace call took longer than {wait:.0f}s")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                code = self._proc.poll()
                raise self._fail(RemoteCrash, f"workspace worker exited (status {code})")
            self._buffer += chunk
            if len(self._buffer) > wire.MAX_LINE_BYTES:
                raise self._fail(RemoteProtocolError, "oversized message from the workspace worker")
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return wire.loads(line)
        except wire.WireError as exc:
            raise self._fail(RemoteProtocolError, f"workspace worker: {exc}") from None

    # ------------------------------------------------------------------------ values
    def encode(self, value):
        return wire.encode(value, self._outgoing)

    def _outgoing(self, value) -> dict:
        """How a value of the trusted side that is not plain data travels: reference, copy or callback."""
        if isinstance(value, Remote):
            return self._live(object.__getattribute__(value, "_rlg_ref"))
        if isinstance(value, RemoteModule):
            return {"t": "p", "m": value.__name__, "a": []}
        if isinstance(value, RemoteSubclass) and "_rlg_remote" in vars(value):
            return self._outgoing(vars(value)["_rlg_remote"])  # its worker half
        if isinstance(value, type) and issubclass(value, BaseException):
            return self._exception_tag(value)
        if not hasattr(type(value), "__next__"):  # iterators stay lazy: never copied
            data = self._pickled(value)
            if data is not None:
                return {"t": "pickle", "v": data}
        return self._local_tag(value)

    def _pickled(self, value) -> str | None:
        """A copy the worker can unpickle (it imports only what the pickle names), else None."""
        stream = io.BytesIO()
        try:
            _Pickler(self, stream).dump(value)
        except Exception:  # not picklable, or it names a test's own class or function
            return None
        return base64.b64encode(stream.getvalue()).decode("ascii")

    def _local_id(self, value) -> int:
        number = self._local_ids.get(id(value))
        if number is None or self._locals.get(number) is not value:
            number = len(self._locals) + 1
            self._locals[number] = value  # kept alive, so ids are never reused
            self._local_ids[id(value)] = number
        return number

    def _local_tag(self, value) -> dict:
        cls = type(value)
        dunders = [name for name in _LOCAL_DUNDERS if hasattr(cls, name)]
        if cls.__eq__ is not object.__eq__:
            dunders.append("__eq__")
            if cls.__hash__ is not None:
                dunders.append("__hash__")
        info = {name[2:-2]: getattr(value, name, None) for name in _PUBLIC_DUNDERS}
        tag = {"t": "local", "id": self._local_id(value), "dunders": dunders}
        return {**tag, **{k: v[:200] for k, v in info.items() if type(v) is str}}

    def _exception_tag(self, cls: type) -> dict:
        origin = self._exception_origin.get(cls)
        if origin is not None:  # a workspace exception class: the worker's real one
            return {"t": "p", "m": origin[0], "a": origin[1].split(".")}
        data = self._pickled(cls)  # built-in and library classes, by reference
        if data is not None:
            return {"t": "pickle", "v": data}
        return {"t": "lexc", "id": self._local_id(cls), **_class_info(cls)}

    def is_test_module(self, name) -> bool:
        """True for modules the worker cannot import: the hidden tests and this grader's own."""
        if not isinstance(name, str) or name in ("__main__", "grading_remote", "runner"):
            return True
        module = sys.modules.get(name)
        filename = os.path.realpath(str(getattr(module, "__file__", None) or ""))
        return bool(self._test_modules) and filename.startswith(self._test_modules)

    def _incoming(self, tagged: dict):
        tag = tagged["t"]
        if tag == "h" and type(tagged.get("id")) is int:
            remote = self._remotes.get(tagged["id"])
            if remote is None:  # one proxy per remote object: ``is`` means the same object
                type_name = str(tagged.get("type", "object"))[:100]
                remote = Remote(self, ("h", self.generation, tagged["id"]), type_name)
                self._remotes[tagged["id"]] = remote
            return remote
        if tag == "excclass":
            return self.exception_class(tagged)
        if tag == "local" and tagged.get("id") in self._locals:
            return self._locals[tagged["id"]]  # only what this side handed out
        raise wire.WireError(f"unknown tag {str(tag)[:40]!r}")

    def decode(self, data):
        return wire.decode(data, self._incoming)

    def _live(self, ref: tuple) -> dict:
        """The wire form of ``ref``; a handle must belong to the worker that is running now."""
        if ref[0] == "p":
            return {"t": "p", "m": ref[1], "a": list(ref[2])}
        if ref[1] != self.generation or self._proc is None:
            raise RemoteCrash("handle from a workspace worker that is gone")
        return {"t": "h", "id": ref[2]}

    def exception_class(self, info: dict) -> type:
        """The local class for a remote exception class: built-in by name, else synthesised once."""
        local = self._locals.get(info.get("lexc")) if type(info.get("lexc")) is int else None
        if isinstance(local, type) and issubclass(local, BaseException):
            return local  # a test's own exception class, raised by workspace code
        module, qualname = str(info.get("module", "")), str(info.get("qualname", ""))
        if module == "builtins":
            cls = getattr(builtins, qualname, None)
            if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, _NOT_MAPPED):
                return cls
        base = Exception
        for name in info.get("bases") or []:
            candidate = getattr(builtins, str(name), None)
            mappable = isinstance(candidate, type) and issubclass(candidate, Exception)
            if mappable and not issubclass(candidate, _NOT_MAPPED):
                base = candidate
                break
        key = (module, qualname, base)
        if key not in self._exceptions:
            name = qualname.rsplit(".", 1)[-1] or "RemoteException"
            attrs = {"__module__": module, "__qualname__": qualname}
            cls = type(name if name.isidentifier() else "RemoteException", (base,), attrs)
            self._exceptions[key] = cls
            if module != "rlguard.remote":
                self._exception_origin[cls] = (module, qualname)
        return self._exceptions[key]

    def seed(self, args: list) -> None:
        """``random.seed`` in a test: the worker's generator gets the same seed, now and after a restart."""
        self._seed = args
        if self.allowed and self._proc is not None:
            self.request("seed", args=args)

    # --------------------------------------------------------------------------- calls
    def request(self, op: str, ref: tuple | None = None, **fields):
        """Run one operation in the worker; its result, or its exception raised here."""
        if not self.allowed:
            raise RemoteUnavailable("workspace code cannot run while hidden tests are collected")
        if self._proc is None:
            if ref is not None and ref[0] == "h":
                raise RemoteCrash("handle from a workspace worker that is gone")
            if time.monotonic() >= self._deadline:
                self.timed_out = True
                raise RemoteTimeout("grading deadline reached")
            self._start()
        number = next(self._ids)
        message = {"id": number, "op": op, **{k: self.encode(v) for k, v in fields.items() if k != "name"}}
        if "name" in fields:
            message["name"] = fields["name"]
        if ref is not None:
            message["target"] = self._live(ref)
        self._send(message)
        while True:
            answer = self._read()
            if "cb" in answer:
                self._run_callback(answer)
                continue
            if answer.get("id") != number or ("ok" in answer) == ("err" in answer):
                raise self._fail(RemoteProtocolError, "answer out of order")
            if "err" in answer:
                raise self._remote_exception(answer["err"])
            try:
                return self.decode(answer["ok"])
            except (wire.WireError, RecursionError, KeyError, TypeError) as exc:
                raise self._fail(RemoteProtocolError, f"bad value from workspace code: {exc}") from None

    def _remote_exception(self, info) -> BaseException:
        if type(info) is not dict:
            return self._fail(RemoteProtocolError, "bad exception from workspace code")
        message = str(info.get("message", ""))[:2000]
        try:
            return self.exception_class(info)(message)
        except Exception:  # a class that needs more arguments (UnicodeDecodeError): keep its name
            fallback = {**info, "module": "rlguard.remote", "bases": ["Exception"], "lexc": None}
            return self.exception_class(fallback)(message)

    def _run_callback(self, message: dict) -> None:
        target = self._locals.get(message.get("fn"))
        try:
            if target is None:
                raise RemoteProtocolError("callback to an unknown object")
            args = self.decode(message.get("args", []))
            kwargs = self.decode(message["kwargs"]) if "kwargs" in message else {}
            if type(args) is not list or type(kwargs) is not dict:
                raise RemoteProtocolError("bad callback arguments")
            kwargs = {str(k): v for k, v in kwargs.items()}
            result = _local_op(target, str(message.get("op", "call")), args, kwargs, message.get("name"))
            reply = {"cb": message["cb"], "ok": self.encode(result)}
        except RemoteFailure:
            raise
        except wire.WireError as exc:
            raise self._fail(RemoteProtocolError, f"bad callback from workspace code: {exc}") from None
        except Exception as exc:  # the test's own code raised: the workspace code sees it
            reply = {"cb": message.get("cb"), "err": self._error_tag(exc)}
        self._send(reply)

    def _error_tag(self, exc: Exception) -> dict:
        cls = type(exc)
        # An assertion's message may quote expected values: workspace code gets the class only.
        text = "" if isinstance(exc, AssertionError) else str(exc)[:2000]
        info = {"qualname": cls.__qualname__, "module": cls.__module__, "message": text}
        origin = self._exception_origin.get(cls)
        if origin is not None:
            info["module"], info["qualname"] = origin
        elif self.is_test_module(cls.__module__):
            info["lexc"] = {"id": self._local_id(cls), **_class_info(cls)}
        return info


def _class_info(cls: type) -> dict:
    return {
        "module": str(cls.__module__)[:200],
        "qualname": str(cls.__qualname__)[:200],
        "bases": [c.__name__ for c in cls.__mro__ if c.__module__ == "builtins"][:20],
    }


def _public(name) -> bool:
    return isinstance(name, str) and (not name.startswith("_") or name in _PUBLIC_DUNDERS)


def _local_op(target, op: str, args: list, kwargs: dict, name):
    """One use of a test's object that workspace code asked for (see ``grading_worker.LocalObject``)."""
    if op == "call":
        return target(*args, **kwargs)
    if op == "method" and isinstance(target, RemoteSubclass) and name in _overrides(type(target))[0]:
        return getattr(target, name)(*args, **kwargs)  # a test's override, called by workspace code
    if op == "getattr":
        value = getattr(target, name) if _public(name) else None
        if not _public(name) or isinstance(value, _PRIVATE_TYPES):
            raise AttributeError(f"{type(target).__name__!r} object has no attribute {str(name)[:100]!r}")
        return value
    if op == "setattr" and _public(name) and len(args) == 1:
        setattr(target, name, args[0])
        return None
    if op == "next":
        try:
            return [True, next(target)]
        except StopIteration:
            return [False, None]
    if op == "exit" and len(args) == 2:
        return target.__exit__(args[0], args[1], None)
    unary = {"iter": iter, "len": len, "bool": bool, "str": str, "repr": repr, "hash": hash}
    if op in unary and not args:
        return unary[op](target)
    if op == "enter" and not args:
        return target.__enter__()
    if op == "contains" and len(args) == 1:
        return args[0] in target
    if op == "getitem" and len(args) == 1:
        return target[args[0]]
    if op == "setitem" and len(args) == 2:
        target[args[0]] = args[1]
        return None
    if op == "eq" and len(args) == 1:
        return target == args[0]
    raise TypeError(f"workspace code cannot {op[:40]} a {type(target).__name__}")


class _Pickler(pickle.Pickler):
    """Copies for the worker: handles inside go as references, a test's own classes never go."""

    def __init__(self, client: Client, stream) -> None:
        super().__init__(stream, protocol=4)
        self._client = client

    def persistent_id(self, obj):
        if isinstance(obj, Remote):
            return self._client._live(object.__getattribute__(obj, "_rlg_ref"))
        if isinstance(obj, RemoteModule):
            return {"t": "p", "m": obj.__name__, "a": []}
        by_reference = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
        if isinstance(obj, by_reference) and self._client.is_test_module(getattr(obj, "__module__", None)):
            raise pickle.PicklingError("defined in a hidden test")
        return None


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
        test_reads = name[:2] == "__" and name in _READABLE_DUNDERS and _from_tests(sys._getframe(1))
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
        if self._rlg_allowed() and _from_tests(sys._getframe(1)):
            return _exact(self._rlg("repr"), str, "repr()")
        ref = object.__getattribute__(self, "_rlg_ref")
        where = ".".join([ref[1], *ref[2]]) if ref[0] == "p" else f"#{ref[2]}"
        return f"<remote {object.__getattribute__(self, '_rlg_type')} {where}>"


def _from_tests(frame) -> bool:
    """True when ``frame`` runs code of a hidden test file (not pytest's, not this module's)."""
    if frame is None:
        return False
    filename = frame.f_code.co_filename
    known = _IN_TESTS.get(filename)
    if known is None:
        known = _IN_TESTS[filename] = os.path.realpath(filename).startswith(_TESTS_PREFIX[0])
    return known


_IN_TESTS: dict = {}


def resolve_lazy(value):
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


def _overrides(cls: type) -> tuple:
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
        methods, others = _overrides(cls)
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
_SERVED: dict = {}  # name -> RemoteModule; never in sys.modules


def _served_module(name: str) -> RemoteModule:
    module = _SERVED.get(name)
    if module is None:
        module = RemoteModule(name)
        module.__path__ = []  # a package, so ``import pkg.sub`` finds its submodules here
        client = _CLIENT[0]
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
        if served and _from_tests(sys._getframe(1)):
            parts = name.split(".")
            for end in range(1, len(parts) + 1):
                module = _served_module(".".join(parts[:end]))
            return module
        return original(name, package)

    return import_module


def install(client: Client, workspace: str, tests_dir: str, pristine: list | None = None) -> set:
    """Serve ``workspace``'s top-level modules to the tests in ``tests_dir``; the names served."""
    names = served_names(workspace, pristine)
    _CLIENT[0] = client
    tests_prefix = os.path.join(os.path.realpath(tests_dir), "")
    _TESTS_PREFIX[0] = tests_prefix
    if client is not None:
        client._test_modules = (tests_prefix,)
    builtins.__import__ = _make_import(builtins.__import__, names, tests_prefix, import_roots(workspace))
    importlib.import_module = _make_import_module(importlib.import_module, names)
    return names
