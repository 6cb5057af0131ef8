"""The kernel's word on ``execve``: a seccomp user-notification filter for the test process.

Installed by the supervisor's child after ``fork`` and before it ``exec``\\ s the launcher, so it
binds the test process and everything it starts, and no code in them can remove it (seccomp
filters only ever add up). Every ``execve``/``execveat`` of theirs waits until the supervisor, who
holds the listener, answers: the supervisor lets the one launcher start through and any later
``exec`` of the test process itself fail with ``EPERM`` (that is a second start), and lets the
commands the tests' subprocesses run go on, counting them. Standard library (ctypes) only.

Where the kernel or the container's own seccomp profile refuses user notification (old kernels,
some sandboxed runtimes), ``install`` raises ``OSError`` and the supervisor falls back on the
life line and the in-process monitor, and says so in its result.
"""

import ctypes
import fcntl
import os
import struct

SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_USER_NOTIF = 0x7FC00000
SECCOMP_USER_NOTIF_FLAG_CONTINUE = 1
PR_SET_NO_NEW_PRIVS = 38
# ioctls on the listener: _IOWR('!', 0, struct seccomp_notif), _IOWR('!', 1, struct seccomp_notif_resp)
NOTIF_RECV = 0xC0502100
NOTIF_SEND = 0xC0182101
NOTIF_SIZE = 80  # u64 id, u32 pid, u32 flags, struct seccomp_data (int nr, u32 arch, u64 ip, u64 args[6])
EPERM = 1

# (audit arch, seccomp syscall number, execve numbers): native, 32-bit and x32 ABIs all notify.
ARCHES = {
    "x86_64": (0xC000003E, 317, (59, 322, 0x40000000 | 520, 0x40000000 | 545)),
    "i386": (0x40000003, None, (11, 358)),
    "aarch64": (0xC00000B7, 277, (221, 281)),
}
# BPF: ld, jeq, ret
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06


def _program():
    """``execve``-family calls of every ABI the machine runs notify the listener; all else passes.

    Per ABI: load the arch; if it is not this ABI, jump over its block; else load the syscall
    number and jump to the notify return on any ``execve`` number. Then allow."""
    machine = os.uname().machine
    abis = [ARCHES["x86_64"], ARCHES["i386"]] if machine == "x86_64" else [ARCHES["aarch64"]]
    out = []  # (code, jt, jf, k); jt of a syscall test is "NOTIFY" until the end is known
    for audit_arch, _, numbers in abis:
        out.append((BPF_LD_W_ABS, 0, 0, 4))  # seccomp_data.arch
        out.append((BPF_JEQ_K, 0, 1 + len(numbers), audit_arch))
        out.append((BPF_LD_W_ABS, 0, 0, 0))  # seccomp_data.nr
        out.extend((BPF_JEQ_K, "NOTIFY", 0, number) for number in numbers)
    out.append((BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    notify_at = len(out)
    out.append((BPF_RET_K, 0, 0, SECCOMP_RET_USER_NOTIF))
    return [(c, notify_at - i - 1 if jt == "NOTIFY" else jt, jf, k) for i, (c, jt, jf, k) in enumerate(out)]


def install():
    """Install the filter on the calling process; the listener's file descriptor (``OSError`` if the
    kernel or the container's profile refuses)."""
    machine = os.uname().machine
    native = ARCHES.get("x86_64" if machine == "x86_64" else machine)
    if native is None or native[1] is None:
        raise OSError(f"no seccomp syscall number known for {machine}")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    insns = _program()
    filters = (ctypes.c_ubyte * (8 * len(insns)))()
    ctypes.memmove(filters, b"".join(struct.pack("=HBBI", *insn) for insn in insns), 8 * len(insns))

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Prog(len(insns), ctypes.addressof(filters))
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(
        ctypes.c_long(native[1]),
        ctypes.c_long(SECCOMP_SET_MODE_FILTER),
        ctypes.c_long(SECCOMP_FILTER_FLAG_NEW_LISTENER),
        ctypes.byref(prog),
    )
    if fd < 0:
        raise OSError(ctypes.get_errno(), "seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER)")
    return fd


def receive(listener):
    """One pending notification: ``(id, pid, syscall number)``; ``OSError`` when none or gone."""
    buf = bytearray(NOTIF_SIZE)
    fcntl.ioctl(listener, NOTIF_RECV, buf, True)
    notif_id, pid, _flags, nr = struct.unpack_from("=QIIi", buf, 0)
    return notif_id, pid, nr


def answer(listener, notif_id, allow):
    """Let the call go on (``allow``), or make it fail with EPERM."""
    if allow:
        resp = struct.pack("=QqiI", notif_id, 0, 0, SECCOMP_USER_NOTIF_FLAG_CONTINUE)
    else:
        resp = struct.pack("=QqiI", notif_id, 0, -EPERM, 0)
    try:
        fcntl.ioctl(listener, NOTIF_SEND, bytearray(resp), True)
    except OSError:
        pass  # the caller died or was interrupted in the meantime: nothing to answer


def thread_group(pid):
    """The process (thread group) a notifying thread belongs to, from ``/proc/<pid>/status``."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return pid
