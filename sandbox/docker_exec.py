"""The slow path: one ``docker exec`` per command, and tar archives unpacked over ``docker exec``.

Used where the in-sandbox runner cannot serve: an image without python3 (every command), the
supervisor's uid in grading containers (the runner serves the agent's uid only), and archives
loaded before a runner exists. The same rules hold as on the fast path: stdout and stderr in one
stream, output kept as head + tail within the cap, and nothing of the uid outlives its command.
These calls block (the docker SDK is synchronous): the backend runs them in its thread pool.
"""

from __future__ import annotations

from typing import Any

from sandbox.base import SandboxError
from sandbox.inside.capture import Capture
from sandbox.paths import WORKSPACE


def exec_argv(command: str, timeout: float) -> list[str]:
    """``command`` under coreutils ``timeout``, both streams on one pipe, every process of the uid
    killed afterwards."""
    # Docker keeps stdout and stderr apart; one pipe for both (``2>&1`` before anything runs)
    # keeps their order, as on the fast path. Afterwards every other process of the agent's uid
    # is killed (``kill -1`` spares its caller), so nothing outlives its call, as on the fast path.
    return [
        "/bin/sh",
        "-c",
        '"$@" 2>&1; rc=$?; kill -9 -1 2>/dev/null; exit $rc',
        "sh",
        "timeout",
        "-k",
        "2",
        f"{timeout:g}",
        "/bin/sh",
        "-c",
        command,
    ]


def run_exec(api: Any, container_id: str, argv: list[str], cap: int, user: str) -> tuple[str, bool, int]:
    """Run ``argv`` in the container as ``user``: (output within ``cap``, truncated, exit code)."""
    exec_id = api.exec_create(container_id, argv, stdout=True, stderr=True, user=user, workdir=WORKSPACE)
    capture = Capture(cap)
    for chunk in api.exec_start(exec_id["Id"], stream=True, demux=False):
        capture.add(chunk)
    text, truncated = capture.text()
    code = api.exec_inspect(exec_id["Id"]).get("ExitCode")
    return text, truncated, code if isinstance(code, int) else -1


def put_tar(
    api: Any,
    container_id: str,
    archive: bytes,
    user: str,
    directory: str = WORKSPACE,
    keep_modes: bool = False,
) -> None:
    """Unpack ``archive`` under ``directory`` with GNU tar over one ``docker exec`` as ``user``
    (``keep_modes``: the archive's permission bits exactly, sticky bits included)."""
    argv = ["tar", "-x", "--no-same-owner", "-C", directory, "-f", "-"]
    if keep_modes:
        argv = ["/bin/sh", "-c", 'umask 0 && exec "$@"', "sh", *argv[:2], "-p", *argv[2:]]
    exec_id = api.exec_create(container_id, argv, stdin=True, user=user)
    sock = api.exec_start(exec_id["Id"], socket=True)
    raw = getattr(sock, "_sock", sock)
    raw.sendall(archive)
    raw.shutdown(1)
    while raw.recv(65536):
        pass
    raw.close()
    if api.exec_inspect(exec_id["Id"]).get("ExitCode") != 0:
        raise SandboxError(f"archive was rejected by tar in the sandbox (unpacking under {directory})")
