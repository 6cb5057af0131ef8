"""TRUSTED: watches one ``pytest``-mode test run from outside the test process.

Started by the host as ``python3 -I -S -B <grader>/supervisor.py <config>`` in a fresh grading
container, before any workspace code has run anywhere. In order:

1. it makes itself non-dumpable, so the processes it starts (same uid) can neither ptrace it nor
   open its ``/proc/<pid>/mem``, ``fd`` or ``environ``; reads its one-time config (the nonce) and
   deletes it;
2. it forks the test process once. The child installs a seccomp filter that hands every ``execve``
   of it and of its descendants to this process (``exec_guard``), passes the listener over, and
   ``exec``\\ s the launcher with two inherited descriptors: one end of a ``SOCK_SEQPACKET`` socket
   pair, the only way results leave, and the write end of a pipe, the life line;
3. it reads records from the socket with the sender's pid as the kernel states it
   (``SCM_CREDENTIALS``): a record from any other process than the one it started is a violation;
   it answers ``execve`` notifications: the launcher's start passes, a later ``exec`` of the test
   process fails with ``EPERM`` and is a violation (a second start), the commands of subprocesses
   pass and are counted; the life line must stay open until the test process exits;
4. at the deadline it kills the test process group; when the test process is gone it prints one line
   ``RLGUARD-PYTEST <nonce> <base64 gzip JSON>`` on its own stdout, which no other process holds.

Nothing here reads the records' truth: it counts starts, processes, records and bytes, and hands the
host what it saw (``tasks/grading/pytest_score.py`` judges). The records are capped before they are
compressed. Standard library only.
"""

import base64
import ctypes
import gzip
import json
import os
import select
import signal
import socket
import struct
import sys
import time

# -I leaves the script's own directory (the grader's, another uid's) off sys.path: put it back.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import exec_guard

MARKER = "RLGUARD-PYTEST"
PR_SET_DUMPABLE = 4
MAX_RECORD_BYTES = 64 * 1024
RECORDS_CAP_BYTES = 32 * 1024 * 1024
LOG_TAIL_BYTES = 3000
SETUP_TIMEOUT_S = 30.0
LIFELINE_GRACE_S = 0.5
MAX_NOTES = 50
CHILD_FDS = (3, 4)  # the report socket and the life line, as the launcher finds them


def make_non_dumpable():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def run_child(report_end, lifeline_w, setup_end, log_fd, argv, env):
    """In the forked child: descriptors in place, the exec filter, then the launcher. Never returns."""
    try:
        os.setpgid(0, 0)
        # Move every descriptor the child keeps above the ones it must land on, then place them.
        keep = [fcntl_dup(fd) for fd in (report_end, lifeline_w, log_fd, setup_end)]
        setup_end = keep[3]
        devnull = os.open("/dev/null", os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(keep[2], 1)
        os.dup2(keep[2], 2)
        os.dup2(keep[0], CHILD_FDS[0])
        os.dup2(keep[1], CHILD_FDS[1])
        try:
            listener = exec_guard.install()
        except OSError as exc:
            os.write(setup_end, b"N" + str(exc).encode()[:500])
        else:
            socket.send_fds(socket.socket(fileno=os.dup(setup_end)), [b"L"], [listener])
            os.close(listener)
        os.closerange(CHILD_FDS[1] + 1, os.sysconf("SC_OPEN_MAX"))
        os.execve(argv[0], argv, env)
    except BaseException:
        pass
    os._exit(127)


def fcntl_dup(fd):
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD, 10)


class Watch:
    """What the supervisor saw of the run."""

    def __init__(self, child):
        self.child = child
        self.records = []
        self.bytes = 0
        self.over_cap = False
        self.foreign = []
        self.uncredentialed = 0
        self.bad_records = 0
        self.starts = 0
        self.self_execs = 0
        self.execs_denied = []
        self.subprocess_execs = 0
        self.exec_guard = "unavailable"
        self.lifeline_violation = False
        self.exit_record_seen = False
        self.timed_out = False
        self.exit = None

    def add_record(self, data, pid):
        self.bytes += len(data)
        if self.bytes > RECORDS_CAP_BYTES:
            self.over_cap = True
            return
        if pid is None:
            self.uncredentialed += 1  # a runtime without SCM_CREDENTIALS: the sender is unknown
        elif pid != self.child:
            if len(self.foreign) < MAX_NOTES:
                self.foreign.append({"pid": pid, "record": data[:200].decode("utf-8", "replace")})
            else:
                self.foreign.append(None)
            return
        try:
            record = json.loads(data)
        except ValueError:
            self.bad_records += 1
            return
        if not isinstance(record, dict):
            self.bad_records += 1
            return
        self.records.append(record)
        if record.get("kind") == "exit":
            self.exit_record_seen = True

    def on_exec(self, listener):
        try:
            notif_id, pid, _nr = exec_guard.receive(listener)
        except OSError:
            return
        if exec_guard.thread_group(pid) == self.child:
            self.self_execs += 1
            if self.self_execs == 1:  # the launcher itself
                exec_guard.answer(listener, notif_id, True)
                return
            if len(self.execs_denied) < MAX_NOTES:
                self.execs_denied.append(pid)
            exec_guard.answer(listener, notif_id, False)
            return
        self.subprocess_execs += 1
        exec_guard.answer(listener, notif_id, True)


