"""The UNTRUSTED grading worker: imports and runs workspace code on behalf of the trusted grader.

Started by the trusted grader (``grading_remote``) with ``cwd=/workspace`` and the workspace on
``PYTHONPATH``; it serves requests read from stdin and answers on stdout, nothing else. Everything
here can be replaced or patched by workspace code, and that is fine: all the worker can do is
claim return values and exceptions, which is no more than a workspace function returning a value.
It never sees the hidden tests or their expected values, and holds no handle to the grader's
output. Results are plain data (``grading_wire``) or handles: ids of objects kept here, which the
trusted side can only pass back or ask about.

Runs inside the sandbox image: standard library only.
"""

import builtins
import importlib
import itertools
import os
import sys

import grading_wire as wire

MAX_HANDLES = 100_000
MESSAGE_CHARS = 2000


class Worker:
    def __init__(self, rpc_in, rpc_out) -> None:
        self._in = rpc_in
        self._out = rpc_out
        self._objects: dict[int, object] = {}
        self._ids: dict[int, int] = {}  # id(obj) -> handle, so one object keeps one handle
        self._callbacks = itertools.count(1)

    # ---------------------------------------------------------------------------- values
    def _handle(self, value) -> dict:
        if isinstance(value, type) and issubclass(value, BaseException):
            return {"t": "excclass", **_class_info(value)}
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
        if tag == "local":
            return LocalCallable(self, tagged)
        raise wire.WireError(f"unknown tag {tag!r}")

    def encode(self, value):
        return wire.encode(value, self._handle)

    def decode(self, data):
        return wire.decode(data, self._incoming)

    def target(self, ref):
        if ref[0] == "h":
            return self._objects[ref[1]]
        obj = importlib.import_module(ref[1])
        for name in ref[2]:
            obj = getattr(obj, name)
        return obj

    # --------------------------------------------------------------------------- serving
    def run(self, message: dict):
        op = message["op"]
        if op == "import":
            importlib.import_module(message["name"])
            return None
        obj = self.target(message["target"])
        if op == "getattr":
            return getattr(obj, message["name"])
        if op == "setattr":
            setattr(obj, message["name"], self.decode(message["value"]))
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
            items = list(itertools.islice(iter(obj), wire.MAX_ITEMS + 1))
            if len(items) > wire.MAX_ITEMS:
                raise ValueError(f"iterator longer than {wire.MAX_ITEMS}")
            return items
        if op == "str":
            return str(obj)
        raise ValueError(f"unknown op {op!r}")

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
                reply = {"id": message["id"], "ok": self.encode(self.run(message))}
            except BaseException as exc:  # every failure goes back as the answer
                reply = {"id": message.get("id"), "err": _error_info(exc)}
            self.send(reply)

    def callback(self, tagged: dict, args: tuple, kwargs: dict):
        """Ask the trusted side to run one of its own callables (a function a test passed in)."""
        number = next(self._callbacks)
        self.send(
            {"cb": number, "fn": tagged["id"], "args": self.encode(list(args)), "kwargs": self.encode(kwargs)}
        )
        answer = self.serve(until_callback=number)
        if answer is None:
            raise SystemExit(0)
        if "err" in answer:
            raise _local_exception(answer["err"])
        return self.decode(answer["ok"])


class LocalCallable:
    """A callable of the trusted side (a test's own function): calling it is a callback."""

    def __init__(self, worker: Worker, tagged: dict) -> None:
        self._worker = worker
        self._tagged = tagged
        for name in ("__name__", "__qualname__", "__module__", "__doc__"):
            value = tagged.get(name[2:-2])
            if isinstance(value, str):
                setattr(self, name, value)

    def __call__(self, *args, **kwargs):
        return self._worker.callback(self._tagged, args, kwargs)


def _class_info(cls: type) -> dict:
    return {
        "module": str(cls.__module__)[:200],
        "qualname": str(cls.__qualname__)[:200],
        "bases": [c.__name__ for c in cls.__mro__ if c.__module__ == "builtins"][:20],
    }


def _error_info(exc: BaseException) -> dict:
    try:
        message = str(exc)[:MESSAGE_CHARS]
    except Exception:  # a __str__ that raises still fails the call
        message = "<unprintable>"
    return {**_class_info(type(exc)), "message": message}


def _local_exception(info: dict) -> BaseException:
    cls = getattr(builtins, str(info.get("qualname")), None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = RuntimeError
    return cls(str(info.get("message", "")))


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
