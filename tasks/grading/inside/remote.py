"""Remote import, TRUSTED side: workspace modules as proxies whose code runs in another process.

The trusted grader never imports workspace code. ``install`` puts a finder at the END of
``sys.meta_path`` (real modules always win) that serves the top-level names found in /workspace as
``RemoteModule`` proxies. Using one (calling a function, reading an attribute) is a request to the
UNTRUSTED worker (``grading_worker``), started at the first use with ``cwd=/workspace`` in its own
process group. What comes back is plain data (``grading_wire``, exact built-in types), a
synthesised local exception class, or a ``Remote`` handle. A handle compares by identity here, so
an object whose ``__eq__`` is always true can never satisfy ``==`` in a hidden test.

* Before ``allow()`` (i.e. during collection) nothing reaches the worker: module attributes are
  lazy path references (``from pkg import func`` at module level works) and any use fails.
* Remote exceptions become the built-in class of the same name, or one local class per
  workspace-defined qualified name, derived from its nearest built-in base (so both
  ``pytest.raises(pkg.MyError)`` and ``pytest.raises(ValueError)`` work).
* A crash, exit, hang (per-call timeout) or protocol violation of the worker raises a
  ``RemoteFailure`` (a ``BaseException``: ``pytest.raises(Exception)`` cannot swallow it), fails
  that test, and the next use starts a fresh worker; handles of the old one are dead.
* Callables of the trusted side passed as arguments (a test's function given to a decorator) are
  called back on request of the worker with plain-data arguments.

Runs inside the sandbox image: standard library only.
"""

import builtins
import importlib.abc
import importlib.machinery
import itertools
import os
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
_NOT_MAPPED = (StopIteration, StopAsyncIteration)
_EXCLUDED_NAMES = {"tests", "test", "conftest", "setup", "sitecustomize", "usercustomize", "__pycache__"}


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


def served_names(workspace: str) -> set:
    """Top-level module and package names in ``workspace`` (tests, conftest and setup files excluded)."""
    names = set()
    try:
        entries = os.listdir(workspace)
    except OSError:
        return names
    for entry in entries:
        path = os.path.join(workspace, entry)
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
        self._remotes: dict = {}
        self._exceptions: dict = {}
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
        if isinstance(value, Remote):
            ref = object.__getattribute__(value, "_rlg_ref")
            return {"t": "h", "id": self._live(ref)[1]}
        if callable(value):
            number = len(self._locals) + 1
            self._locals[number] = value
            info = {
                n[2:-2]: getattr(value, n, None)
                for n in ("__name__", "__qualname__", "__module__", "__doc__")
            }
            return {"t": "local", "id": number, **{k: v for k, v in info.items() if isinstance(v, str)}}
        raise TypeError(f"{type(value).__name__} cannot be passed to workspace code")

    def _incoming(self, tagged: dict):
        tag = tagged["t"]
        if tag == "h" and type(tagged.get("id")) is int:
            remote = self._remotes.get(tagged["id"])
            if remote is None:  # one proxy per remote object: ``is`` and ``==`` mean the same object
                type_name = str(tagged.get("type", "object"))[:100]
                remote = Remote(self, ("h", self.generation, tagged["id"]), type_name)
                self._remotes[tagged["id"]] = remote
            return remote
        if tag == "excclass":
            return self.exception_class(tagged)
        raise wire.WireError(f"unknown tag {str(tag)[:40]!r}")

    def decode(self, data):
        return wire.decode(data, self._incoming)

    def _live(self, ref: tuple) -> list:
        """The wire form of ``ref``; a handle must belong to the worker that is running now."""
        if ref[0] == "p":
            return ["p", ref[1], list(ref[2])]
        if ref[1] != self.generation or self._proc is None:
            raise RemoteCrash("handle from a workspace worker that is gone")
        return ["h", ref[2]]

    def exception_class(self, info: dict) -> type:
        """The local class for a remote exception class: built-in by name, else synthesised once."""
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
            self._exceptions[key] = type(name if name.isidentifier() else "RemoteException", (base,), attrs)
        return self._exceptions[key]

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
            fallback = {**info, "module": "rlguard.remote", "bases": ["Exception"]}
            return self.exception_class(fallback)(message)

    def _run_callback(self, message: dict) -> None:
        function = self._locals.get(message.get("fn"))
        try:
            if function is None:
                raise RemoteProtocolError("callback to an unknown function")
            args = self.decode(message.get("args"))
            kwargs = self.decode(message.get("kwargs"))
            if type(args) is not list or type(kwargs) is not dict:
                raise RemoteProtocolError("bad callback arguments")
            reply = {
                "cb": message["cb"],
                "ok": self.encode(function(*args, **{str(k): v for k, v in kwargs.items()})),
            }
        except RemoteFailure:
            raise
        except wire.WireError as exc:
            raise self._fail(RemoteProtocolError, f"bad callback from workspace code: {exc}") from None
        except Exception as exc:  # the test's own function raised: the workspace code sees it
            cls = type(exc)
            reply = {
                "cb": message.get("cb"),
                "err": {"qualname": cls.__qualname__, "message": str(exc)[:2000]},
            }
        self._send(reply)


