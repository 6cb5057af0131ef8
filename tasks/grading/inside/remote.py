"""Remote import, TRUSTED side: the client that starts, talks to and kills the UNTRUSTED worker.

The trusted grader never imports workspace code. Workspace modules are proxies
(``grading_proxies``, served by ``grading_import_hook``) whose every use is a request sent here to
the worker (``grading_worker``), started at the first use with ``cwd=/workspace`` in its own process
group. What comes back is plain data (``grading_wire``, exact built-in types), a synthesised local
exception class, or a ``Remote`` handle.

* Remote exceptions become the built-in class of the same name, or one local class per
  workspace-defined qualified name, derived from its nearest built-in base (so both
  ``pytest.raises(pkg.MyError)`` and ``pytest.raises(ValueError)`` work).
* Arguments go as plain data, else as a copy (pickled here, unpickled there; never the other way
  round) when the value and everything it references can be imported by the worker, else as a
  reference the worker calls back about (a test's functions, generators, iterators, objects and
  exception classes): iterators stay lazy, objects stay shared. A callback can read only public
  attributes of what it was given, never frames, code or modules.

Runs inside the sandbox image: standard library only.
"""

import base64
import builtins
import io
import itertools
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
from grading_proxies import (
    Remote,
    RemoteCrash,
    RemoteFailure,
    RemoteModule,
    RemoteProtocolError,
    RemoteSubclass,
    RemoteTimeout,
    RemoteUnavailable,
    overrides,
)

STDERR_TAIL_BYTES = 1000
_NOT_MAPPED = (StopIteration, StopAsyncIteration)
# This grader's own modules: nothing defined in one goes to the worker by reference (``is_test_module``).
_GRADER_MODULES = ("__main__", "runner", "grading_remote", "grading_proxies", "grading_import_hook")
_PUBLIC_DUNDERS = ("__name__", "__qualname__", "__module__", "__doc__")
# What a callback may never hand to workspace code: the way into a test's globals and locals.
_PRIVATE_TYPES = (types.FrameType, types.CodeType, types.TracebackType, types.ModuleType, types.CellType)
# Dunders of a test's object that the worker's stand-in gets (see ``grading_worker.LOCAL_DUNDERS``).
_LOCAL_DUNDERS = (
    "__call__", "__iter__", "__next__", "__len__", "__contains__", "__getitem__", "__setitem__",
    "__enter__", "__exit__",
)  # fmt: skip


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
        #: Where the hidden tests live (``grading_import_hook.install``): the worker cannot import them.
        self.test_modules: tuple = ()
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
    def encode(self, value: object) -> object:
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

    def is_test_module(self, name: object) -> bool:
        """True for modules the worker cannot import: the hidden tests and this grader's own."""
        if not isinstance(name, str) or name in _GRADER_MODULES:
            return True
        module = sys.modules.get(name)
        filename = os.path.realpath(str(getattr(module, "__file__", None) or ""))
        return bool(self.test_modules) and filename.startswith(self.test_modules)

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

    def decode(self, data: object) -> object:
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
    def request(self, op: str, ref: tuple | None = None, **fields: object) -> object:
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
    if op == "method" and isinstance(target, RemoteSubclass) and name in overrides(type(target))[0]:
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
