"""The in-sandbox command runner: JSON requests on stdin, JSON answers on stdout, one per line.

The host starts it once per sandbox with ``docker exec`` (the modules of ``sandbox.inside`` passed
in the environment as one program, ``sandbox.runner_protocol``, so the image needs nothing but the
interpreter) and keeps the exec's attach stream open: no socket file exists that the agent could
swap, and no listening port exists at all. Standard library only.

This module reads requests and dispatches them: commands (``commands``), file tools (``files``),
the workspace as an archive (``archives``); how the runner protects itself is ``processes``, the
wire format ``protocol``.
"""

import os
import sys

from sandbox.inside.archives import get_tar, put_tar
from sandbox.inside.commands import run_command
from sandbox.inside.files import WORKSPACE, list_dir, read_file, write_file
from sandbox.inside.processes import protect_self
from sandbox.inside.protocol import Refused, dump_json, load_json

HANDLERS = {
    "ping": lambda request: {"pid": os.getpid()},
    "exec": run_command,
    "read": read_file,
    "write": write_file,
    "list": list_dir,
    "put_tar": put_tar,
    "get_tar": get_tar,
}


def answer(line: bytes) -> bytes:
    """The answer line (ASCII JSON) to one request line; never raises."""
    request_id = None
    try:
        request = load_json(line.decode("utf-8"))
        if not isinstance(request, dict):
            raise Refused("invalid", "request is not an object")
        request_id = request.get("id")
        handler = HANDLERS.get(request.get("op"))
        if handler is None:
            raise Refused("invalid", "unknown op {!r}".format(request.get("op")))
        reply = handler(request)
        reply["ok"] = True
    except Refused as exc:
        reply = {"ok": False, "kind": exc.kind, "message": str(exc)}
    except Exception as exc:
        reply = {"ok": False, "kind": "error", "message": f"{type(exc).__name__}: {exc}"}
    reply["id"] = request_id
    return (dump_json(reply) + "\n").encode("ascii")


def main() -> None:
    """Serve requests from stdin until the host closes it."""
    protect_self()
    os.chdir(WORKSPACE)
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return
        view = memoryview(answer(line))
        while view:
            view = view[os.write(1, view) :]
