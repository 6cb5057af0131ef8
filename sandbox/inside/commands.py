"""One agent command: ``bash -c`` in a new session, its output captured, everything it left killed.

Per command: a new session (``setsid``), stdout and stderr on one pipe (order kept), output kept as
head + tail within the cap while streaming; when the command ends (or times out: exit code 124)
every other process of the agent's uid is SIGKILLed, so nothing outlives its call. A kill by the
OOM killer during the command is noted in its output. Standard library only.
"""

import fcntl
import os
import select
import time

from sandbox.inside.capture import Capture
from sandbox.inside.processes import DEVNULL, READ_CHUNK, kill_strays, reap, spawn

SHELL = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
F_SETPIPE_SZ = 1031
DRAIN_AFTER_EXIT_S = 0.2


def oom_kills() -> int | None:
    """The container's OOM-kill count (cgroup v1 or v2), or None where neither says."""
    for path, key in (
        ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
        ("/sys/fs/cgroup/memory.events", "oom_kill"),
    ):
        try:
            with open(path) as handle:
                for line in handle:
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def run_command(request: dict) -> dict:
    """Run ``request["cmd"]`` within ``timeout`` seconds, its output within ``cap`` bytes."""
    command, timeout, cap = str(request["cmd"]), float(request["timeout"]), int(request["cap"])
    started = time.monotonic()
    deadline = started + timeout
    oom_before = oom_kills()
    read_fd, write_fd = os.pipe()
    try:
        fcntl.fcntl(read_fd, F_SETPIPE_SZ, READ_CHUNK)
    except OSError:
        pass
    try:
        pid = spawn([SHELL, "-c", command], DEVNULL, write_fd, write_fd, setsid=True)
    except OSError as exc:
        os.close(read_fd)
        return {"output": f"cannot start {SHELL}: {exc}", "exit_code": 127, "truncated": False}
    finally:
        os.close(write_fd)
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    poller = select.poll()
    poller.register(read_fd, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    capture = Capture(cap)
    status = exited_at = None
    timed_out = eof = False
    # Until the shell has exited and its output is read (or a background child still holding the
    # pipe has had DRAIN_AFTER_EXIT_S), or the deadline: a shell that closes its output and keeps
    # running is still waited for, never cut short by its end of file.
    while True:
        now = time.monotonic()
        if exited_at is None:
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status, exited_at = os.waitstatus_to_exitcode(raw), now
        if exited_at is not None and (eof or now - exited_at >= DRAIN_AFTER_EXIT_S):
            break
        if now >= deadline:
            timed_out = True
            break
        wait = deadline - now
        if exited_at is not None:
            wait = min(wait, exited_at + DRAIN_AFTER_EXIT_S - now)
        elif pidfd is None:
            wait = min(wait, 0.05)
        for fd, _ in poller.poll(max(1, int(wait * 1000) + 1)):
            if fd == read_fd:
                data = os.read(read_fd, READ_CHUNK)
                if data:
                    capture.add(data)
                else:
                    eof = True
                    poller.unregister(read_fd)
            elif fd == pidfd:
                poller.unregister(pidfd)
    kill_strays()
    os.close(read_fd)
    if pidfd is not None:
        os.close(pidfd)
    if status is None:
        status = reap(pid)
    output, truncated = capture.text()
    exit_code = status if status >= 0 else 128 - status
    if timed_out:
        exit_code = 124
        output += (
            f"\n[rlguard: command timed out after {timeout:g}s; it and its background processes were killed]"
        )
    else:
        oom_after = oom_kills()
        if oom_before is not None and oom_after is not None and oom_after > oom_before:
            output += "\n[rlguard: a process was killed: the sandbox ran out of memory]"
    return {
        "output": output,
        "exit_code": exit_code,
        "truncated": truncated,
        "timed_out": timed_out,
        "duration_ms": (time.monotonic() - started) * 1000.0,
    }
