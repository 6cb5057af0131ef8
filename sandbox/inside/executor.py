"""The in-sandbox command runner: JSON requests on stdin, JSON answers on stdout, one per line.

The host starts it once per sandbox with ``docker exec`` (its source passed in the environment, so
the image needs nothing but the interpreter) and keeps the exec's attach stream open: no socket file
exists that the agent could swap, and no listening port exists at all. Standard library only.

It runs as the agent's user. It makes itself non-dumpable, so the agent can neither ptrace it nor
open its ``/proc/<pid>/fd`` or ``mem`` (reading requests, forging answers); it can still kill or
stop it, so the host treats every answer as untrusted (sizes capped, JSON validated, random request
ids, its own deadline) and restarts it when it dies. It names itself ``rlguard-exec`` and ignores
SIGTERM/SIGINT/SIGHUP so a casual ``pkill`` leaves it alone.

Per command: a new session (``setsid``), stdout and stderr on one pipe (order kept), output kept as
head + tail within the cap while streaming; when the command ends (or times out: exit code 124)
every other process of the agent's uid is SIGKILLed, so nothing outlives its call. File operations
check the object they opened, not a name, so no racer can lead them out of /workspace.
"""

import binascii
import errno
import fcntl
import os
import select
import stat
import sys
import time

try:  # C modules only: ``json`` and ``signal`` pull in re and enum, most of the start-up time
    import _json
    import _signal as signal
except ImportError:  # an interpreter without them: the plain modules work the same
    _json = None
    import signal

WORKSPACE = "/workspace"
SHELL = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
READ_CHUNK = 1 << 20
F_SETPIPE_SZ = 1031
DRAIN_AFTER_EXIT_S = 0.2
MAX_LIST_ENTRIES = 10000
DEVNULL = os.open("/dev/null", os.O_RDONLY)
DEVNULL_W = os.open("/dev/null", os.O_WRONLY)


class _ScanContext:
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float
    memo = None


def load_json(text):
    """Parse one JSON document (the host's request) with the C scanner behind ``json.loads``."""
    if _json is None:
        import json

        return json.loads(text)
    text = text.strip()
    value, end = _json.make_scanner(_ScanContext())(text, 0)
    if end != len(text):
        raise ValueError("extra data after the JSON value")
    return value