def receive_listener(setup_sock, deadline):
    """The exec filter's listener from the child, or ``(None, why)``."""
    setup_sock.settimeout(max(0.1, deadline - time.monotonic()))
    try:
        message, fds, _flags, _addr = socket.recv_fds(setup_sock, 600, 1)
    except (OSError, TimeoutError) as exc:
        return None, f"no listener from the child: {exc}"
    if fds and message.startswith(b"L"):
        return fds[0], "kernel"
    for fd in fds:
        os.close(fd)
    return None, "unavailable: " + message[1:].decode("utf-8", "replace")


def watch(config, nonce_free_argv, env, log_fd):
    deadline = time.monotonic() + float(config["timeout_s"])
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    parent_end.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    setup_parent, setup_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    lifeline_r, lifeline_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        run_child(child_end.fileno(), lifeline_w, setup_child.fileno(), log_fd, nonce_free_argv, env)
    for handle in (child_end, setup_child):
        handle.close()
    os.close(lifeline_w)
    seen = Watch(pid)
    listener, seen.exec_guard = receive_listener(
        setup_parent, min(deadline, time.monotonic() + SETUP_TIMEOUT_S)
    )
    setup_parent.close()
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    lifeline_open = True
    closed_at = records_at_close = None
    status = None
    cmsg_space = socket.CMSG_SPACE(struct.calcsize("3i"))
    while status is None:
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            seen.timed_out = True
            kill_group(pid)
            break
        watched = [parent_end]
        if listener is not None:
            watched.append(listener)
        if lifeline_open:
            watched.append(lifeline_r)
        if pidfd is not None:
            watched.append(pidfd)
        ready, _, _ = select.select(watched, [], [], min(timeout, 0.05 if pidfd is None else 1.0))
        if parent_end in ready:
            drain(parent_end, seen, cmsg_space, blocking_first=True)
        if listener is not None and listener in ready:
            seen.on_exec(listener)
        if lifeline_open and lifeline_r in ready and not os.read(lifeline_r, 4096):
            # Closed: the launcher exited (its exit record came first, the socket is drained above)
            # or the process image was replaced (close-on-exec), or someone closed it: a violation.
            lifeline_open = False
            drain(parent_end, seen, cmsg_space, blocking_first=False)
            if not seen.exit_record_seen:
                closed_at, records_at_close = time.monotonic(), len(seen.records)
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = raw
    if status is None:
        _, status = os.waitpid(pid, 0)
    drain(parent_end, seen, cmsg_space, blocking_first=False)
    if closed_at is not None:
        # The life line closed before the exit record: a process that then lived on or still sent
        # records had replaced its image (close-on-exec) or closed the line itself; one that just
        # died (a crash, ``os._exit``) did not finish, which the host scores as that.
        lived_on = time.monotonic() - closed_at > LIFELINE_GRACE_S
        seen.lifeline_violation = lived_on or len(seen.records) > records_at_close
    kill_group(pid)
    if listener is not None:
        while select.select([listener], [], [], 0)[0]:  # a descendant's exec waiting on us
            before = seen.subprocess_execs
            seen.on_exec(listener)
            if seen.subprocess_execs == before:
                break
        os.close(listener)
    seen.exit = os.waitstatus_to_exitcode(status)
    return seen


def drain(sock, seen, cmsg_space, blocking_first):
    """Every record waiting on the socket, with the kernel-stated pid of its sender."""
    sock.setblocking(False)
    while True:
        try:
            data, ancdata, flags, _ = sock.recvmsg(MAX_RECORD_BYTES, cmsg_space)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        if not data and not ancdata:
            return
        pid = None
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= 12:
                pid = struct.unpack("3i", payload[:12])[0]
        if flags & socket.MSG_TRUNC:
            seen.bad_records += 1
            continue
        seen.add_record(data, pid)


def kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def log_tail(fd):
    """The end of pytest's log (a nameless file: the test process writes it, nobody can reopen it)."""
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        return os.pread(fd, LOG_TAIL_BYTES, max(0, end - LOG_TAIL_BYTES)).decode("utf-8", "replace")
    except OSError:
        return ""


def main(config_path):
    make_non_dumpable()
    with open(config_path) as fh:
        config = json.load(fh)
    os.unlink(config_path)
    nonce = config.pop("nonce")
    log_fd = os.open("/tmp", os.O_TMPFILE | os.O_RDWR, 0o600)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    argv = [sys.executable, "-I", "-B", config["launcher"], config["launcher_config"]]
    seen = watch(config, argv, env, log_fd)
    summary = {
        "exit": seen.exit,
        "timed_out": seen.timed_out,
        "records": seen.records,
        "record_bytes": seen.bytes,
        "over_cap": seen.over_cap,
        "bad_records": seen.bad_records,
        "foreign_records": len(seen.foreign),
        "foreign": [f for f in seen.foreign if f][:10],
        "uncredentialed_records": seen.uncredentialed,
        "exec_guard": seen.exec_guard,
        "self_execs": seen.self_execs,
        "execs_denied": len(seen.execs_denied),
        "subprocess_execs": seen.subprocess_execs,
        "lifeline_violation": seen.lifeline_violation,
        "log_tail": log_tail(log_fd),
    }
    text = json.dumps(summary, separators=(",", ":")).encode()
    if len(text) > RECORDS_CAP_BYTES + 1024 * 1024:
        text = json.dumps({"over_cap": True, "exit": seen.exit}).encode()
    payload = base64.b64encode(gzip.compress(text, compresslevel=6)).decode()
    sys.stdout.write(f"\n{MARKER} {nonce} {payload}\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: supervisor.py CONFIG.json")
    sys.exit(main(sys.argv[1]))
