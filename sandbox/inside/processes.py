"""The runner's own process and the processes it starts: self-protection, spawning, reaping, and
killing everything of the agent's uid when a command ends.

The runner runs as the agent's user. It makes itself non-dumpable, so the agent can neither ptrace
it nor open its ``/proc/<pid>/fd`` or ``mem`` (reading requests, forging answers); it can still
kill or stop it, so the host treats every answer as untrusted and restarts it when it dies. It
names itself ``rlguard-exec`` and ignores SIGTERM/SIGINT/SIGHUP so a casual ``pkill`` leaves it
alone. Standard library only.
"""

import os
import time

try:  # the C module only: ``signal`` pulls in enum, a large share of the start-up time
    import _signal as signal
except ImportError:  # an interpreter without it: the plain module works the same
    import signal

READ_CHUNK = 1 << 20
DEVNULL = os.open("/dev/null", os.O_RDONLY)
DEVNULL_W = os.open("/dev/null", os.O_WRONLY)


def protect_self() -> None:
    """Name this process ``rlguard-exec``, make it non-dumpable, and survive a casual ``pkill``."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        # PR_SET_NAME (the comm ``pkill`` matches; gVisor does not let /proc/self/comm be written)
        libc.prctl(15, b"rlguard-exec", 0, 0, 0)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0; children are dumpable again after exec
    except Exception:
        pass
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)  # a handler, not SIG_IGN: children get the default back


def spawn(argv: list[str], stdin: int, stdout: int, stderr: int, setsid: bool = False) -> int:
    """Start ``argv`` with the given fds as 0/1/2 (all other fds are close-on-exec).

    ``os.posix_spawn`` instead of ``subprocess``: the runner starts in every fresh sandbox, and
    not importing subprocess (and its threading, selectors, ...) cuts its start-up time.
    """
    actions = [
        (os.POSIX_SPAWN_DUP2, stdin, 0),
        (os.POSIX_SPAWN_DUP2, stdout, 1),
        (os.POSIX_SPAWN_DUP2, stderr, 2),
    ]
    return os.posix_spawnp(
        argv[0],
        argv,
        os.environ,
        file_actions=actions,
        setsid=setsid,
        setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
    )


def reap(pid: int) -> int:
    """Wait for ``pid`` and return its exit code (negative: killed by that signal)."""
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def kill_and_reap(pid: int) -> None:
    """SIGKILL ``pid`` and wait for it."""
    os.kill(pid, signal.SIGKILL)
    reap(pid)


def read_capped(fd: int, limit: int) -> bytes:
    """Read ``fd`` to its end, keeping at most ``limit`` bytes (the rest is read and dropped)."""
    kept = bytearray()
    while True:
        data = os.read(fd, READ_CHUNK)
        if not data:
            return bytes(kept)
        kept += data[: max(0, limit - len(kept))]


def process_table() -> dict[int, tuple[str, int, int, int, int]]:
    """Every visible process: pid -> (state, ppid, pgid, session, start time)."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                raw = handle.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        table[int(name)] = (fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))
    return table


def kill_strays() -> None:
    """SIGKILL every process of the agent's uid but the runner itself, until none is left.

    Nothing a command starts outlives it: not a background job that closed its output, not a
    double-forked daemon. So no process can race a later file operation, and none can write into a
    later command's recorded output. ``kill(-1)`` reaches every process this uid may signal except
    the caller (the container's init and keep-alive run as ``nobody``); a fork racing the first
    sweep is caught by the next one.
    """
    me = os.getpid()
    for _ in range(200):
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass  # ESRCH: nothing left to signal
        left = False
        for pid, row in process_table().items():
            if pid == me or row[0] in ("Z", "X"):
                continue
            try:
                os.kill(pid, 0)
            except OSError:
                continue  # not ours, or already gone
            left = True
            break
        if not left:
            return
        time.sleep(0.002)