def dump_json(value):
    """Serialise an answer (str, int, float, bool, None, list, dict) as ASCII JSON."""
    if isinstance(value, str):
        return _json.encode_basestring_ascii(value) if _json else __import__("json").dumps(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return repr(value) if value == value and value not in (float("inf"), float("-inf")) else "null"
    if isinstance(value, list | tuple):
        return "[" + ",".join(dump_json(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(dump_json(str(k)) + ":" + dump_json(v) for k, v in value.items()) + "}"
    raise TypeError(f"cannot serialise {type(value).__name__}")


class Refused(Exception):
    """A request the runner will not carry out; ``kind`` tells the host which error to raise."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def protect_self():
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write("rlguard-exec")
    except OSError:
        pass
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0; children are dumpable again after exec
    except Exception:
        pass
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)  # a handler, not SIG_IGN: children get the default back


def spawn(argv, stdin, stdout, stderr, setsid=False):
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


def reap(pid):
    """Wait for ``pid`` and return its exit code (negative: killed by that signal)."""
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


class Capture:
    """Head and tail of a stream within ``cap`` bytes, however long the stream runs."""

    def __init__(self, cap):
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = b""
        self.total = 0

    def add(self, data):
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail = (self.tail + data[-self.tail_cap :])[-self.tail_cap :]

    def text(self):
        kept = len(self.head) + len(self.tail)
        if self.total <= kept:
            return (bytes(self.head) + self.tail).decode("utf-8", "replace"), False
        marker = f"\n[... {self.total - kept} bytes truncated ...]\n"
        return self.head.decode("utf-8", "replace") + marker + self.tail.decode("utf-8", "replace"), True


def oom_kills():
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


def process_table():
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


def kill_strays():
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


def run_command(request):
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


def lexical(path):
    """``path`` made absolute and normalised; refused unless it names /workspace or lies below it.

    Only the spelling is checked here; where the name really leads (symlinks, renames racing the
    call) is checked on the opened object itself (:func:`inside`).
    """
    path = str(path)
    if "\0" in path:
        raise Refused("invalid", "path contains a NUL byte")
    full = os.path.normpath(path if path.startswith("/") else os.path.join(WORKSPACE, path))
    full = "/" + full.lstrip("/")
    if full != WORKSPACE and not full.startswith(WORKSPACE + "/"):
        raise Refused("path_escape", f"path {path!r} leaves /workspace")
    return full


def inside(fd, shown):
    """``fd``'s status, if the object it names is in /workspace (else it is closed and refused).

    Checked on the open object, not on a name, so no rename or symlink swap can slip in between
    the check and the use: the object must be on the workspace's own file system (a tmpfs mounted
    at /workspace, nothing else of it is mounted anywhere) and the kernel's name for it must lie
    below /workspace.
    """
    info = os.fstat(fd)
    try:
        where = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        where = ""
    if info.st_dev != os.stat(WORKSPACE).st_dev or not (
        where == WORKSPACE or where.startswith(WORKSPACE + "/")
    ):
        os.close(fd)
        raise Refused("path_escape", f"path {shown!r} leaves /workspace")
    return info


def open_inside(full, shown, directory=False):
    """An ``O_PATH`` descriptor of what ``full`` leads to (symlinks followed), refused outside, and
    refused unless it is a directory (``directory``) or a regular file."""
    try:
        fd = os.open(full, os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        raise Refused("not_found", f"no such {'directory' if directory else 'file'}: {shown}") from None
    except OSError as exc:
        raise Refused("invalid", f"cannot open {shown}: {exc.strerror}") from None
    info = inside(fd, shown)
    if directory and not stat.S_ISDIR(info.st_mode):
        os.close(fd)
        raise Refused("invalid", f"not a directory: {shown}")
    if not directory and not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise Refused(
            "invalid", f"{'is a directory' if stat.S_ISDIR(info.st_mode) else 'not a regular file'}: {shown}"
        )
    return fd


def reopen(fd, flags):
    """Open the very object ``fd`` names (no path lookup again) with real access ``flags``."""
    try:
        return os.open(f"/proc/self/fd/{fd}", flags | os.O_CLOEXEC | os.O_NONBLOCK)
    finally:
        os.close(fd)


def ensure_directory(full, shown):
    """An ``O_PATH`` descriptor of directory ``full``, creating missing components one by one.

    Every component is opened relative to the checked descriptor of its parent and checked in
    turn, so a directory is only ever created inside /workspace whatever a racer renames.
    """
    fd = os.open(WORKSPACE, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    for part in full[len(WORKSPACE) :].split("/"):
        if not part:
            continue
        try:
            try:
                child = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                child = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError as exc:
            raise Refused("invalid", f"cannot create the directories of {shown}: {exc.strerror}") from None
        finally:
            os.close(fd)
        fd = child
        inside(fd, shown)
    return fd


def read_file(request):
    limit = int(request["max"])
    shown = str(request["path"])
    fd = open_inside(lexical(shown), shown)
    try:
        fd = reopen(fd, os.O_RDONLY)
    except OSError as exc:
        raise Refused("invalid", f"cannot open {shown}: {exc.strerror}") from None
    chunks, size = [], 0
    try:
        while size < limit:
            data = os.read(fd, min(READ_CHUNK, limit - size))
            if not data:
                break
            chunks.append(data)
            size += len(data)
    finally:
        os.close(fd)
    return {"data": encode(b"".join(chunks))}


def write_file(request):
    shown = str(request["path"])
    full = lexical(shown)
    if full == WORKSPACE:
        raise Refused("invalid", "cannot write to the workspace directory itself")
    data = decode(request["data"])
    parent = ensure_directory(os.path.dirname(full), shown)
    name = os.path.basename(full)
    try:
        try:
            fd = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                0o644,
                dir_fd=parent,
            )
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            # The name is a symlink: write through it only if it leads to a file in /workspace.
            fd = os.open(name, os.O_PATH | os.O_CLOEXEC, dir_fd=parent)
            inside(fd, shown)
            fd = reopen(fd, os.O_WRONLY)
    except Refused:
        raise
    except FileNotFoundError:
        raise Refused("not_found", f"no such file: {shown}") from None
    except OSError as exc:
        raise Refused("invalid", f"cannot open {shown}: {exc.strerror}") from None
    finally:
        os.close(parent)
    try:
        info = inside(fd, shown)
        if not stat.S_ISREG(info.st_mode):
            raise Refused("invalid", f"not a regular file: {shown}")
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    return {}


def list_dir(request):
    shown = str(request["path"])
    fd = open_inside(lexical(shown), shown, directory=True)
    try:
        fd = reopen(fd, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise Refused("invalid", f"cannot list {shown}: {exc.strerror}") from None
    entries = []
    try:
        with os.scandir(fd) as scan:
            for entry in scan:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    kind = "symlink"
                elif stat.S_ISDIR(info.st_mode):
                    kind = "dir"
                elif stat.S_ISREG(info.st_mode):
                    kind = "file"
                else:
                    kind = "other"
                name = entry.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                entries.append([name, kind, info.st_size])
                if len(entries) >= MAX_LIST_ENTRIES:
                    break
    finally:
        os.close(fd)
    entries.sort()
    return {"entries": entries}


def encode(data):
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def decode(text):
    return binascii.a2b_base64(text.encode("ascii"))


def put_tar(request):
    data = decode(request["data"])
    # Through a nameless temporary file, not a pipe: tar's stdin then never blocks the runner.
    archive = os.open("/tmp", os.O_TMPFILE | os.O_RDWR, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(archive, view) :]
        os.lseek(archive, 0, os.SEEK_SET)
        err_r, err_w = os.pipe()
        try:
            argv = ["tar", "-x", "--no-same-owner", "--no-same-permissions", "-C", WORKSPACE, "-f", "-"]
            pid = spawn(argv, archive, DEVNULL_W, err_w)
        finally:
            os.close(err_w)
        errors = read_capped(err_r, 4096)
        os.close(err_r)
    finally:
        os.close(archive)
    if reap(pid) != 0:
        raise Refused("invalid", "workspace archive rejected: " + errors.decode("utf-8", "replace"))
    return {}


def read_capped(fd, limit):
    """Read ``fd`` to its end, keeping at most ``limit`` bytes (the rest is read and dropped)."""
    kept = bytearray()
    while True:
        data = os.read(fd, READ_CHUNK)
        if not data:
            return bytes(kept)
        kept += data[: max(0, limit - len(kept))]


def get_tar(request):
    limit = int(request["max"])
    out_r, out_w = os.pipe()
    try:
        # Unreadable files (``chmod 000``) are skipped, not fatal: the agent cannot make the export
        # fail and so keep its episode out of training; what it hid is simply not graded.
        argv = ["tar", "-c", "--ignore-failed-read", "-C", WORKSPACE, "-f", "-", "."]
        pid = spawn(argv, DEVNULL, out_w, DEVNULL_W)
    finally:
        os.close(out_w)
    chunks, size = [], 0
    try:
        while True:
            data = os.read(out_r, READ_CHUNK)
            if not data:
                break
            size += len(data)
            if size > limit:
                os.kill(pid, signal.SIGKILL)
                reap(pid)
                raise Refused("too_large", f"workspace archive exceeds {limit} bytes")
            chunks.append(data)
    finally:
        os.close(out_r)
    if reap(pid) not in (0, 1):  # 1: a file changed while it was read
        raise Refused("error", "tar of the workspace failed")
    return {"data": encode(b"".join(chunks))}


HANDLERS = {
    "ping": lambda request: {"pid": os.getpid()},
    "exec": run_command,
    "read": read_file,
    "write": write_file,
    "list": list_dir,
    "put_tar": put_tar,
    "get_tar": get_tar,
}


def answer(line):
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


def main():
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


if __name__ == "__main__":
    main()