class Remote:
    """A workspace object living in the worker: every use is a request; ``==`` is identity."""

    __slots__ = ("_rlg_client", "_rlg_ref", "_rlg_type")

    def __init__(self, client: Client, ref: tuple, type_name: str) -> None:
        object.__setattr__(self, "_rlg_client", client)
        object.__setattr__(self, "_rlg_ref", ref)
        object.__setattr__(self, "_rlg_type", type_name)

    def _rlg(self, op: str, **fields):
        client = object.__getattribute__(self, "_rlg_client")
        return client.request(op, object.__getattribute__(self, "_rlg_ref"), **fields)

    def __getattr__(self, name: str):
        if name.startswith("_rlg_") or (name.startswith("__") and name not in _EXPOSED_DUNDERS):
            raise AttributeError(name)
        if not object.__getattribute__(self, "_rlg_client").allowed:
            raise AttributeError(name)  # pytest probes objects while collecting: nothing runs then
        return self._rlg("getattr", name=name)

    def __setattr__(self, name: str, value) -> None:
        self._rlg("setattr", name=name, value=value)

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
        return iter(_exact(self._rlg("iter"), list, "iter()"))

    def __str__(self) -> str:
        return _exact(self._rlg("str"), str, "str()")

    def __repr__(self) -> str:  # local: pytest's failure messages must not run workspace code
        ref = object.__getattribute__(self, "_rlg_ref")
        where = ".".join([ref[1], *ref[2]]) if ref[0] == "p" else f"#{ref[2]}"
        return f"<remote {object.__getattribute__(self, '_rlg_type')} {where}>"


def _exact(value, kind: type, what: str):
    if type(value) is not kind:
        raise TypeError(f"{what} of a workspace object gave {type(value).__name__}, not {kind.__name__}")
    return value


class RemoteModule(types.ModuleType):
    """A workspace module: attributes are lazy references during collection, answers afterwards."""

    def __getattr__(self, name: str):
        if name.startswith("__") or name.startswith("_rlg_"):
            raise AttributeError(name)
        client = _CLIENT[0]
        if client is None or not client.allowed:
            return Remote(client, ("p", self.__name__, (name,)), "lazy")
        return client.request("getattr", ("p", self.__name__, ()), name=name)


_CLIENT: list = [None]


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return RemoteModule(spec.name)

    def exec_module(self, module) -> None:
        client = _CLIENT[0]
        if client.allowed:  # after collection an import error in the workspace shows at import
            client.request("import", name=module.__name__)


class _Finder(importlib.abc.MetaPathFinder):
    """Serves workspace names, and only to imports written in the hidden tests themselves.

    pytest's own lazy imports of optional modules (absent from the image) must not be answered by
    a workspace file of the same name, even as a proxy.
    """

    def __init__(self, names: set, tests_dir: str) -> None:
        self._names = names
        self._tests_prefix = os.path.join(os.path.realpath(tests_dir), "")

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] not in self._names or not self._imported_by_tests():
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)

    def _imported_by_tests(self) -> bool:
        frame = sys._getframe(1)
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename != __file__ and not _is_import_machinery(filename):
                return filename.startswith(self._tests_prefix)
            frame = frame.f_back
        return False


_IMPORTLIB_DIR = os.path.join(os.path.dirname(importlib.__file__), "")


def _is_import_machinery(filename: str) -> bool:
    return filename.startswith(("<frozen importlib", _IMPORTLIB_DIR))


def install(client: Client, workspace: str, tests_dir: str) -> set:
    """Serve ``workspace``'s top-level modules to the tests in ``tests_dir``; the names served."""
    names = served_names(workspace)
    _CLIENT[0] = client
    sys.meta_path.append(_Finder(names, tests_dir))
    return names
